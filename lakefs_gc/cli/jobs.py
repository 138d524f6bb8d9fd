"""``lakefs-gc mark`` and ``lakefs-gc sweep``: one GC run from the command line, against the core.

Commands of the ``lakefs-gc`` group (:mod:`lakefs_gc.cli`, which imports this module when one runs)::

    lakefs-gc mark lakefs://repo [--lite | --master local[*]] [--dry-run] [--sweep]
                   [--min-age 24h] [--now 2026-01-01T00:00:00Z] [--tags pin|ignore]
                   [--partitions N] [--mirrors-db URL [--source-region R]] [--config core.yaml]
    lakefs-gc sweep lakefs://repo --mark-id ID [--dry-run] [--mirrors-db URL] [--config core.yaml]

The core is opened from the ``lakefs-core`` configuration (``--config``, env ``LAKEFS_CORE_CONFIG``,
else the user's file, else the embedded SQLite database). By default the mark runs on PySpark with
``local[*]`` in this process (the driver); ``--lite`` runs the same functions without a JVM. Each
command holds the repository's GC lease (``gc/<repo>``, the daemon's) for its whole run, so a CLI run
and a daemon never work on one repository at once. The result (the mark's ``summary.json`` fields,
the sweep's report) is printed as one JSON document.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import click

from lakefs_core.errors import BadInputError, ConflictError, NotFoundError
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import REPO_URI
from lakefs_gc.pins import PinSource

T = TypeVar("T")
LEASE_TTL = 120.0
_DURATION = re.compile(r"([0-9]{1,12})([smhd]?)")  # ASCII digits only (\d takes any script's)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION = timedelta(days=36500)


def parse_duration(text: str) -> timedelta:
    """``90``, ``90s``, ``30m``, ``24h``, ``7d``; at most :data:`MAX_DURATION` (100 years)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise BadInputError(f"{text!r} is not a duration (e.g. 24h, 30m, 0s)", field="min_age")
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise BadInputError(f"{text!r} is longer than {MAX_DURATION.days} days", field="min_age")
    return timedelta(seconds=seconds)


@contextlib.asynccontextmanager
async def holding_lease(kv: KVStore, repo_id: str) -> AsyncIterator[None]:
    """Hold ``gc/<repo>`` (renewed in the background) or refuse with :class:`ConflictError`."""
    from lakefs_core.service.lease import kv_lease

    holder = f"lakefs-gc-cli@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    lease = kv_lease(kv, f"gc/{repo_id}", holder, LEASE_TTL, extra={"repository": repo_id})
    if not await lease.try_acquire():
        raise ConflictError(f"another GC run holds repository {repo_id!r} (lease gc/{repo_id})")

    async def renew() -> None:
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            if not await lease.renew():
                raise ConflictError(f"lost the GC lease of {repo_id!r}")

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await lease.release()


def _run(config_path: Path | None, fn: Callable[[Any], Awaitable[T]]) -> T:
    from lakefs_core.coreconfig import default_kv_url, load_core_config
    from lakefs_core.wiring import open_core

    settings = load_core_config(config_path)

    async def main() -> T:
        async with await open_core(settings, default_kv_url=default_kv_url()) as core:
            return await fn(core)

    return asyncio.run(main())


@contextlib.asynccontextmanager
async def _pins(url: str | None, source_region: str | None) -> AsyncIterator[PinSource | None]:
    if url is None:
        yield None
        return
    from lakefs_gc.pins import open_mirror_pins

    pins = await open_mirror_pins(url, source_region=source_region)
    try:
        yield pins
    finally:
        await pins.aclose()


def _print(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, indent=1, sort_keys=True, default=str))


_config = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LAKEFS_CORE_CONFIG",
    default=None,
    help="The core's YAML configuration (env LAKEFS_CORE_CONFIG).",
)
_mirrors = click.option(
    "--mirrors-db", envvar="LAKEFS_GC_MIRRORS_DB_URL", default=None, help="Mirrors DB URL: pin mirror heads."
)


@click.command("mark")
@click.argument("repository", type=REPO_URI)
@click.option("--lite", is_flag=True, help="Run in-process without Spark (small repositories).")
@click.option("--master", default="local[*]", show_default=True, help="Spark master.")
@click.option("--dry-run", is_flag=True, help="Mark only; the mark can never be swept.")
@click.option("--sweep", "then_sweep", is_flag=True, help="Sweep after a successful mark (a full run).")
@click.option("--min-age", default="24h", show_default=True, help="Objects younger than this are kept.")
@click.option("--now", default=None, help="Retention 'now' as an ISO instant (default: the clock).")
@click.option("--tags", type=click.Choice(["pin", "ignore"]), default="pin", show_default=True)
@click.option("--partitions", type=click.IntRange(1, 100_000), default=None)
@_mirrors
@click.option("--source-region", default=None, help="With --mirrors-db: this region's name.")
@_config
def mark_cmd(
    *,
    repository: LakeFSURI,
    lite: bool,
    master: str,
    dry_run: bool,
    then_sweep: bool,
    min_age: str,
    now: str | None,
    tags: str,
    partitions: int | None,
    mirrors_db: str | None,
    source_region: str | None,
    config_path: Path | None,
) -> None:
    """Mark the garbage of REPOSITORY (lakefs://repo); with --sweep, delete it too."""
    from lakefs_gc.mark.mark import MarkOptions, run_mark
    from lakefs_gc.runs.reports import parse_instant

    if dry_run and then_sweep:
        raise BadInputError("--dry-run marks are never swept", field="sweep")
    try:
        when = parse_instant(now) if now is not None else None
    except ValueError as e:
        raise BadInputError(str(e), field="now") from None
    options = MarkOptions(
        now=when,
        min_age=parse_duration(min_age),
        tags_policy="ignore" if tags == "ignore" else "pin",
        mode="dry-run" if dry_run else ("full" if then_sweep else "mark"),
        partitions=partitions,
    )
    repo = repository.repo

    async def go(core: Any) -> dict[str, Any]:
        from lakefs_core.compute.executor import LiteExecutor, SparkExecutor

        executor = LiteExecutor() if lite else SparkExecutor(master=master)
        async with holding_lease(core.kv, repo), _pins(mirrors_db, source_region) as pins:
            try:
                result = await run_mark(core.graveler, repo, executor, options=options, pins=pins)
            finally:
                executor.close()
            out: dict[str, Any] = {"mark": json.loads(result.summary.to_bytes())}
            if then_sweep:
                report = await _sweep(core, repo, result.run_id, dry_run=False, pins=pins)
                out["sweep"] = report.model_dump(mode="json")
            return out

    _print(_run(config_path, go))


async def _sweep(core: Any, repo: str, mark_id: str, *, dry_run: bool, pins: PinSource | None) -> Any:
    from lakefs_core.repos.graveler import StorageNamespace
    from lakefs_core.service.deleter import store_deleter
    from lakefs_gc.sweep.sweep import SweepOptions, run_sweep

    ns = StorageNamespace((await core.graveler.repository(repo)).storage_namespace)
    store = await core.graveler.namespace_store(ns)
    return await run_sweep(
        core.graveler,
        repo,
        mark_id,
        deleter=None if dry_run else store_deleter(store),
        options=SweepOptions(dry_run=dry_run),
        pins=pins,
    )


@click.command("sweep")
@click.argument("repository", type=REPO_URI)
@click.option("--mark-id", required=True, help="The run id of a successful mark.")
@click.option("--dry-run", is_flag=True, help="Re-verify and count; delete nothing.")
@_mirrors
@click.option("--source-region", default=None, help="With --mirrors-db: this region's name.")
@_config
def sweep_cmd(
    *,
    repository: LakeFSURI,
    mark_id: str,
    dry_run: bool,
    mirrors_db: str | None,
    source_region: str | None,
    config_path: Path | None,
) -> None:
    """Delete what mark MARK_ID of REPOSITORY found (re-verified first); resumes a killed sweep."""
    repo = repository.repo

    async def go(core: Any) -> dict[str, Any]:
        async with holding_lease(core.kv, repo), _pins(mirrors_db, source_region) as pins:
            swept = await _known_mark(core, repo, mark_id)
            if dry_run and swept is not None:
                # nothing left to verify: say what happened instead of re-running the checks
                when = swept.end_time or "an unrecorded time"
                click.echo(
                    f"lakefs-gc: mark {mark_id} of {repo!r} was swept at {when} ({swept.deleted} deleted); "
                    "a dry run has nothing left to do",
                    err=True,
                )
                return {"mark_id": mark_id, "swept": True, "sweep": swept.model_dump(mode="json")}
            report = await _sweep(core, repo, mark_id, dry_run=dry_run, pins=pins)
        dumped: dict[str, Any] = report.model_dump(mode="json")
        return dumped

    _print(_run(config_path, go))


async def _known_mark(core: Any, repo: str, mark_id: str) -> Any:
    """Refuse a mark id the repository has no run of (:class:`NotFoundError`, not the sweep's "no
    summary"); the run's finished (not dry-run) sweep report when it was swept, else ``None``."""
    from lakefs_core.repos.graveler import StorageNamespace, check_run_id
    from lakefs_gc.runs.runs import read_stored_run

    try:
        check_run_id(mark_id)
    except BadInputError:
        raise BadInputError(f"{mark_id!r} is not a GC run id", field="--mark-id") from None
    ns = StorageNamespace((await core.graveler.repository(repo)).storage_namespace)
    stored = await read_stored_run(core.graveler, repo, await core.graveler.namespace_store(ns), ns, mark_id)
    if stored.record is None and not stored.has_files and not stored.errors:
        raise NotFoundError(
            f"no such mark {mark_id!r} in repository {repo!r} (`lakefs-gc mark` prints its run_id)"
        )
    return stored.sweep if stored.state == "swept" else None

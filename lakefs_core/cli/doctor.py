"""``lakefs-core doctor`` and ``lakefs-core config``: is this set-up usable, and writing its file.

``doctor`` checks, in order, each with a one-line verdict (``ok``, ``skipped`` or ``FAIL``) on
stdout (one JSON document with ``--json``):

1. **configuration**: the file (``--config``, else the user's) plus ``LAKEFS_CORE__...`` overrides
   validate;
2. **kv**: the KV store opens and answers a listing of repositories;
3. **store**: every repository's storage namespace (at most :data:`MAX_REPOSITORIES`) answers a
   read of its ``_lakefs/dummy`` marker (read-only: doctor writes nothing);
4. **credentials**: the S3 credentials (their configured source) are accepted by an ``s3://``
   namespace's bucket (skipped without one); ``auth.encrypt.secret_key`` is reported as set or not.

A check that cannot run because an earlier one failed is ``skipped``. Exit 0 when nothing failed,
else the exit code of the first failure's error class (:mod:`lakefs_core.errors`). Each check is
bounded by :data:`CHECK_TIMEOUT` seconds.

``config`` writes the configuration file as ``lakectl config`` does its own: on a terminal it asks
for each key (the current value as default), otherwise it takes them as options; the result is
validated before it replaces the file (atomically, owner-only ``0600``: it may hold secrets).
``config --show`` prints the file's path and content with secrets masked.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from lakefs_core.cli.output import wants_json
from lakefs_core.cli.state import app_state
from lakefs_core.errors import LakeFSError, TransientError
from lakefs_core.service.cli import one_line

MAX_REPOSITORIES = 50
CHECK_TIMEOUT = 20.0


@dataclass
class Verdict:
    check: str
    status: str  # ok | skipped | FAIL
    detail: str
    exit_code: int = 0

    def line(self) -> str:
        return f"{self.check:<14}{self.status:<8}{one_line(self.detail)}"


async def _bounded(what: Callable[[], Awaitable[str]]) -> tuple[str, LakeFSError | None]:
    try:
        return await asyncio.wait_for(what(), CHECK_TIMEOUT), None
    except TimeoutError:
        return "", TransientError(f"no answer within {CHECK_TIMEOUT:g} s")
    except LakeFSError as e:
        return "", e
    except OSError as e:
        return "", LakeFSError(f"{type(e).__name__}: {e.strerror or e}")


async def _diagnose(config: Any) -> list[Verdict]:
    from lakefs_core.cli.context import open_session
    from lakefs_core.namespace import StorageNamespace

    verdicts: list[Verdict] = []
    try:
        session_cm = open_session(config)
        session = await asyncio.wait_for(session_cm.__aenter__(), CHECK_TIMEOUT)
    except (LakeFSError, OSError, TimeoutError) as e:
        code = e.exit_code if isinstance(e, LakeFSError) else TransientError.exit_code
        verdicts.append(Verdict("kv", "FAIL", f"{config.kv_shown()}: {e}", code))
        verdicts += [Verdict(c, "skipped", "the KV store did not open") for c in ("store", "credentials")]
        return verdicts
    try:
        repos: list[Any] = []

        async def listing() -> str:
            async for r in session.graveler.list_repositories():
                repos.append(r)
                if len(repos) >= MAX_REPOSITORIES:
                    break
            return f"{config.kv_shown()}: {len(repos)} repositor{'y' if len(repos) == 1 else 'ies'}"

        shown, error = await _bounded(listing)
        if error is not None:
            verdicts.append(Verdict("kv", "FAIL", f"{config.kv_shown()}: {error}", error.exit_code))
            return verdicts + [
                Verdict(c, "skipped", "the KV store did not answer") for c in ("store", "credentials")
            ]
        verdicts.append(Verdict("kv", "ok", shown))
        failures: list[tuple[str, LakeFSError]] = []
        s3_ok: list[str] = []
        for repo in repos:
            ns = StorageNamespace.parse(repo.storage_namespace)

            async def probe(ns: StorageNamespace = ns) -> str:
                store = await session.graveler.namespace_store(ns)
                return "marker" if await store.exists(ns.dummy_key()) else "no marker"

            _, error = await _bounded(probe)
            if error is not None:
                failures.append((repo.id, error))
            elif ns.uri.startswith("s3://"):
                s3_ok.append(repo.id)
        verdicts.append(_store_verdict(repos, failures))
        verdicts.append(_credentials_verdict(config, repos, failures, s3_ok))
    finally:
        await session_cm.__aexit__(None, None, None)
    return verdicts


def _store_verdict(repos: list[Any], failures: list[tuple[str, LakeFSError]]) -> Verdict:
    if not repos:
        return Verdict("store", "skipped", "no repository yet")
    if failures:
        repo, error = failures[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        return Verdict("store", "FAIL", f"repository {repo!r}: {error}{more}", error.exit_code)
    return Verdict("store", "ok", f"{len(repos)} namespace(s) answered")


def _credentials_verdict(
    config: Any, repos: list[Any], failures: list[tuple[str, LakeFSError]], s3_ok: list[str]
) -> Verdict:
    secret = (
        "auth.encrypt.secret_key set" if config.auth.encrypt.secret_key else "auth.encrypt.secret_key not set"
    )
    source = getattr(config.s3.credentials, "source", "env")
    s3_repos = {r.id for r in repos if r.storage_namespace.startswith("s3://")}
    s3_failed = [(r, e) for r, e in failures if r in s3_repos]
    if s3_failed:
        repo, error = s3_failed[0]
        return Verdict(
            "credentials", "FAIL", f"S3 ({source}) refused for {repo!r}: {error}; {secret}", error.exit_code
        )
    if not s3_repos:
        return Verdict("credentials", "skipped", f"no s3:// repository to try S3 ({source}) on; {secret}")
    return Verdict(
        "credentials", "ok", f"S3 ({source}) accepted by {len(s3_ok)} s3:// namespace(s); {secret}"
    )


@click.command("doctor")
def doctor_cmd() -> None:
    """Check the configuration, the KV store, the object stores and the credentials, one line each."""
    from lakefs_core.coreconfig import CoreConfig, user_config_file

    state = app_state()
    try:
        config: CoreConfig = state.config()
    except LakeFSError as e:
        verdicts = [Verdict("configuration", "FAIL", str(e), e.exit_code)]
        verdicts += [Verdict(c, "skipped", "no usable configuration") for c in ("kv", "store", "credentials")]
    else:
        where = state.config_path or (
            user_config_file() if user_config_file().is_file() else "defaults (no file)"
        )
        verdicts = [Verdict("configuration", "ok", f"{where}"), *asyncio.run(_diagnose(_Shown(config)))]
    if wants_json():
        docs = [{"check": v.check, "status": v.status.lower(), "detail": v.detail} for v in verdicts]
        click.echo(json.dumps({"checks": docs}, indent=2))
    else:
        for v in verdicts:
            click.echo(v.line())
    failed = [v for v in verdicts if v.status == "FAIL"]
    if failed:
        raise click.exceptions.Exit(failed[0].exit_code)


class _Shown:
    """The configuration with its KV URL shown without secrets."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)

    def kv_shown(self) -> str:
        from lakefs_core.redact import redact_url

        return redact_url(self._config.kv())


# -- config ---------------------------------------------------------------------------------------

_KEYS = (
    ("kv_url", "KV store URL (empty: the embedded SQLite default)"),
    ("committer", "Committer name recorded in commits (empty: your user name)"),
    ("s3.endpoint_url", "S3 endpoint URL (empty: AWS)"),
    ("s3.region", "S3 region (empty: from the environment)"),
)


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data if not isinstance(data, dict) else None


def _set(data: dict[str, Any], dotted: str, value: str | None) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    if value:
        data[last] = value
    else:
        data.pop(last, None)


@click.command("config")
@click.option("--show", is_flag=True, help="Print the file's path and content (secrets masked).")
@click.option("--kv-url", default=None, help="KV store URL ('' removes the key).")
@click.option("--committer", default=None, help="Committer name ('' removes the key).")
@click.option("--s3-endpoint-url", default=None, help="S3 endpoint URL ('' removes the key).")
@click.option("--s3-region", default=None, help="S3 region ('' removes the key).")
def config_cmd(
    *,
    show: bool,
    kv_url: str | None,
    committer: str | None,
    s3_endpoint_url: str | None,
    s3_region: str | None,
) -> None:
    """Write the configuration file (asking on a terminal, as lakectl config), or --show it."""
    from lakefs_core.config import display, load_raw, validate
    from lakefs_core.coreconfig import CoreConfig, user_config_file

    path = app_state().config_path or user_config_file()
    data = load_raw(path) if path.is_file() else {}
    if show:
        shown = display(validate(CoreConfig, data)) if data else {}
        click.echo(
            json.dumps({"config_file": str(path), "exists": path.is_file(), "config": shown}, indent=2)
        )
        return
    given = dict(zip((k for k, _ in _KEYS), (kv_url, committer, s3_endpoint_url, s3_region), strict=True))
    asking = all(v is None for v in given.values())
    if asking and (sys.stdin is None or not sys.stdin.isatty()):
        raise click.UsageError("no terminal to ask on: give the keys as options (--kv-url, --committer, ...)")
    for key, prompt in _KEYS:
        value = given[key]
        if asking:
            value = click.prompt(prompt, default=_get(data, key) or "", show_default=True, err=True)
        if value is not None:
            _set(data, key, value.strip())
    validate(CoreConfig, data)  # every problem in one line (exit 9): nothing is written
    _write_private(path, data)
    click.echo(f"Configuration written to {path}")


def _write_private(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically with ``data`` as YAML, owner-only (it may hold secrets)."""
    import yaml

    from lakefs_core.cli.context import local_path_error
    from lakefs_core.fileperm import make_private_dir

    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        make_private_dir(path.parent)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except OSError as e:
        temp.unlink(missing_ok=True)
        raise local_path_error(e, path, "--config", doing="write") from e

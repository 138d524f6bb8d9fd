"""``lakefs-gc run``, ``lakefs-gc check-config`` and ``lakefs-gc rules get|set|delete``.

- ``lakefs-gc run --config FILE [--once] [--log-format text|json]``: the GC daemon (API, schedules,
  reconciliation) until SIGTERM/SIGINT (a second signal cancels the work in flight: a cancelled
  sweep resumes from its checkpoint on the next start). ``--once`` runs one pass, waits for every
  run and reconciliation it started, and exits 0 when all succeeded, 1 otherwise. Under systemd
  ``Type=notify`` it sends READY=1, WATCHDOG=1 while the loop is live, STOPPING=1.
- ``lakefs-gc check-config --config FILE``: every problem at once (exit 9; 16 for start-up
  problems), or the configuration as JSON with secrets masked.
- ``lakefs-gc rules set lakefs://repo --filename rules.json`` (``-`` reads stdin; lakectl's
  ``gc set-config`` shape), ``rules get lakefs://repo`` (prints lakeFS's JSON; exit 2 "not found"
  when none are set), ``rules delete lakefs://repo``: against the core (``--config`` as the other
  ``lakefs-gc`` commands, env ``LAKEFS_CORE_CONFIG``).

Exit codes as every command of this project (``lakefs_core.errors``): 9 configuration, 16 start-up.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lakefs_core.config import display
from lakefs_core.errors import BadInputError, NotFoundError
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import REPO_URI, echo_problems
from lakefs_core.service.run import (
    config_option,
    load_with_file_hint,
    log_format_option,
    once_option,
    run_daemon,
)
from lakefs_gc.cli.jobs import _config as core_config_option
from lakefs_gc.cli.jobs import _print, _run
from lakefs_gc.config import inspect_gc_config, load_gc_config

if TYPE_CHECKING:
    from lakefs_gc.service import GCService

MAX_RULES_FILE = 1 << 20

GC_CONFIG_ENV = "LAKEFS_GC_CONFIG"
CONFIG_OPTION = config_option(
    GC_CONFIG_ENV, "The daemon's YAML configuration (LAKEFS_GC__* variables override it)."
)


@click.command("run")
@CONFIG_OPTION
@once_option("One pass; wait for its runs; exit 0 if all succeeded.")
@log_format_option("LAKEFS_GC_LOG_FORMAT")
def run_cmd(config_path: Path | None, once: bool, log_format: str) -> None:
    """Run the GC daemon: retention GC on schedules, hard-delete reconciliation, the API."""
    config = load_with_file_hint(
        lambda: load_gc_config(config_path, dict(os.environ)), config_path, GC_CONFIG_ENV
    )

    async def open_service() -> GCService:
        from lakefs_gc.service import GCService

        return await GCService.open(config)

    status = run_daemon(
        open_service,
        config,
        name="lakefs-gc",
        once=once,
        log_format=log_format,
        once_step=lambda service: service.step_and_wait,
    )
    raise click.exceptions.Exit(status)


@click.command("check-config")
@CONFIG_OPTION
def check_config_cmd(config_path: Path | None) -> None:
    """Report every problem of a configuration, or print it with secrets masked."""
    report = inspect_gc_config(config_path, dict(os.environ))
    echo_problems(report, "lakefs-gc", config_path)
    click.echo(json.dumps(display(report.config), indent=2, sort_keys=True))


# -- rules -----------------------------------------------------------------------------------------


@click.group("rules")
def rules_group() -> None:
    """lakeFS-compatible GC rules of a repository (stored in its namespace as lakeFS stores them)."""


async def _store_of(core: Any, repo: str) -> tuple[Any, Any]:
    from lakefs_core.repos.graveler import StorageNamespace

    ns = StorageNamespace((await core.graveler.repository(repo)).storage_namespace)
    return ns, await core.graveler.namespace_store(ns)


def _read_rules_file(filename: str) -> Any:
    if filename == "-":
        raw = sys.stdin.buffer.read(MAX_RULES_FILE + 1)
    else:
        try:
            with open(filename, "rb") as f:
                raw = f.read(MAX_RULES_FILE + 1)
        except OSError as e:
            raise BadInputError(f"cannot read {filename}: {e.strerror or e}", field="filename") from None
    if len(raw) > MAX_RULES_FILE:
        raise BadInputError(f"larger than {MAX_RULES_FILE} bytes", field="filename")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadInputError(f"{filename} is not valid JSON", field="filename") from None


@rules_group.command("set")
@click.argument("repository", type=REPO_URI)
@click.option("--filename", "-f", required=True, help="The rules JSON file ('-' for stdin).")
@core_config_option
def rules_set(repository: LakeFSURI, filename: str, config_path: Path | None) -> None:
    """Set the GC rules of REPOSITORY from a lakeFS rules JSON file."""
    from lakefs_gc.rules import parse_rules_json, save_rules

    rules = parse_rules_json(_read_rules_file(filename))

    async def go(core: Any) -> None:
        ns, store = await _store_of(core, repository.repo)
        await save_rules(store, ns, rules)

    _run(config_path, go)
    click.echo(f"GC rules of {repository.repo} set", err=True)


@rules_group.command("get")
@click.argument("repository", type=REPO_URI)
@core_config_option
def rules_get(repository: LakeFSURI, config_path: Path | None) -> None:
    """Print the GC rules of REPOSITORY (lakeFS's JSON)."""
    from lakefs_gc.rules import load_rules

    async def go(core: Any) -> dict[str, Any]:
        ns, store = await _store_of(core, repository.repo)
        rules = await load_rules(store, ns)
        if rules is None:
            raise NotFoundError(f"no GC rules are set for repository {repository.repo!r}")
        return rules.to_json()

    _print(_run(config_path, go))


@rules_group.command("delete")
@click.argument("repository", type=REPO_URI)
@core_config_option
def rules_delete(repository: LakeFSURI, config_path: Path | None) -> None:
    """Delete the GC rules of REPOSITORY (nothing is collected without rules)."""
    from lakefs_gc.rules import delete_rules

    async def go(core: Any) -> None:
        ns, store = await _store_of(core, repository.repo)
        await delete_rules(store, ns)

    _run(config_path, go)
    click.echo(f"GC rules of {repository.repo} deleted", err=True)

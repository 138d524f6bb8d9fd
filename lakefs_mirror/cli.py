"""The ``lakefs-mirror`` command line.

- ``lakefs-mirror run --config FILE [--once] [--log-format text|json] [--pass-timeout S]``: run
  this region's daemon (HTTP API + mirroring passes) until SIGTERM/SIGINT (a second signal cancels
  the pass in flight); ``--once`` runs one pass and exits 0 if it succeeded. Configuration: the YAML
  file plus ``LAKEFS_MIRROR__...`` environment overrides (see ``deploy/mirror-local.yaml``). Under
  systemd ``Type=notify`` it sends READY=1 once the API is bound and the loop runs, WATCHDOG=1
  while the loop is live (a pass running longer than ``pass_timeout_seconds``, or ``--pass-timeout``
  when given, is hung), STOPPING=1.
- ``lakefs-mirror promote --config FILE MIRROR_ID [--force]`` and ``lakefs-mirror failback --config
  FILE MIRROR_ID [--mode M]``: failover and failback (:mod:`lakefs_mirror.failover`) with the
  configuration's database and regions (a region that cannot be opened counts as unreachable);
  the result is printed as JSON.
- ``lakefs-mirror check-config --config FILE``: report EVERY problem at once, one per line on
  stderr, each naming its key path (schema problems, exit 9; and what would stop the start-up: a
  SQLite directory missing, ``state_dir`` not creatable, exit 16 when nothing else is wrong); a
  valid configuration is printed as JSON with secrets masked (URLs keep all but their password) and
  paths shown.

Exit codes: 0 success; 1 a ``--once`` pass failed; 9 a configuration error (bad value, unknown key:
every problem listed; systemd must not restart); 16 a start-up error naming the key (``listen`` port in use,
``state_dir`` not creatable, a SQLite ``mirrors_db_url`` or ``regions.<name>.kv_url`` whose
directory does not exist); 64 usage; 130 Ctrl-C during start-up (``aborted``). Each is one line on
stderr, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lakefs_core.config import display
from lakefs_core.service.cli import echo_problems, project_group, run
from lakefs_core.service.run import config_option, log_format_option, once_option, run_daemon
from lakefs_mirror.config import MirrorConfig, inspect_mirror_config, load_mirror_config
from lakefs_mirror.records import Promotion

if TYPE_CHECKING:
    from lakefs_mirror.service import AdminHandles, MirrorService


@project_group("lakefs-mirror")
def cli() -> None:
    """Transactional cross-region mirroring daemon for lakeFS-compatible repositories."""


def _load(config: Path | None) -> MirrorConfig:
    return load_mirror_config(config, dict(os.environ))


def pass_timeout_of(config: MirrorConfig, flag: float | None) -> float:
    """The ``--pass-timeout`` flag (or its env variable) when given, else ``pass_timeout_seconds``."""
    return config.pass_timeout_seconds if flag is None else flag


CONFIG_OPTION = config_option(
    "LAKEFS_MIRROR_CONFIG", "YAML configuration (LAKEFS_MIRROR__* variables override it)."
)


@cli.command("run")
@CONFIG_OPTION
@once_option("Run one pass and exit (0 if it succeeded).")
@log_format_option("LAKEFS_MIRROR_LOG_FORMAT")
@click.option(
    "--pass-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    envvar="LAKEFS_MIRROR_PASS_TIMEOUT",
    help="Seconds after which a running pass counts as hung (/_health 503, systemd watchdog unfed); "
    "overrides the pass_timeout_seconds key (default 900).",
)
def run_cmd(config_path: Path | None, once: bool, log_format: str, pass_timeout: float | None) -> None:
    """Run this region's mirroring daemon."""
    config = _load(config_path)

    async def open_service() -> MirrorService:
        from lakefs_mirror.service import MirrorService

        return await MirrorService.open(config)

    status = run_daemon(
        open_service,
        config,
        name=f"lakefs-mirror[{config.region}]",
        once=once,
        log_format=log_format,
        pass_timeout=pass_timeout_of(config, pass_timeout),
    )
    raise click.exceptions.Exit(status)


@cli.command("check-config")
@CONFIG_OPTION
def check_config_cmd(config_path: Path | None) -> None:
    """Report every problem of a configuration (file plus environment), or print it, secrets masked."""
    report = inspect_mirror_config(config_path, dict(os.environ))
    echo_problems(report, "lakefs-mirror", config_path)
    click.echo(json.dumps(display(report.config), indent=2, sort_keys=True))


def _admin(config_path: Path | None, action: Callable[[AdminHandles], Awaitable[object]]) -> object:
    config = _load(config_path)

    async def go() -> object:
        from lakefs_mirror.service import open_admin

        handles = await open_admin(config)
        try:
            return await action(handles)
        finally:
            await handles.close()

    return asyncio.run(go())


@cli.command("promote")
@CONFIG_OPTION
@click.argument("mirror_id")
@click.option(
    "--force", is_flag=True, help="Promote although the source region is reachable and the mirror runs."
)
def promote_cmd(config_path: Path | None, mirror_id: str, force: bool) -> None:
    """Failover: make mirror MIRROR_ID's destination repository writable; mirroring into it stops."""
    from lakefs_mirror.failover import promote

    async def action(h: AdminHandles) -> object:
        return await promote(h.db, h.gravelers, mirror_id, force=force)

    p = _admin(config_path, action)
    assert isinstance(p, Promotion)
    click.echo(
        json.dumps(
            {
                "mirror_id": p.mirror_id,
                "promoted_at": p.promoted_at.isoformat(),
                "forced": p.forced,
                "source_reachable": p.source_reachable,
                "heads": p.heads,
                "source_heads": p.source_heads,
            },
            indent=2,
        )
    )


@cli.command("failback")
@CONFIG_OPTION
@click.argument("mirror_id")
@click.option(
    "--mode", type=click.Choice(["native", "active"]), default=None, help="Mode of the reverse mirror."
)
def failback_cmd(config_path: Path | None, mirror_id: str, mode: str | None) -> None:
    """After a promotion: keep the old source's divergence on failback-* branches, create the
    reverse mirror."""
    from lakefs_mirror.failover import FailbackResult, failback

    async def action(h: AdminHandles) -> object:
        return await failback(h.db, h.gravelers, mirror_id, mode=mode)

    r = _admin(config_path, action)
    assert isinstance(r, FailbackResult)
    click.echo(json.dumps({"reverse_mirror_id": r.reverse.id, "kept": r.kept, "note": r.note}, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C during start-up reaches click as KeyboardInterrupt -> "aborted", 130
    # (lakefs_core.service.cli.run);
    # once the loop runs, SIGINT is a graceful stop (exit 0).
    return run(cli, argv, "lakefs-mirror")


if __name__ == "__main__":
    sys.exit(main())

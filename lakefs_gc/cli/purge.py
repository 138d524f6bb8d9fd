"""``lakefs-gc purge``: the audited purge of a path's objects (see :mod:`lakefs_core.repos.purge`).

    lakefs-gc purge lakefs://repo/ref/path --reason TEXT [--all-history] [--yes] [--actor NAME]

Dry run unless ``--yes``: prints the addresses that would be destroyed. With ``--yes`` the audit
record and the markers are written first, then the objects are deleted; the report (with the audit
id) is printed as JSON. Reading the path afterwards, at any ref, fails with exit 17 ("purged"),
naming the record. History and commit ids are unchanged.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import click

from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import PATH_URI
from lakefs_gc.cli.jobs import _config, _print, _run


def _actor() -> str:
    try:
        return f"{getpass.getuser()}@lakefs-gc-cli"
    except (KeyError, OSError):
        return "unknown@lakefs-gc-cli"


@click.command("purge")
@click.argument("target", type=PATH_URI)
@click.option("--reason", required=True, help="Why (kept in the audit record).")
@click.option("--all-history", is_flag=True, help="Every commit of every branch and tag, and staging.")
@click.option("--yes", is_flag=True, help="Really delete (default: a dry run).")
@click.option("--actor", default=None, help="Who purges (default: the OS user).")
@_config
def purge_cmd(
    *,
    target: LakeFSURI,
    reason: str,
    all_history: bool,
    yes: bool,
    actor: str | None,
    config_path: Path | None,
) -> None:
    """Destroy the objects TARGET (lakefs://repo/ref/path) had; history stays unchanged."""

    async def go(core: Any) -> dict[str, Any]:
        report = await core.graveler.purge_path(
            target.repo,
            target.ref,
            target.path,
            all_history=all_history,
            reason=reason,
            actor=actor or _actor(),
            yes=yes,
        )
        dumped: dict[str, Any] = report.model_dump(mode="json")
        return dumped

    _print(_run(config_path, go))

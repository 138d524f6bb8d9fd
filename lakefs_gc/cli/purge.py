"""``lakefs-gc purge``: the audited purge of a path's objects (see :mod:`lakefs_core.repos.purge`).

    lakefs-gc purge lakefs://repo/ref/path --reason TEXT [--all-history] [--yes] [--actor NAME]
    lakefs-gc purges lakefs://repo

Dry run unless ``--yes``: prints the addresses that would be destroyed, the unfinished purges a
``--yes`` would complete, the objects an earlier purge already covers, and every other ref and path
that shares one of those objects (``shared``; ``shared_truncated`` when the search hit a bound).
With ``--yes`` an unfinished purge of the same target (a crashed run) is completed under its own
audit record; only objects no purge covers yet get a new record, written with its markers before
anything is deleted. The report is printed as JSON. Reading the path afterwards (or after a crash
mid-way), at any purged ref, fails with exit 17 ("purged"), naming the record. History and commit
ids are unchanged. ``purges`` lists the repository's audit records (without their address lists).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import click

from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.service.cli import PATH_URI, REPO_URI
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


@click.command("purges")
@click.argument("repository", type=REPO_URI)
@_config
def purges_cmd(*, repository: LakeFSURI, config_path: Path | None) -> None:
    """List the audit records of REPOSITORY's purges (state, who, when, why, what)."""

    async def go(core: Any) -> dict[str, Any]:
        records = await core.graveler.list_purges(repository.repo)
        brief = {"addresses", "skipped_external"}
        rows = [{**r.model_dump(mode="json", exclude=brief), "objects": len(r.addresses)} for r in records]
        return {"results": rows, "count": len(rows)}

    _print(_run(config_path, go))

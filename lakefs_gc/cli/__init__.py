"""The ``lakefs-gc`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lakefs_core.service.cli import project_group, run

# Each command's module is imported only when the command runs (see lakefs_core.service.cli.CLIGroup):
# the daemon's pulls the HTTP app, the GC configuration and SQLAlchemy, which mark/sweep/purge and
# --version do not all need; --help shows the summaries (a test checks each is its command's help).
_LAZY = {
    "mark": ("jobs:mark_cmd", "Mark the garbage of REPOSITORY (lakefs://repo); with --sweep, delete it too."),
    "sweep": (
        "jobs:sweep_cmd",
        "Delete what mark MARK_ID of REPOSITORY found (re-verified first); resumes a killed sweep.",
    ),
    "run": (
        "daemon:run_cmd",
        "Run the GC daemon: retention GC on schedules, hard-delete reconciliation, the API.",
    ),
    "check-config": (
        "daemon:check_config_cmd",
        "Report every problem of a configuration, or print it with secrets masked.",
    ),
    "rules": (
        "daemon:rules_group",
        "lakeFS-compatible GC rules of a repository (stored in its namespace as lakeFS stores them).",
    ),
    "purge": (
        "purge:purge_cmd",
        "Destroy the objects TARGET (lakefs://repo/ref/path) had; history stays unchanged.",
    ),
    "purges": (
        "purge:purges_cmd",
        "List the audit records of REPOSITORY's purges (state, who, when, why, what).",
    ),
}
_COMMANDS = {name: f"lakefs_gc.cli.{target}" for name, (target, _) in _LAZY.items()}
_SUMMARIES = {name: summary for name, (_, summary) in _LAZY.items()}


@project_group("lakefs-gc", _COMMANDS, _SUMMARIES)
def cli() -> None:
    """Retention garbage collection and hard-delete daemons."""


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "lakefs-gc")


if __name__ == "__main__":
    sys.exit(main())

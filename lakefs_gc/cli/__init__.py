"""The ``lakefs-gc`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lakefs_core.service.cli import project_group, run

# Each command's module is imported only when the command runs (see lakefs_core.service.cli.CLIGroup):
# the daemon's pulls the HTTP app, the GC configuration and SQLAlchemy, which mark/sweep/purge and
# --version do not all need.
_COMMANDS = {
    "mark": "lakefs_gc.cli.jobs:mark_cmd",
    "sweep": "lakefs_gc.cli.jobs:sweep_cmd",
    "run": "lakefs_gc.cli.daemon:run_cmd",
    "check-config": "lakefs_gc.cli.daemon:check_config_cmd",
    "rules": "lakefs_gc.cli.daemon:rules_group",
    "purge": "lakefs_gc.cli.purge:purge_cmd",
    "purges": "lakefs_gc.cli.purge:purges_cmd",
}


@project_group("lakefs-gc", _COMMANDS)
def cli() -> None:
    """Retention garbage collection and hard-delete daemons."""


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "lakefs-gc")


if __name__ == "__main__":
    sys.exit(main())

"""The ``lakefs-gc`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from lakefs_core import __version__
from lakefs_core.cli import CLIGroup, run
from lakefs_gc.cli_daemon import register as register_daemon
from lakefs_gc.cli_jobs import register as register_jobs
from lakefs_gc.cli_purge import register as register_purge


@click.group(cls=CLIGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakefs-gc")
def cli() -> None:
    """Retention garbage collection and hard-delete daemons."""


register_jobs(cli)
register_daemon(cli)
register_purge(cli)


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "lakefs-gc")


if __name__ == "__main__":
    sys.exit(main())

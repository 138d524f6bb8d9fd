"""The ``lakefs-mirror`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from lakefs_core import __version__
from lakefs_core.cli import run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakefs-mirror")
def cli() -> None:
    """Transactional cross-region mirroring daemon for lakeFS-compatible repositories."""


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "lakefs-mirror")


if __name__ == "__main__":
    sys.exit(main())

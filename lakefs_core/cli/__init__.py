"""The ``lakefs-core`` command line.

Commands follow lakectl's shapes. Every project error becomes a one-line message on stderr and the
error class's distinct exit code (see :mod:`lakefs_core.errors`); usage errors exit with 64.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from lakefs_core import __version__
from lakefs_core.errors import LakeFSError

USAGE_EXIT = 64


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakefs-core")
def cli() -> None:
    """lakeFS-compatible versioned data on object stores."""


def run(group: click.Group, argv: Sequence[str] | None, prog_name: str) -> int:
    """Invoke a click group, mapping project errors to one-line messages and exit codes."""
    try:
        group.main(args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False)
    except LakeFSError as e:
        click.echo(f"{prog_name}: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo(f"{prog_name}: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return USAGE_EXIT if isinstance(e, click.UsageError) else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    return 0


def _register() -> None:
    from lakefs_core.cli import sst

    cli.add_command(sst.sst)


def main(argv: Sequence[str] | None = None) -> int:
    _register()
    return run(cli, argv, "lakefs-core")


if __name__ == "__main__":
    sys.exit(main())

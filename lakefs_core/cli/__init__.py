"""The ``lakefs-core`` command line.

Commands follow lakectl's shapes (URIs are ``lakefs://repo/ref/path``):

- ``repo create|list|delete``, ``branch create|list|delete|reset|revert``,
  ``fs upload|cat|stat|rm|ls``, ``commit``, ``log``, ``diff``, ``merge``, ``tag create|list|delete``,
  ``show commit`` (see :mod:`.repo`, :mod:`.branch`, :mod:`.fs`, :mod:`.refs_cmds`);
- ``sst inspect|write-range`` (see :mod:`.sst`);
- ``check-config``: every configuration problem at once, or the configuration (:mod:`.config_cmd`).

Global options: ``--json`` (one JSON document on stdout; every repository command also takes
``--json`` itself) and ``--config PATH`` (env ``LAKEFS_CORE_CONFIG``; see :mod:`.context` for the keys
and the ``LAKEFS_CORE__...`` overrides).

Every project error becomes a one-line message on stderr and the error class's distinct exit code
(see :mod:`lakefs_core.errors`); usage errors exit with 64.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import click

from lakefs_core import __version__
from lakefs_core.cli.context import CONFIG_ENV, AppState
from lakefs_core.errors import LakeFSError

USAGE_EXIT = 64
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a native tool in `... | head`


class CLIGroup(click.Group):
    """The command group of every CLI of the project: a closed stdout (the reader of ``... | head``
    went away) ends the command quietly with :data:`BROKEN_PIPE_EXIT`, not as an unexpected error."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(BROKEN_PIPE_EXIT) from None


def _silence_stdout() -> None:
    # Python flushes stdout at exit: point the descriptor at /dev/null so that flush cannot fail.
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (tests capture it)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


@click.group(cls=CLIGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakefs-core")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    default=None,
    help=f"YAML configuration file (env {CONFIG_ENV}; default <user config dir>/lakefs-core/config.yaml).",
)
@click.pass_context
def cli(ctx: click.Context, as_json: bool, config_path: Path | None) -> None:
    """lakeFS-compatible versioned data on object stores."""
    ctx.obj = AppState(json=as_json, config_path=config_path)


def one_line(message: str) -> str:
    """Messages are printed on exactly one line."""
    return " ".join(message.split())


def run(group: click.Group, argv: Sequence[str] | None, prog_name: str) -> int:
    """Invoke a click group, mapping project errors to one-line messages and exit codes."""
    try:
        result = group.main(
            args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False
        )
    except LakeFSError as e:
        click.echo(f"{prog_name}: {one_line(str(e))}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        # Interrupted mid-operation: a driver's worker thread (aiosqlite's) may still finish its
        # call and fail to hand the result to the closed event loop. The process is ending on
        # purpose; such late failures must not print a traceback.
        threading.excepthook = _ignore_thread_exception
        click.echo(f"{prog_name}: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return USAGE_EXIT if isinstance(e, click.UsageError) else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    # Without standalone mode click RETURNS the code of an explicit ``Exit`` (``run --once``'s status,
    # ``check-config``'s); commands themselves return None.
    return result if type(result) is int else 0


def _ignore_thread_exception(_args: threading.ExceptHookArgs) -> None:
    return None


def _register() -> None:
    from lakefs_core.cli import branch, config_cmd, fs, import_cmd, refs_cmds, repo, sst

    cli.add_command(config_cmd.check_config_cmd)
    cli.add_command(sst.sst)
    cli.add_command(repo.repo)
    cli.add_command(branch.branch)
    cli.add_command(fs.fs)
    cli.add_command(refs_cmds.commit_cmd)
    cli.add_command(refs_cmds.log_cmd)
    cli.add_command(refs_cmds.diff_cmd)
    cli.add_command(refs_cmds.merge_cmd)
    cli.add_command(refs_cmds.tag)
    cli.add_command(refs_cmds.show)
    cli.add_command(import_cmd.import_cmd)


def main(argv: Sequence[str] | None = None) -> int:
    _register()
    return run(cli, argv, "lakefs-core")


if __name__ == "__main__":
    sys.exit(main())

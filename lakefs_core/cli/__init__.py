"""The ``lakefs-core`` command line.

Commands follow lakectl's shapes (URIs are ``lakefs://repo/ref/path``):

- ``repo create|list|delete``, ``branch create|list|delete|reset|revert``,
  ``fs upload|cat|stat|rm|ls``, ``commit``, ``log``, ``diff``, ``merge``, ``tag create|list|delete``,
  ``show commit`` (see :mod:`.repo`, :mod:`.branch`, :mod:`.fs`, :mod:`.refs_cmds`);
- ``sst inspect|write-range`` (see :mod:`.sst`);
- ``check-config``: every configuration problem at once, or the configuration (:mod:`.config_cmd`);
- ``auth setup|users|groups|policies|credentials``: lakeFS's users, groups, policies and access
  keys in the KV store (:mod:`.auth_cmd`).

Global options: ``--json`` (one JSON document on stdout; every repository command also takes
``--json`` itself) and ``--config PATH`` (env ``LAKEFS_CORE_CONFIG``; see :mod:`.context` for the keys
and the ``LAKEFS_CORE__...`` overrides).

Every project error becomes a one-line message on stderr and the error class's distinct exit code
(see :mod:`lakefs_core.errors`); usage errors exit with 64.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from lakefs_core import __version__
from lakefs_core.cli import collector
from lakefs_core.cli.state import CONFIG_ENV, DEBUG_ENV, AppState, out_of_space
from lakefs_core.errors import LakeFSError

F = TypeVar("F", bound=Callable[..., Any])
USAGE_EXIT = 64
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a native tool in `... | head`


class CLIGroup(click.Group):
    """The command group of every CLI of the project: a closed stdout (the reader of ``... | head``
    went away) ends the command quietly with :data:`BROKEN_PIPE_EXIT`, not as an unexpected error.

    ``lazy_subcommands`` maps a command name to ``"module:attribute"`` of its click command, imported
    only when that command is looked up (click's documented lazy-loading pattern): a command then
    pays only for the modules it uses (``--help`` and shell completion load them all to show their
    help).
    """

    def __init__(self, *args: Any, lazy_subcommands: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_subcommands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attribute = target.split(":")
        command = getattr(importlib.import_module(module), attribute)
        collector.started()  # the command's modules are start-up objects (see .collector)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:
            # click takes its "Did you mean ...?" candidates from ``self.commands``, which holds no
            # lazy command: offer every name, as a group with all commands added would.
            raise click.exceptions.NoSuchCommand(
                e.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

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


# Each command's module is imported only when the command runs (see CLIGroup).
_COMMANDS = {
    "check-config": "lakefs_core.cli.config_cmd:check_config_cmd",
    "sst": "lakefs_core.cli.sst:sst",
    "repo": "lakefs_core.cli.repo:repo",
    "branch": "lakefs_core.cli.branch:branch",
    "fs": "lakefs_core.cli.fs:fs",
    "commit": "lakefs_core.cli.refs_cmds:commit_cmd",
    "log": "lakefs_core.cli.refs_cmds:log_cmd",
    "diff": "lakefs_core.cli.refs_cmds:diff_cmd",
    "merge": "lakefs_core.cli.refs_cmds:merge_cmd",
    "tag": "lakefs_core.cli.refs_cmds:tag",
    "show": "lakefs_core.cli.refs_cmds:show",
    "import": "lakefs_core.cli.import_cmd:import_cmd",
    "auth": "lakefs_core.cli.auth_cmd:auth",
}


def project_group(prog_name: str, commands: Mapping[str, str] | None = None) -> Callable[[F], CLIGroup]:
    """The top-level group of one of the project's CLIs: :class:`CLIGroup` with ``commands`` loaded
    lazily, ``-h`` as well as ``--help``, and ``--version``."""

    def decorate(f: F) -> CLIGroup:
        group = click.group(
            cls=CLIGroup, lazy_subcommands=commands, context_settings={"help_option_names": ["-h", "--help"]}
        )(click.version_option(__version__, prog_name=prog_name)(f))
        if not isinstance(group, CLIGroup):  # never: click.group(cls=...) builds that class
            raise TypeError(f"{group!r} is not a CLIGroup")
        return group

    return decorate


@project_group("lakefs-core", _COMMANDS)
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
        return _report(e, prog_name)
    except click.exceptions.Abort:
        # Interrupted mid-operation: a driver's worker thread (a SQLite connection's) may still
        # finish its call and fail to hand the result to the closed event loop. The process is ending on
        # purpose; such late failures must not print a traceback.
        threading.excepthook = _ignore_thread_exception
        click.echo(f"{prog_name}: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return USAGE_EXIT if isinstance(e, click.UsageError) else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except OSError as e:
        full = out_of_space(e)  # standard output on a full disk, from any command or --help
        if full is None:
            return _unexpected(e, prog_name)
        _silence_stdout()  # what could not be written must not fail again at exit
        return _report(full, prog_name)
    except Exception as e:
        return _unexpected(e, prog_name)
    # Without standalone mode click RETURNS the code of an explicit ``Exit`` (``run --once``'s status,
    # ``check-config``'s); commands themselves return None.
    return result if type(result) is int else 0


def _report(e: LakeFSError, prog_name: str) -> int:
    click.echo(f"{prog_name}: {one_line(str(e))}", err=True)
    return e.exit_code


def _unexpected(e: Exception, prog_name: str) -> int:
    """A bug, or an input no check anticipated, outside a session (which already wraps them, see
    context.run_session): still one line, never a traceback, unless debugging."""
    if os.environ.get(DEBUG_ENV):
        raise e
    shown = one_line(f"unexpected {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for details)")
    click.echo(f"{prog_name}: {shown}", err=True)
    return LakeFSError.exit_code


def _ignore_thread_exception(_args: threading.ExceptHookArgs) -> None:
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``lakefs-core`` run in this process (tests, an embedding program): the collector untouched."""
    return run(cli, argv, "lakefs-core")


def process_main() -> int:
    """The ``lakefs-core`` process (console script, ``python -m lakefs_core.cli``): :func:`main`
    in a command process, whose start-up runs without cyclic collections (see :mod:`.collector`)."""
    collector.command_process()
    return main()


if __name__ == "__main__":
    sys.exit(process_main())

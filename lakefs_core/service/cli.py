"""The command-line kit every command line of the project shares (``lakefs-core``, ``lakefs-gc``,
``lakefs-mirror``): daemons and CLIs take it from here, never from ``lakefs_core.cli``.

- :func:`project_group`: a top-level click group (:class:`CLIGroup`: lazy subcommands, a closed
  stdout ends quietly with :data:`BROKEN_PIPE_EXIT`), ``-h``/``--help``, ``--version``;
- :func:`run`: invoke a group, mapping every project error to one line on stderr and its class's exit
  code (:mod:`lakefs_core.errors`), usage errors to :data:`USAGE_EXIT`, Ctrl-C to 130, anything
  unexpected to one line too (a traceback only with :data:`DEBUG_ENV` set);
- :func:`confirm` and :data:`yes_option`: how every destructive command asks (on a terminal) or
  refuses (without one and without ``--yes``: :class:`~lakefs_core.errors.NotConfirmedError`, exit
  19, never 130, which is Ctrl-C);
- :func:`echo_problems`: every problem of a configuration report, one per line, then its exit code
  (every ``check-config`` command);
- ``REPO_URI``, ``REF_URI``, ``BRANCH_URI``, ``TAG_URI``, ``PATH_URI``, ``PREFIX_URI``: click
  parameter types parsing ``lakefs://`` URIs (:mod:`lakefs_core.repos.uri`).

Importing this module imports click and nothing heavy: a command's ``--help`` stays fast.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import click.shell_completion

from lakefs_core import __version__
from lakefs_core.errors import LakeFSError, NotConfirmedError, StorageFullError
from lakefs_core.repos.uri import EXAMPLES, Kind, LakeFSURI, parse_uri
from lakefs_core.service import collector

if TYPE_CHECKING:  # pydantic: not at a command's start-up
    from lakefs_core.config import ConfigReport

F = TypeVar("F", bound=Callable[..., Any])
USAGE_EXIT = 64
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a native tool in `... | head`
DEBUG_ENV = "LAKEFS_CORE_DEBUG"  # set: an unexpected error raises with its traceback (every CLI)


class CLIGroup(click.Group):
    """The command group of every CLI of the project: a closed stdout (the reader of ``... | head``
    went away) ends the command quietly with :data:`BROKEN_PIPE_EXIT`, not as an unexpected error.

    ``lazy_subcommands`` maps a command name to ``"module:attribute"`` of its click command, imported
    only when that command is looked up (click's documented lazy-loading pattern): a command then
    pays only for the modules it uses. ``summaries`` holds each lazy command's one-line help, so
    the group's ``--help`` lists them without importing any (a test checks each summary is its
    command's short help).
    """

    def __init__(
        self,
        *args: Any,
        lazy_subcommands: Mapping[str, str] | None = None,
        summaries: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})
        self.summaries = dict(summaries or {})
        # "module:function" completing lakefs:// values (see URIType.shell_complete); None: none
        self.uri_completer: str | None = None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        rows: list[tuple[str, str]] = []
        for name in names:
            summary = self.summaries.get(name) if name in self.lazy_subcommands else None
            if summary is not None:
                # shortened as click shortens a command's help
                summary = click.Command(name, help=summary).get_short_help_str(limit)
            else:
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                summary = command.get_short_help_str(limit)
            rows.append((name, summary))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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


def project_group(
    prog_name: str, commands: Mapping[str, str] | None = None, summaries: Mapping[str, str] | None = None
) -> Callable[[F], CLIGroup]:
    """The top-level group of one of the project's CLIs: :class:`CLIGroup` with ``commands`` loaded
    lazily (``summaries``: their one-line help for ``--help``), ``-h`` as well as ``--help``, and
    ``--version``."""

    def decorate(f: F) -> CLIGroup:
        group = click.group(
            cls=CLIGroup,
            lazy_subcommands=commands,
            summaries=summaries,
            context_settings={"help_option_names": ["-h", "--help"]},
        )(click.version_option(__version__, prog_name=prog_name)(f))
        if not isinstance(group, CLIGroup):  # never: click.group(cls=...) builds that class
            raise TypeError(f"{group!r} is not a CLIGroup")
        return group

    return decorate


yes_option = click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (needed without a terminal)."
)


def confirm(action: str, yes: bool) -> None:
    """Ask ``<action>? [y/N]`` on the terminal unless ``yes``; anything but yes changes nothing.

    Without a terminal on standard input (a script, a pipe, CI) there is no one to ask: the command
    refuses with one line naming ``--yes`` rather than reading an answer from the data stream.
    """
    if yes:
        return
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        raise NotConfirmedError(f"{action}: not confirmed (no terminal to ask on); pass --yes to confirm")
    if not click.confirm(f"{action}?", default=False, err=True):
        raise NotConfirmedError(f"{action}: not confirmed, nothing changed")


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
    lakefs_core.cli.context.run_session): still one line, never a traceback, unless debugging."""
    if os.environ.get(DEBUG_ENV):
        raise e
    shown = one_line(f"unexpected {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for details)")
    click.echo(f"{prog_name}: {shown}", err=True)
    return LakeFSError.exit_code


def _ignore_thread_exception(_args: threading.ExceptHookArgs) -> None:
    return None


def out_of_space(e: OSError) -> StorageFullError | None:
    """The error for an out-of-space ``OSError`` no command mapped to a path of its own: writing
    standard output (``fs cat > /dev/full``, a full disk under a redirect); ``None`` for others.
    Commands name their local files themselves (``local_path_error``)."""
    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return StorageFullError(f"cannot write the output: {e.strerror or 'no space left'}")


def echo_problems(report: ConfigReport, prog: str, path: Path | None) -> None:
    """Every problem of ``report`` on stderr, one per line, and exit with its code (nothing when
    there is none). Shared by every ``check-config`` command."""
    from lakefs_core.config import format_problems

    problems = report.problems + report.startup_problems
    if problems:
        where = f" in {path}" if path is not None else ""
        click.echo(f"{prog}: {len(problems)} configuration problem(s){where}:", err=True)
        click.echo(format_problems(problems), err=True)
        raise click.exceptions.Exit(report.exit_code)


if TYPE_CHECKING:
    _ParamBase = click.ParamType[LakeFSURI, Any]
else:  # click < 8.5 has no generic ParamType
    _ParamBase = click.ParamType


class URIType(_ParamBase):
    """A click parameter type parsing a ``lakefs://`` URI of one kind."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.name = f"{kind.value.upper()}_URI"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return EXAMPLES[self.kind]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> LakeFSURI:
        if isinstance(value, LakeFSURI):
            return value
        return parse_uri(value, self.kind, field=param_name(param))

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[click.shell_completion.CompletionItem]:
        """Shell completion of a ``lakefs://`` value by the root group's ``uri_completer`` (the
        ``lakefs-core`` CLI's lists repositories, refs and paths from its KV store): a function
        ``(ctx, kind, incomplete) -> list[str]``, which must return rather than raise."""
        root = ctx.find_root().command
        target = getattr(root, "uri_completer", None)
        if not isinstance(target, str):
            return []
        module, attribute = target.split(":")
        complete = getattr(importlib.import_module(module), attribute)
        values: list[str] = complete(ctx, self.kind, incomplete)
        return [click.shell_completion.CompletionItem(v) for v in values]


def param_name(param: click.Parameter | None) -> str:
    if param is None:
        return "uri"
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return (param.name or "uri").upper()


REPO_URI = URIType(Kind.REPO)
REF_URI = URIType(Kind.REF)
BRANCH_URI = URIType(Kind.BRANCH)
TAG_URI = URIType(Kind.TAG)
PATH_URI = URIType(Kind.PATH)
PREFIX_URI = URIType(Kind.PREFIX)

"""The session (KV store + block stores) the repository commands run in, and their one-line errors.

The configuration they read is :mod:`lakefs_core.coreconfig` (where the file is, its keys, the
``LAKEFS_CORE__...`` overrides); :meth:`lakefs_core.cli.state.AppState.config` loads it once per
command.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from lakefs_core.cli.state import AppState, app_state
from lakefs_core.defaults import APP_NAME, default_kv_url
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError, StorageFullError
from lakefs_core.service import collector
from lakefs_core.service.cli import DEBUG_ENV, out_of_space

if TYPE_CHECKING:
    from lakefs_core.coreconfig import CoreConfig
    from lakefs_core.repos.graveler import Graveler
    from lakefs_core.repos.objects import Objects

__all__ = ["Session", "local_path_error", "open_session", "run_session"]

T = TypeVar("T")


def local_path_error(e: OSError, path: Path | str, field: str, *, doing: str = "read") -> LakeFSError:
    """The one-line error for ``e`` raised on a local path the user gave (never a traceback).

    A missing path is :class:`NotFoundError`, a full disk :class:`StorageFullError` (as anywhere
    else), anything else (permission denied, I/O error, not a directory, ...) a
    :class:`BadInputError` naming ``field`` and the path.
    """
    if isinstance(e, FileNotFoundError):
        return NotFoundError(f"no such file or directory: {path}")
    reason = e.strerror or type(e).__name__
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFullError(f"cannot {doing} {path}: {reason}")
    return BadInputError(f"cannot {doing} {path}: {reason}", field=field)


@dataclass
class Session:
    graveler: Graveler
    objects: Objects
    load_config: Callable[[], CoreConfig]  # on first use: a listing never needs the schema

    @property
    def config(self) -> CoreConfig:
        return self.load_config()

    @property
    def committer(self) -> str:
        return self.config.author()

    async def cleanup_tokens(self) -> int:
        """One bounded pass of the staging-token cleaner; a failure only warns (the change is done)."""
        if self.config.cleanup_limit == 0:
            return 0
        from lakefs_core.repos.cleanup import TokenCleaner

        cleaner = TokenCleaner(
            self.graveler.refs,
            self.graveler.staging,
            grace_seconds=self.config.cleanup_grace_seconds,
        )
        try:
            return await cleaner.step(limit=self.config.cleanup_limit)
        except LakeFSError as e:
            click.echo(f"{APP_NAME}: warning: staging cleanup deferred: {e}", err=True)
            return 0


@asynccontextmanager
async def open_session(source: CoreConfig | AppState) -> AsyncIterator[Session]:
    """Open the core (:func:`lakefs_core.wiring.open_core`: KV, block stores, caches); close on exit.

    ``source`` is a loaded configuration or the command's state, whose configuration is then loaded
    only if the command asks for it (:meth:`AppState.options`). An unset ``kv_url`` is the embedded
    default (created on first use); an explicit SQLite URL whose directory does not exist is a
    StartupError naming ``kv_url``.
    """
    with collector.start_up():  # the core's modules and engine are start-up objects
        from lakefs_core.wiring import open_core

        if isinstance(source, AppState):
            options, load_config = source.options(), source.config
        else:
            options, load_config = source.options(), lambda: source
        core = await open_core(options, default_kv_url=default_kv_url())
    async with core:
        yield Session(core.graveler, core.objects, load_config)


def run_session(fn: Callable[[Session], Awaitable[T]]) -> T:
    """Run ``fn`` in a fresh event loop with an open session; unexpected errors become one line."""
    state = app_state()

    async def main() -> T:
        async with open_session(state) as session:
            return await fn(session)

    try:
        return asyncio.run(main())
    except (LakeFSError, click.ClickException, click.exceptions.Abort, click.exceptions.Exit):
        raise
    except BrokenPipeError:  # stdout's reader went away (`fs cat | head`): see service.cli.CLIGroup
        raise
    except Exception as e:
        if isinstance(e, OSError) and out_of_space(e) is not None:
            raise  # standard output on a full disk (`fs cat > /dev/full`): see cli.run
        if os.environ.get(DEBUG_ENV):
            raise
        raise LakeFSError(f"unexpected {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for details)") from e

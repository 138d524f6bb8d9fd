"""Configuration of the repository commands and the session (KV store + block stores) they run in.

Where the configuration comes from, first match wins for the file:

1. ``--config PATH`` (global option) or the environment variable ``LAKEFS_CORE_CONFIG``
   (:data:`.state.CONFIG_ENV`);
2. ``<user config dir>/lakefs-core/config.yaml`` (platformdirs; ``$XDG_CONFIG_HOME`` on Linux) if it
   exists;
3. no file: every key takes its default.

Then ``LAKEFS_CORE__<KEY>[__<SUBKEY>]`` environment variables override single keys
(``LAKEFS_CORE__KV_URL``, ``LAKEFS_CORE__S3__ENDPOINT_URL``, ...; see :mod:`lakefs_core.config`).

Keys (all optional):

- ``kv_url``: the KV store (``sqlite:///abs/path``, ``postgresql://user:pw@host/db``,
  ``dynamodb://TABLE?region=R&endpoint=URL``, ``memory://``). Default: the embedded SQLite database
  ``<user data dir>/lakefs-core/kv.sqlite3`` (``$XDG_DATA_HOME`` on Linux), whose directory is
  created; an explicit SQLite URL whose directory does not exist is refused (exit 16).
- ``s3``: how to reach S3 for ``s3://`` namespaces, the shared schema of
  :class:`lakefs_core.settings.S3Config`: ``region``, ``endpoint_url``, ``credentials``
  (``{source: env|static|profile, ...}``; the flat ``access_key_id`` / ``secret_access_key`` /
  ``session_token`` keys still work), ``addressing_style`` (auto|path|virtual), ``max_attempts``,
  ``connect_timeout``, ``read_timeout``, ``multipart_*``. Credentials left out come from the
  standard AWS chain.
- ``committer``: the author recorded in commits (default ``$USER``).
- ``cache_dir`` / ``cache_max_bytes``: an optional on-disk cache of range/metarange files shared by
  CLI processes (default: no disk cache); ``table_cache_bytes``: the in-memory cache (256 MiB).
- ``table_max_block_bytes``: the largest table block a range/metarange may declare or decompress to;
  anything larger is ``CorruptDataError`` (default 64 MiB, above lakeFS's 20 MiB maximum range).
- ``temp_sweep_grace_seconds``: leftover ``.lakefs-tmp-*`` files of local namespaces older than
  this are swept by the first write of a process (default 3600).
- ``upload_concurrency``: objects uploaded in parallel by ``fs upload --recursive`` / removed by
  ``fs rm --recursive`` (default 8).
- ``commit_attempts``: bound of the compare-and-swap retry loops (default 20).
- ``auth.encrypt.secret_key``: the secret that secret access keys are encrypted with at rest (as
  lakeFS's key of the same name; ``LAKEFS_CORE__AUTH__ENCRYPT__SECRET_KEY``), needed by
  ``auth setup`` and ``auth credentials create`` (see :mod:`.auth_cmd`).
- ``cleanup_grace_seconds`` / ``cleanup_limit``: after ``commit``, ``branch reset`` and
  ``branch delete`` one bounded pass drops at most ``cleanup_limit`` consumed staging tokens marked
  at least ``cleanup_grace_seconds`` ago (defaults 30 s and 100; a limit of 0 disables it).

Every problem of the configuration is reported at once (``lakefs-core check-config`` prints the
effective configuration, secrets masked).

Secrets (``kv_url``, ``s3.secret_access_key``, ``s3.session_token``, ``auth.encrypt.secret_key``) are
held as ``SecretStr`` and never appear in messages.
"""

from __future__ import annotations

import asyncio
import errno
import getpass
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click
import platformdirs
from pydantic import Field

from lakefs_core.cli import collector
from lakefs_core.cli.state import DEBUG_ENV, app_state, out_of_space
from lakefs_core.config import load_config
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError, StorageFullError
from lakefs_core.settings import AuthConfig, CoreSettings, S3Config

if TYPE_CHECKING:
    from lakefs_core.repos.graveler import Graveler
    from lakefs_core.repos.objects import Objects

__all__ = ["CoreConfig", "S3Config", "Session", "load_core_config", "open_session", "run_session"]

APP_NAME = "lakefs-core"
ENV_PREFIX = "LAKEFS_CORE"

T = TypeVar("T")


class CoreConfig(CoreSettings):
    """The CLI's configuration: the shared :class:`~lakefs_core.settings.CoreSettings` plus its own keys."""

    committer: str | None = None
    upload_concurrency: int = Field(default=8, ge=1, le=256)
    cleanup_limit: int = Field(default=100, ge=0)
    auth: AuthConfig = AuthConfig()

    def kv(self) -> str:
        if self.kv_url is not None and self.kv_url.get_secret_value():
            return self.kv_url.get_secret_value()
        return default_kv_url()

    def author(self) -> str:
        if self.committer:
            return self.committer
        for name in ("USER", "LOGNAME", "USERNAME"):
            if os.environ.get(name):
                return os.environ[name]
        try:
            return getpass.getuser()
        except (OSError, KeyError):  # no passwd entry (containers)
            return APP_NAME


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


def user_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_config_file() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.yaml"


def default_kv_url() -> str:
    """The embedded default KV store: SQLite in the user data directory."""
    return f"sqlite:///{user_data_dir() / 'kv.sqlite3'}"


def load_core_config(path: Path | None, env: Mapping[str, str] | None = None) -> CoreConfig:
    """Load the configuration file (explicit, else the user's if present) plus env overrides."""
    if path is None:
        candidate = user_config_file()
        path = candidate if candidate.is_file() else None
    return load_config(CoreConfig, path, env=os.environ if env is None else env, env_prefix=ENV_PREFIX)


@dataclass
class Session:
    config: CoreConfig
    graveler: Graveler
    objects: Objects

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
async def open_session(config: CoreConfig) -> AsyncIterator[Session]:
    """Open the core (:func:`lakefs_core.wiring.open_core`: KV, block stores, caches); close on exit.

    An unset ``kv_url`` is the embedded default (created on first use); an explicit SQLite URL whose
    directory does not exist is a StartupError naming ``kv_url``.
    """
    with collector.start_up():  # the core's modules and engine are start-up objects
        from lakefs_core.wiring import open_core

        core = await open_core(config, default_kv_url=default_kv_url())
    async with core:
        yield Session(config, core.graveler, core.objects)


def run_session(fn: Callable[[Session], Awaitable[T]]) -> T:
    """Run ``fn`` in a fresh event loop with an open session; unexpected errors become one line."""
    config = app_state().config()

    async def main() -> T:
        async with open_session(config) as session:
            return await fn(session)

    try:
        return asyncio.run(main())
    except (LakeFSError, click.ClickException, click.exceptions.Abort, click.exceptions.Exit):
        raise
    except BrokenPipeError:  # stdout's reader went away (`fs cat | head`): see cli.CLIGroup
        raise
    except Exception as e:
        if isinstance(e, OSError) and out_of_space(e) is not None:
            raise  # standard output on a full disk (`fs cat > /dev/full`): see cli.run
        if os.environ.get(DEBUG_ENV):
            raise
        raise LakeFSError(f"unexpected {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for details)") from e

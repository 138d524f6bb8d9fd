"""The ``lakefs-core`` configuration file: where it is, its schema (:class:`CoreConfig`), loading it.

The wiring layer's: the ``lakefs-core`` CLI reads it for every command (:mod:`lakefs_core.cli.context`)
and so do the GC command line's jobs and the compute layer's import job, none through the CLI package.

Where the configuration comes from, first match wins for the file:

1. ``--config PATH`` (the CLI's global option) or the environment variable ``LAKEFS_CORE_CONFIG``
   (:data:`lakefs_core.cli.state.CONFIG_ENV`);
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
  ``auth setup`` and ``auth credentials create`` (see :mod:`lakefs_core.cli.auth_cmd`).
- ``cleanup_grace_seconds`` / ``cleanup_limit``: after ``commit``, ``branch reset`` and
  ``branch delete`` one bounded pass drops at most ``cleanup_limit`` consumed staging tokens marked
  at least ``cleanup_grace_seconds`` ago (defaults 30 s and 100; a limit of 0 disables it).
- ``import_heartbeat_seconds`` / ``import_stale_seconds``: how often ``lakefs-server`` refreshes a
  running REST import's status, and after how long without a refresh the status reads failed
  (defaults 1 s and 60 s, lakeFS's; finite, > 0, the second at least 5 times the first; see
  docs/rest-api.md, "Cancelling an import"). The CLI accepts them as part of the shared schema.
- ``listing_cache_children``: listings of committed directories that staging does not change are
  served from a per-process cache of their children, at most this many in all (default 100,000,
  about 60 MB at most; 0 turns it off; see :mod:`lakefs_core.repos.listing`).

Every problem of the configuration is reported at once (``lakefs-core check-config`` prints the
effective configuration, secrets masked).

Secrets (``kv_url``, ``s3.secret_access_key``, ``s3.session_token``, ``auth.encrypt.secret_key``) are
held as ``SecretStr`` and never appear in messages.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from lakefs_core.config import load_config
from lakefs_core.defaults import (
    APP_NAME,
    ENV_PREFIX,
    config_file,
    default_kv_url,
    is_embedded_default,
    user_config_file,
    user_data_dir,
)
from lakefs_core.settings import AuthConfig, CoreSettings, S3Config

__all__ = [
    "APP_NAME",
    "ENV_PREFIX",
    "CoreConfig",
    "S3Config",
    "default_kv_url",
    "load_core_config",
    "user_config_file",
    "user_data_dir",
]


class CoreConfig(CoreSettings):
    """The CLI's configuration: the shared :class:`~lakefs_core.settings.CoreSettings` plus its own keys."""

    committer: str | None = None
    upload_concurrency: int = Field(default=8, ge=1, le=256)
    cleanup_limit: int = Field(default=100, ge=0)
    auth: AuthConfig = AuthConfig.model_construct()

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


def load_core_config(path: Path | None, env: Mapping[str, str] | None = None) -> CoreConfig:
    """Load the configuration file (explicit, else the user's if present) plus env overrides."""
    env = os.environ if env is None else env
    if is_embedded_default(path, env):
        # Nothing to validate: the schema's own defaults, without building the validators
        # (deferred, see StrictModel). The CLI's session does not even get here (AppState.options).
        return CoreConfig.model_construct()
    return load_config(CoreConfig, config_file(path), env=env, env_prefix=ENV_PREFIX)

"""The core's settings as plain values (:class:`CoreOptions`, what :func:`lakefs_core.wiring.open_core`
takes, and their defaults, which the schema :class:`lakefs_core.settings.CoreSettings` takes from
here), where the ``lakefs-core`` CLI keeps its files, and whether a run has any configuration to read.

Kept apart from :mod:`lakefs_core.coreconfig` and :mod:`lakefs_core.settings` (the pydantic schema)
so that a command on the embedded default (no configuration file, no ``LAKEFS_CORE__`` override)
opens its session without importing pydantic (~0.1 s of a command's start-up): see
:meth:`lakefs_core.cli.state.AppState.options`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from lakefs_core.block.s3_settings import S3Settings

__all__ = [
    "APP_NAME",
    "DEFAULTS",
    "ENV_PREFIX",
    "CoreOptions",
    "config_file",
    "default_kv_url",
    "is_embedded_default",
    "user_config_file",
    "user_data_dir",
]

APP_NAME = "lakefs-core"
ENV_PREFIX = "LAKEFS_CORE"


@dataclass(frozen=True)
class CoreOptions:
    """The plain values :func:`open_core` needs, resolved from a :class:`CoreSettings`
    (:meth:`CoreSettings.options`); its defaults are the schema's (which takes them from here), so
    a run with nothing configured opens the core without importing pydantic (CLI start-up)."""

    kv_url: str | None = None
    s3: S3Settings = field(default_factory=S3Settings)
    cache_dir: Path | None = None
    cache_max_bytes: int = 1 << 30
    table_cache_bytes: int = 256 << 20
    # Largest table block accepted when reading ranges/metaranges (hostile-file bound; lakeFS's
    # ranges are at most 20 MiB by default). A literal, not the reader's constant, to keep the
    # format layer out of CLI start-up; a test checks they agree.
    table_max_block_bytes: int = 64 << 20
    # The same literal as lakefs_core.block.local_leftovers.DEFAULT_TMP_GRACE_SECONDS (a test checks
    # they agree); not imported, to keep the block drivers out of a CLI's start-up.
    temp_sweep_grace_seconds: float = 3600.0
    commit_attempts: int = 20
    cleanup_grace_seconds: float = 30.0
    hard_delete_journal: bool = True
    # A REST import's status record: refreshed this often by the process running it (lakeFS's
    # statusUpdateInterval), reported failed when not refreshed for import_stale_seconds.
    import_heartbeat_seconds: float = 1.0
    import_stale_seconds: float = 60.0
    # Children of committed directories a process keeps for listings (lakefs_core.repos.listing;
    # about 600 bytes an object): 0 turns the cache off.
    listing_cache_children: int = 100_000


DEFAULTS = CoreOptions()


def user_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_config_file() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.yaml"


def default_kv_url() -> str:
    """The embedded default KV store: SQLite in the user data directory."""
    return f"sqlite:///{user_data_dir() / 'kv.sqlite3'}"


def config_file(path: Path | None) -> Path | None:
    """The configuration file to read: ``path`` if given, else the user's if it exists, else none."""
    if path is None:
        candidate = user_config_file()
        path = candidate if candidate.is_file() else None
    return path


def has_overrides(env: Mapping[str, str]) -> bool:
    """Whether ``env`` holds a ``LAKEFS_CORE__...`` override of a configuration key."""
    marker = ENV_PREFIX + "__"
    return any(name.upper().startswith(marker) for name in env)


def is_embedded_default(path: Path | None, env: Mapping[str, str] | None = None) -> bool:
    """No configuration file and no override: every key takes the schema's default."""
    return config_file(path) is None and not has_overrides(os.environ if env is None else env)

"""The data sources' options, checked once on the driver (hostile: one typed error naming the option),
and the core each process opens from the ``lakefs-core`` configuration.

Credentials never travel with a plan: the driver passes the configuration file's PATH (option
``config``, else ``$LAKEFS_CORE_CONFIG``, else the user's file or the defaults) and every process (the
driver's planning worker, each executor) loads it itself with its own ``LAKEFS_CORE__*`` environment
overrides (:func:`lakefs_core.coreconfig.load_core_config`), exactly as the ``lakefs-core`` CLI does.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from lakefs_core.errors import BadInputError
from lakefs_core.repos.uri import Kind, LakeFSURI, parse_uri
from lakefs_core.wiring import Core

CONFIG_ENV = "LAKEFS_CORE_CONFIG"  # the CLI's variable (lakefs_core.cli.state.CONFIG_ENV)
FORMATS = ("parquet", "csv", "json", "text", "binaryFile")
WRITE_FORMATS = ("parquet", "csv", "json")
DEFAULT_PARTITION_BYTES = 128 << 20
DEFAULT_FILE_BYTES = 128 << 20
MAX_MESSAGE = 4096


def flag(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadInputError(f"must be true or false, not {str(value)[:40]!r}", field=name)


def positive_int(options: Mapping[str, str], name: str, default: int, *, maximum: int = 1 << 40) -> int:
    value = options.get(name)
    if value is None:
        return default
    try:
        n = int(str(value))
    except ValueError:
        raise BadInputError(f"must be an integer, not {str(value)[:40]!r}", field=name) from None
    if not 1 <= n <= maximum:
        raise BadInputError(f"must be between 1 and {maximum}", field=name)
    return n


def config_path(options: Mapping[str, str]) -> str | None:
    """The configuration file every process loads (a path, never its contents)."""
    path = options.get("config") or os.environ.get(CONFIG_ENV) or None
    if path is not None and (not isinstance(path, str) or "\0" in path or len(path) > 4096):
        raise BadInputError("must be a file path", field="config")
    return path


def file_format(options: Mapping[str, str], allowed: tuple[str, ...] = FORMATS) -> str:
    fmt = str(options.get("format") or "parquet")
    for known in allowed:
        if fmt.lower() == known.lower():
            return known
    raise BadInputError(f"must be one of {', '.join(allowed)} (not {fmt[:40]!r})", field="format")


def source_uri(options: Mapping[str, str], kind: Kind = Kind.PREFIX) -> LakeFSURI:
    path = options.get("path")
    if not path:
        raise BadInputError("a lakefs:// URI is required: load('lakefs://repo/ref/prefix/')", field="path")
    return parse_uri(str(path), kind, field="path")


@dataclass(frozen=True)
class CoreRef:
    """What a process needs to open the core: the configuration file's path (picklable, no secrets)."""

    config: str | None = None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Core]:
        from lakefs_core.coreconfig import default_kv_url, load_core_config
        from lakefs_core.wiring import open_core

        settings = load_core_config(Path(self.config) if self.config else None)
        async with await open_core(settings, default_kv_url=default_kv_url()) as core:
            yield core

    def author(self) -> str:
        from lakefs_core.coreconfig import load_core_config

        return load_core_config(Path(self.config) if self.config else None).author()

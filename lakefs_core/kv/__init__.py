"""Ordered binary KV store with compare-and-swap (see :mod:`lakefs_core.kv.base`), opened from a URL.

=====================================================  ===============================================
URL                                                    driver
=====================================================  ===============================================
``memory://``                                          :class:`~.memory.MemoryKVStore` (process-local)
``sqlite:///path/kv.db`` / ``sqlite+aiosqlite:///..``  :class:`~.sqlite.SQLiteKVStore` (SQLite, WAL)
``postgresql://user:pw@host/db`` / ``postgres://..``   :class:`~.sql.SQLKVStore` (PostgreSQL, asyncpg)
``dynamodb://TABLE?region=R&endpoint=http://h:p``      :class:`~.dynamodb.DynamoKVStore`
=====================================================  ===============================================

For DynamoDB the table defaults to ``kvstore`` when the host part is empty (``dynamodb://``), the
region and endpoint are optional (the standard AWS chain applies) and credentials always come from
the standard AWS chain. Errors about a URL name the scheme or the offending query parameter, never
the URL itself (it may carry a password).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from lakefs_core.errors import BadInputError
from lakefs_core.kv.base import Expect, KVEntry, KVItem, KVStore
from lakefs_core.kv.schemes import _SQLITE_SCHEMES, PG_SCHEMES

__all__ = ["PG_SCHEMES", "Expect", "KVEntry", "KVItem", "KVStore", "open_kv"]

_DYNAMO_PARAMS = frozenset({"region", "endpoint"})
_SCHEME_RE = re.compile(r"[a-z][a-z0-9+.-]*")


def _scheme(url: str) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise BadInputError("not a KV store URL (expected scheme://...)", field="url")
    if not url.isascii():
        try:
            url.encode()
        except UnicodeEncodeError:  # never echoed: a URL may hold a password
            raise BadInputError("the KV store URL is not valid UTF-8", field="url") from None
    scheme = url.split("://", 1)[0].lower()
    if not _SCHEME_RE.fullmatch(scheme):
        raise BadInputError("malformed URL scheme", field="url")
    return scheme


async def open_kv(url: str) -> KVStore:
    """Open (and, for SQL/DynamoDB, create on demand) the KV store that ``url`` names.

    Raises :class:`BadInputError` for an unsupported scheme or malformed URL and
    :class:`~lakefs_core.errors.UnreachableError` when the backend cannot be reached.
    """
    scheme = _scheme(url)
    if scheme == "memory":
        if url.split("://", 1)[1] not in ("", "/"):
            raise BadInputError("memory:// takes no host, path or parameters", field="url")
        from lakefs_core.kv.memory import MemoryKVStore

        return MemoryKVStore()
    if scheme in _SQLITE_SCHEMES:
        from lakefs_core.kv.sqlite import SQLiteKVStore  # no SQLAlchemy: a CLI process starts faster

        return await SQLiteKVStore.open(url)
    if scheme in PG_SCHEMES:
        from lakefs_core.kv.sql import SQLKVStore

        return await SQLKVStore.open(url)
    if scheme == "dynamodb":
        from lakefs_core.kv.dynamodb import DEFAULT_TABLE, DynamoKVStore

        try:
            parts = urlsplit(url)
        except ValueError as e:
            raise BadInputError("malformed dynamodb URL", field="url") from e
        if parts.username is not None or parts.password is not None or parts.port is not None:
            raise BadInputError("dynamodb URL takes only a table name as host", field="url")
        if parts.path not in ("", "/"):
            raise BadInputError("dynamodb URL takes no path (put the table name in the host)", field="url")
        params: dict[str, str] = {}
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name not in _DYNAMO_PARAMS:
                raise BadInputError("unknown dynamodb URL parameter", field=f"url.{name}")
            if name in params:
                raise BadInputError("repeated dynamodb URL parameter", field=f"url.{name}")
            if not value:
                raise BadInputError("empty dynamodb URL parameter", field=f"url.{name}")
            params[name] = value
        table = parts.netloc or DEFAULT_TABLE
        return await DynamoKVStore.open(
            table, region=params.get("region"), endpoint_url=params.get("endpoint")
        )
    raise BadInputError(f"unsupported KV store URL scheme {scheme!r}", field="url")

"""A fresh PostgreSQL database per test session on a real server.

The admin URL is ``LAKEFS_TEST_PG_URL`` or ``postgresql://postgres@127.0.0.1:5432/test`` (trust
auth). A database with a unique name is created for the session and dropped afterwards. When the
server is unreachable the caller decides: skip locally, fail when ``CI`` is set.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tests.support.timing import scaled

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


def admin_url() -> str:
    return os.environ.get("LAKEFS_TEST_PG_URL", DEFAULT_ADMIN_URL)


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


@dataclass(frozen=True)
class PgDatabase:
    """A database created for this test session."""

    name: str
    url: str  # postgresql://... (asyncpg / libpq form)

    @property
    def sqlalchemy_url(self) -> str:
        return self.url.replace("postgresql://", "postgresql+asyncpg://", 1)


async def _probe(url: str) -> str | None:
    try:
        # A refused connection fails at once; the limit bounds a server that does not answer (a
        # connection's start is a forked backend: seconds on a saturated machine, not a failure).
        conn = await asyncpg.connect(url, timeout=scaled(15))
    except (OSError, asyncpg.PostgresError, TimeoutError) as e:
        return f"{type(e).__name__}: {e}"
    await conn.close()
    return None


def unreachable_reason() -> str | None:
    """None when the admin URL answers, else why not."""
    return asyncio.run(_probe(admin_url()))


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(admin_url(), timeout=scaled(15))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def drop_table(url: str, table: str) -> None:
    """Drop ``table`` (a test's own KV table) in the database ``url`` names, if it exists."""
    conn = await asyncpg.connect(url, timeout=scaled(15))
    try:
        await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    finally:
        await conn.close()


def create_database() -> PgDatabase:
    name = f"lakefs_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    return PgDatabase(name=name, url=_with_database(admin_url(), name))


def drop_database(db: PgDatabase) -> None:
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)'))

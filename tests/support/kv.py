"""The URL of a fresh KV store for a driver name, for suites parametrised over every KV driver."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.moto import MotoServer
from tests.support.pg import PgDatabase

KV_DRIVERS = ["memory", "sqlite", "postgres", "dynamodb"]


def kv_url_for(driver: str, request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """``memory``, ``sqlite`` (the test's file), ``postgres`` (the session database) or ``dynamodb``
    (a reset moto server); PostgreSQL skips locally / fails in CI when unreachable."""
    if driver == "memory":
        return "memory://"
    if driver == "sqlite":
        return sqlite_url
    if driver == "postgres":
        db: PgDatabase = request.getfixturevalue("pg_database")
        return db.url
    if driver == "dynamodb":
        moto: Callable[[str], MotoServer] = request.getfixturevalue("moto")
        return f"dynamodb://?region=us-east-1&endpoint={moto('us-east-1').endpoint}"
    raise ValueError(f"unknown KV driver {driver!r}")

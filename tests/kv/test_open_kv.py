"""open_kv URL handling, SQL URL normalisation, and errors that must never leak a password."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from lakefs_core import kv as kv_package
from lakefs_core.block.aws_session import new_session
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    PreconditionFailedError,
    StorageFullError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv import KVStore, open_kv
from lakefs_core.kv.dynamodb import DynamoKVStore
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.kv.sql import SQLKVStore, normalize_url
from lakefs_core.kv.sqlite import SQLiteKVStore
from lakefs_core.sqlite_files import SQLITE_SCHEMES, sqlite_database
from tests.support.moto import MotoServer, free_port
from tests.support.pg import PgDatabase, drop_table
from tests.support.tcpproxy import TcpProxy

SECRET = "s3cr3t-Pa55"


def full_text(exc: BaseException) -> str:
    """Everything a log line or traceback of ``exc`` (and its causes) would show."""
    return "".join(traceback.format_exception(exc))


# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "user", "password", "host", "port"),
    [
        (f"postgresql://u:{SECRET}@h:5433/db", "u", SECRET, "h", 5433),
        (f"postgres://u:{SECRET}@h/db", "u", SECRET, "h", None),
        ("postgresql+asyncpg://u@h/db", "u", None, "h", None),
        # a password pasted raw with the characters that would end the userinfo: taken whole
        ("postgresql://u:p@ss/w#rd@db.example:5432/kv?sslmode=disable", "u", "p@ss/w#rd", "db.example", 5432),
    ],
)
def test_normalize_url_gives_the_driver_a_libpq_dsn(
    url: str, user: str, password: str | None, host: str, port: int | None
) -> None:
    from urllib.parse import unquote, urlsplit

    dsn = normalize_url(url)
    parts = urlsplit(dsn)
    assert parts.scheme == "postgresql"
    assert (parts.username, parts.hostname, parts.port) == (user, host, port)
    assert (None if parts.password is None else unquote(parts.password)) == password
    assert parts.path in ("/db", "/kv")


def test_open_kv_routes_the_schemes_sqlite_files_reads() -> None:
    from lakefs_core import kv

    assert kv._SQLITE_SCHEMES == SQLITE_SCHEMES


async def test_open_kv_takes_every_postgresql_scheme_the_engines_take(pg_database: PgDatabase) -> None:
    from lakefs_core import sqlengine

    rest = pg_database.url.split("://", 1)[1]
    for scheme in sorted(kv_package.PG_SCHEMES):
        assert sqlengine.normalize_sql_url(f"{scheme}://{rest}").drivername == "postgresql+asyncpg"
        store = await open_kv(f"{scheme.upper()}://{rest}")
        try:
            assert isinstance(store, SQLKVStore)
            await store.set(b"schemes", scheme.encode(), b"v")
            assert await store.get(b"schemes", scheme.encode()) == b"v"
        finally:
            await store.close()


def test_the_postgresql_store_refuses_a_sqlite_file() -> None:
    with pytest.raises(BadInputError, match=r"lakefs_core\.kv\.sqlite"):
        normalize_url("sqlite:///tmp/x.db")


@pytest.mark.parametrize(
    ("url", "database"),
    [
        ("sqlite:////tmp/x.db", "/tmp/x.db"),
        ("sqlite:///rel/x.db", "rel/x.db"),
        ("sqlite+aiosqlite:////tmp/x.db", "/tmp/x.db"),
        ("SQLite:////tmp/x.db", "/tmp/x.db"),
        ("sqlite:////tmp/a%20b.db", "/tmp/a b.db"),
        ("sqlite:////tmp/a#b.db", "/tmp/a#b.db"),
    ],
)
def test_sqlite_urls_name_the_file_as_sqlalchemy_reads_them(url: str, database: str) -> None:
    from sqlalchemy.engine import make_url

    assert sqlite_database(url) == database == make_url(url).database


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///file::memory:?cache=shared",
        f"sqlite://{SECRET}@host/x.db",
        f"sqlite:////tmp/x.db?password={SECRET}",
        "sqlite:////tmp/a%ff.db",
        "sqlite:////tmp/a%00.db",
        f"mysql:///{SECRET}",
    ],
)
def test_bad_sqlite_urls_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(BadInputError) as info:
        sqlite_database(url)
    assert info.value.field == "url" and SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("url", "field"),
    [
        (f"mysql://root:{SECRET}@db/kv", "url"),
        (f"redis://:{SECRET}@cache:6379/0", "url"),
        (f"{SECRET}", "url"),
        (f"no-scheme-{SECRET}@host/db", "url"),
        ("sqlite:///:memory:", "url"),
        ("sqlite://", "url"),
        ("memory://somewhere", "url"),
        ("dynamodb://t?region=us-east-1&colour=blue", "url.colour"),
        ("dynamodb://t?region=us-east-1&region=eu-west-1", "url.region"),
        ("dynamodb://t?region=", "url.region"),
        (f"dynamodb://user:{SECRET}@t?region=us-east-1", "url"),
        ("dynamodb://t/extra/path", "url"),
        # a lone surrogate (environment bytes the OS could not decode), in every scheme
        (f"postgresql://u\udcff:{SECRET}@127.0.0.1/db", "url"),
        # a connection parameter the driver refuses (its message may repeat the URL's parts)
        (f"postgresql://u:{SECRET}@127.0.0.1:1/db?sslmode=bogus-{SECRET}", "url"),
        (f"sqlite:////tmp/{SECRET}\udcff.db", "url"),
        (f"dynamodb://t\udcff?region=us-east-1&x={SECRET}", "url"),
    ],
)
async def test_bad_urls_are_bad_input_without_secrets(url: str, field: str) -> None:
    with pytest.raises(BadInputError) as info:
        await open_kv(url)
    assert info.value.field == field
    assert SECRET not in str(info.value)
    assert not info.value.retryable


async def test_bad_scheme_names_the_scheme_only() -> None:
    with pytest.raises(BadInputError) as info:
        await open_kv(f"mysql://root:{SECRET}@db/kv")
    assert "'mysql'" in str(info.value)
    assert SECRET not in full_text(info.value)


async def test_malformed_postgres_url_does_not_echo_it() -> None:
    with pytest.raises(BadInputError) as info:
        await open_kv(f"postgresql://u:{SECRET}@host:notaport/db")
    assert SECRET not in str(info.value)


# -- opening each driver ------------------------------------------------------------------------


async def test_open_memory() -> None:
    store = await open_kv("memory://")
    assert isinstance(store, MemoryKVStore)
    assert isinstance(store, KVStore)
    await store.close()


@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+aiosqlite"])
async def test_open_sqlite_creates_file_in_wal_mode(tmp_path: Path, scheme: str) -> None:
    path = tmp_path / "nested" / "dir" / "kv.sqlite3"
    store = await open_kv(f"{scheme}:///{path}")
    try:
        assert isinstance(store, SQLiteKVStore)
        await store.set(b"p", b"k", b"v")
    finally:
        await store.close()
    assert path.exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
        cols = [(row[1], row[2].upper(), row[5]) for row in conn.execute("PRAGMA table_info(kv)")]
        rows = conn.execute("SELECT partition_key, key, value FROM kv").fetchall()
    conn.close()
    assert cols == [("partition_key", "BLOB", 1), ("key", "BLOB", 2), ("value", "BLOB", 0)]
    assert rows == [(b"p", b"k", b"v")]


async def test_sqlite_locked_beyond_busy_timeout_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    store = await SQLiteKVStore.open(f"sqlite:///{path}", busy_timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        await store.set(b"p", b"k", b"v")
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        started = time.monotonic()
        with pytest.raises(TransientError) as info:
            await store.set(b"p", b"k", b"w")
        assert time.monotonic() - started >= 0.15
        assert info.value.retryable
        assert "locked" in str(info.value)
        assert await store.get(b"p", b"k") == b"v"  # WAL: readers are not blocked by the writer
        holder.execute("ROLLBACK")
        await store.set(b"p", b"k", b"w")
        assert await store.get(b"p", b"k") == b"w"
    finally:
        holder.close()
        await store.close()


@pytest.mark.parametrize("form", ["postgresql://", "postgres://", "postgresql+asyncpg://"])
async def test_open_postgres_url_forms(pg_database: PgDatabase, form: str) -> None:
    url = pg_database.url.replace("postgresql://", form, 1)
    store = await open_kv(url)
    try:
        assert isinstance(store, SQLKVStore)
        await store.set(b"url-forms", form.encode(), b"ok")
        assert await store.get(b"url-forms", form.encode()) == b"ok"
    finally:
        await store.delete(b"url-forms", form.encode())
        await store.close()
    conn = await asyncpg.connect(pg_database.url)
    try:
        types = await conn.fetch(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'kv' ORDER BY ordinal_position"
        )
        pk = await conn.fetch(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = 'kv'::regclass AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)"
        )
    finally:
        await conn.close()
    assert [(r["column_name"], r["data_type"]) for r in types] == [
        ("partition_key", "bytea"),
        ("key", "bytea"),
        ("value", "bytea"),
    ]
    assert [r["attname"] for r in pk] == ["partition_key", "key"]


async def test_postgres_survives_server_side_disconnects(pg_database: PgDatabase) -> None:
    store = await open_kv(pg_database.url)
    try:
        await store.set(b"reconnect", b"k", b"v1")
        admin = await asyncpg.connect(pg_database.url)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        # Pooled connections are now dead; pre-ping replaces them transparently.
        assert await store.get(b"reconnect", b"k") == b"v1"
        await store.set(b"reconnect", b"k", b"v2")
        assert await store.get(b"reconnect", b"k") == b"v2"
    finally:
        await store.delete(b"reconnect", b"k")
        await store.close()


async def test_postgres_replaces_every_pooled_connection_that_died_unnoticed(
    pg_database: PgDatabase,
) -> None:
    # The server's side of each pooled connection goes away without the client seeing it until
    # it next sends (a NAT timeout, a failover): the first ping that fails expires the whole
    # pool, so the retry connects afresh instead of picking another dead connection.
    parts = urlsplit(pg_database.url)
    proxy = await TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432).start()
    url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
    table = f"kv_cut_{free_port()}"
    store = await SQLKVStore.open(url, table=table)
    try:
        all_hold = asyncio.Barrier(4)

        async def hold(conn: asyncpg.Connection) -> None:
            await all_hold.wait()  # every task keeps its connection until all four have one

        await asyncio.gather(*(store._run(hold, write=False) for _ in range(4)))
        assert proxy.sever_on_next_request() == 4
        for i in range(4):
            await store.set(b"cut", b"k%d" % i, b"v")
            assert await store.get(b"cut", b"k%d" % i) == b"v"
        assert proxy.severed >= 1  # the failed-ping path was taken, not merely a fresh pool
    finally:
        await store.close()
        await proxy.close()
        await drop_table(pg_database.url, table)


async def test_concurrent_table_creation_on_fresh_postgres_table(pg_database: PgDatabase) -> None:
    table = f"kv_race_{free_port()}"
    stores = await asyncio.gather(*(SQLKVStore.open(pg_database.url, table=table) for _ in range(6)))
    try:
        await stores[0].set(b"p", b"k", b"v")
        assert [await s.get(b"p", b"k") for s in stores] == [b"v"] * 6
    finally:
        for s in stores:
            await s.close()
        await drop_table(pg_database.url, table)


async def test_unreachable_postgres_is_unreachable_without_password() -> None:
    port = free_port()  # nothing listens here
    started = time.monotonic()
    with pytest.raises(UnreachableError) as info:
        await open_kv(f"postgresql://lakefs:{SECRET}@127.0.0.1:{port}/lakefs")
    assert time.monotonic() - started < 15
    err = info.value
    assert err.retryable
    assert f"127.0.0.1:{port}" in str(err)
    assert SECRET not in str(err)
    assert SECRET not in repr(err)
    assert SECRET not in full_text(err)


async def test_wrong_postgres_password_does_not_leak(pg_database: PgDatabase) -> None:
    # Trust auth accepts any password; a missing database is the nearest refusal we can provoke.
    url = pg_database.url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)
    url = url.rsplit("/", 1)[0] + "/no_such_database_here"
    with pytest.raises(UnreachableError) as info:
        await open_kv(url)
    assert "no_such_database_here" in str(info.value)
    assert SECRET not in full_text(info.value)


async def test_open_dynamodb_default_and_named_table(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    default = await open_kv(f"dynamodb://?region=us-east-1&endpoint={server.endpoint}")
    named = await open_kv(f"dynamodb://lakefs-kv?endpoint={server.endpoint}&region=us-east-1")
    try:
        assert isinstance(default, DynamoKVStore)
        assert isinstance(named, DynamoKVStore)
        await default.set(b"p", b"k", b"default")
        await named.set(b"p", b"k", b"named")
        assert await default.get(b"p", b"k") == b"default"
        assert await named.get(b"p", b"k") == b"named"
    finally:
        await default.close()
        await named.close()
    async with new_session().client("dynamodb", **server.client_kwargs()) as ddb:
        names = (await ddb.list_tables())["TableNames"]
        desc = (await ddb.describe_table(TableName="kvstore"))["Table"]
    assert sorted(names) == ["kvstore", "lakefs-kv"]
    assert desc["TableStatus"] == "ACTIVE"
    assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert {(k["AttributeName"], k["KeyType"]) for k in desc["KeySchema"]} == {
        ("PartitionKey", "HASH"),
        ("ItemKey", "RANGE"),
    }
    assert {(a["AttributeName"], a["AttributeType"]) for a in desc["AttributeDefinitions"]} == {
        ("PartitionKey", "B"),
        ("ItemKey", "B"),
    }


async def test_dynamodb_uses_existing_table_and_lakefs_item_layout(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    first = await open_kv(f"dynamodb://?region=us-east-1&endpoint={server.endpoint}")
    await first.set(b"graveler", b"repos/r", b"\x0a\x01r")
    await first.close()
    second = await open_kv(f"dynamodb://kvstore?region=us-east-1&endpoint={server.endpoint}")
    try:
        assert await second.get(b"graveler", b"repos/r") == b"\x0a\x01r"
    finally:
        await second.close()
    async with new_session().client("dynamodb", **server.client_kwargs()) as ddb:
        items = (await ddb.scan(TableName="kvstore"))["Items"]
    assert items == [
        {"PartitionKey": {"B": b"graveler"}, "ItemKey": {"B": b"repos/r"}, "ItemValue": {"B": b"\x0a\x01r"}}
    ]


async def test_unreachable_dynamodb_is_unreachable() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(UnreachableError) as info:
        await open_kv(f"dynamodb://?region=us-east-1&endpoint=http://127.0.0.1:{port}")
    assert time.monotonic() - started < 15
    assert info.value.retryable


async def test_dynamodb_concurrent_opens_share_one_new_table(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    url = f"dynamodb://racing?region=us-east-1&endpoint={server.endpoint}"
    stores = await asyncio.gather(*(open_kv(url) for _ in range(5)))
    try:
        await stores[0].set(b"p", b"k", b"v")
        assert [await s.get(b"p", b"k") for s in stores] == [b"v"] * 5
    finally:
        for s in stores:
            await s.close()


async def test_postgres_error_translation_table() -> None:
    """The PostgreSQL store's translation of asyncpg's errors, on a store that never connects."""
    from asyncpg import exceptions as pg

    store = await SQLKVStore.open("postgresql://u@127.0.0.1:1/db", create=False)
    try:
        tr = store._translate
        for lost in (
            pg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
            pg.AdminShutdownError("terminating connection due to administrator command"),
            ConnectionResetError("reset"),
        ):
            err = tr(lost, connecting=False, write=True, cas=True)
            assert type(err) is TransientError and "outcome unknown" in str(err), repr(err)
            assert type(tr(lost, connecting=False, write=False, cas=False)) is UnreachableError
        err = tr(TimeoutError(), connecting=False, write=True, cas=True)
        assert type(err) is TransientError and "outcome unknown" in str(err)
        assert type(tr(OSError("refused"), connecting=True, write=True, cas=False)) is UnreachableError
        refused = pg.InvalidCatalogNameError('database "db" does not exist')
        assert type(tr(refused, connecting=True, write=False, cas=False)) is UnreachableError
        for retry in (pg.SerializationError("x"), pg.DeadlockDetectedError("x"), pg.QueryCanceledError("x")):
            err = tr(retry, connecting=False, write=True, cas=False)
            assert type(err) is TransientError and "outcome unknown" not in str(err), repr(err)
        dup = pg.UniqueViolationError("duplicate key value violates unique constraint")
        assert isinstance(tr(dup, connecting=False, write=True, cas=True), PreconditionFailedError)
        assert type(tr(dup, connecting=False, write=True, cas=False)) is ConflictError
        full = tr(pg.DiskFullError("could not extend file"), connecting=False, write=True, cas=False)
        assert type(full) is StorageFullError and not full.retryable
        other = tr(
            pg.UndefinedTableError('relation "kv" does not exist'), connecting=False, write=False, cas=False
        )
        assert type(other) is LakeFSError and "UndefinedTableError" in str(other)
    finally:
        await store.close()


async def test_sqlalchemy_error_translation_table() -> None:
    """SQLAlchemy's errors, as the mirrors database and the SQL lease see them (both engines go
    through :func:`lakefs_core.sqlengine.translate_db_error`)."""
    from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    from lakefs_core.sqlengine import translate_db_error

    def tr(e: BaseException, *, connecting: bool, write: bool, cas: bool) -> LakeFSError:
        return translate_db_error(e, "the database", connecting=connecting, write=write, cas=cas)

    lost = DBAPIError("UPDATE kv", {}, ConnectionResetError("reset"), connection_invalidated=True)
    err = tr(lost, connecting=False, write=True, cas=True)
    assert type(err) is TransientError and "outcome unknown" in str(err)
    assert type(tr(lost, connecting=False, write=False, cas=False)) is UnreachableError
    err = tr(TimeoutError(), connecting=False, write=True, cas=True)
    assert type(err) is TransientError and "outcome unknown" in str(err)
    assert type(tr(OSError("refused"), connecting=True, write=True, cas=False)) is UnreachableError
    err = tr(PoolTimeoutError("QueuePool limit reached"), connecting=True, write=False, cas=False)
    assert type(err) is TransientError and "no pooled connection" in str(err)
    locked = OperationalError("UPDATE kv", {}, sqlite3.OperationalError("database is locked"))
    assert type(tr(locked, connecting=False, write=True, cas=True)) is TransientError
    assert type(tr(locked, connecting=True, write=False, cas=False)) is TransientError
    dup = IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert isinstance(tr(dup, connecting=False, write=True, cas=True), PreconditionFailedError)
    assert not isinstance(tr(dup, connecting=False, write=True, cas=False), PreconditionFailedError)
    assert "[parameters" not in str(tr(dup, connecting=False, write=True, cas=False))


async def test_sqlite_error_translation_table(tmp_path: Path) -> None:
    """The SQLite store's own translation of ``sqlite3``'s errors."""
    store = await SQLiteKVStore.open(f"sqlite:///{tmp_path / 'kv.sqlite3'}")
    try:
        tr = store._translate
        locked = sqlite3.OperationalError("database is locked")
        assert type(tr(locked, connecting=False, write=True, cas=True)) is TransientError
        assert type(tr(locked, connecting=True, write=False, cas=False)) is TransientError
        dup = sqlite3.IntegrityError("UNIQUE constraint failed: kv.partition_key, kv.key")
        assert type(tr(dup, connecting=False, write=True, cas=True)) is PreconditionFailedError
        assert type(tr(dup, connecting=False, write=True, cas=False)) is ConflictError
        full = sqlite3.OperationalError("database or disk is full")
        assert type(tr(full, connecting=False, write=True, cas=False)) is StorageFullError
        cannot = sqlite3.OperationalError("unable to open database file")
        assert type(tr(cannot, connecting=True, write=False, cas=False)) is UnreachableError
        assert type(tr(cannot, connecting=False, write=False, cas=False)) is UnreachableError
        io = sqlite3.OperationalError("disk I/O error")  # with free space: not a full disk
        assert type(tr(io, connecting=False, write=False, cas=False)) is UnreachableError
        err = tr(io, connecting=False, write=True, cas=False)
        assert type(err) is TransientError and "outcome unknown" in str(err)
        other = sqlite3.DatabaseError("database disk image is malformed")
        err = tr(other, connecting=False, write=False, cas=False)
        assert type(err) is LakeFSError and "malformed" in str(err) and "kv.sqlite3" in str(err)
    finally:
        await store.close()

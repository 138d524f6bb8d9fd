"""lakefs_mirror.db on SQLite (aiosqlite) and PostgreSQL (asyncpg): CRUD, status, leases and races."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    UnreachableError,
)
from lakefs_mirror.db import FieldConflictError, Mirror, MirrorsDB, MirrorStatus, new_mirror_id
from tests.support.pg import PgDatabase

BACKENDS = ["sqlite", "postgres"]


def _url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    if backend == "postgres":
        pg: PgDatabase = request.getfixturevalue("pg_database")
        return pg.sqlalchemy_url
    return f"sqlite:///{tmp_path / 'mirrors.sqlite3'}"


async def _wipe(db: MirrorsDB) -> None:
    # The PostgreSQL database is shared by the session: start every test from empty tables.
    engine = db._engine
    async with engine.begin() as conn:
        for table in ("mirror_status", "leases", "mirrors"):
            await conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _url(request, str(request.param), tmp_path)


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[MirrorsDB]:
    store = await MirrorsDB.open(db_url)
    await _wipe(store)
    try:
        yield store
    finally:
        await store.close()


async def make(db: MirrorsDB, name: str = "mirror-a", region: str = "eu", **kw: object) -> Mirror:
    args: dict[str, object] = {
        "source_repo": "src",
        "source_region": "us",
        "name": name,
        "region": region,
        "storage_namespace": f"s3://bucket/{region}/{name}",
    }
    args.update(kw)
    return await db.create_mirror(**args)  # type: ignore[arg-type]


T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


async def test_mirror_round_trip(db: MirrorsDB) -> None:
    created = await make(db, now=T0)
    assert len(created.id) == 32 and int(created.id, 16) >= 0
    assert created.branch_filter == ("*",)
    assert (created.paused, created.mode, created.mirror_tags, created.version) == (False, "native", True, 1)
    assert created.created_at == created.updated_at == T0  # microseconds survive
    assert created.resync_requested_at is None
    assert await db.get_mirror(created.id) == created
    other = await make(
        db, "mirror-b", branch_filter=["main", "release-*"], paused=True, mode="active", mirror_tags=False
    )
    assert (await db.get_mirror(other.id)).branch_filter == ("main", "release-*")
    listed = await db.list_mirrors(source_repo="src", source_region="us")
    assert sorted(m.id for m in listed) == sorted([created.id, other.id])
    assert [m.id for m in listed] == sorted(m.id for m in listed)
    assert await db.list_mirrors(source_repo="other") == []
    first = await db.list_mirrors(limit=1)
    rest = await db.list_mirrors(after=first[0].id)
    assert [m.id for m in first + rest] == [m.id for m in listed]
    with pytest.raises(NotFoundError):
        await db.get_mirror(new_mirror_id())


async def test_unique_destination_and_nothing_half_created(db: MirrorsDB) -> None:
    first = await make(db, "dest")
    with pytest.raises(FieldConflictError) as info:
        await make(db, "dest", source_repo="another-source")
    assert info.value.field == "name"
    assert isinstance(info.value, ConflictError)
    with pytest.raises(FieldConflictError) as info:
        await make(db, "dest2", mirror_id=first.id)
    assert info.value.field == "id"
    # the same name in another region is a different destination repository
    await make(db, "dest", region="ap")
    assert sorted((m.region, m.name) for m in await db.list_mirrors()) == [("ap", "dest"), ("eu", "dest")]


async def test_concurrent_creates_of_one_destination_one_wins(db_url: str) -> None:
    dbs = [await MirrorsDB.open(db_url) for _ in range(2)]
    try:
        await _wipe(dbs[0])
        results = await asyncio.gather(
            *(make(dbs[i % 2], "contested", source_repo=f"src-{i}") for i in range(8)), return_exceptions=True
        )
        wins = [r for r in results if isinstance(r, Mirror)]
        losses = [r for r in results if isinstance(r, FieldConflictError)]
        assert len(wins) == 1 and len(losses) == 7, results
        assert len(await dbs[0].list_mirrors()) == 1
    finally:
        for d in dbs:
            await d.close()


async def test_create_rejects_bad_values(db: MirrorsDB) -> None:
    for kw, field in (
        ({"branch_filter": []}, "branch_filter"),
        ({"branch_filter": "main"}, "branch_filter"),
        ({"branch_filter": ["ok", ""]}, "branch_filter.1"),
        ({"mode": "turbo"}, "mode"),
        ({"paused": "yes"}, "paused"),
        ({"storage_namespace": ""}, "storage_namespace"),
    ):
        with pytest.raises(BadInputError) as info:
            await make(db, **kw)
        assert info.value.field == field
    assert await db.list_mirrors() == []


async def test_update_is_optimistic(db: MirrorsDB) -> None:
    m = await make(db)
    t1 = T0 + timedelta(seconds=5)
    up = await db.update_mirror(m.id, 1, paused=True, branch_filter=["main"], now=t1)
    assert (up.paused, up.branch_filter, up.version, up.updated_at) == (True, ("main",), 2, t1)
    assert up.created_at == m.created_at
    with pytest.raises(PreconditionFailedError):
        await db.update_mirror(m.id, 1, paused=False)
    assert (await db.get_mirror(m.id)).paused is True  # the stale update changed nothing
    up = await db.update_mirror(m.id, None, mode="active", mirror_tags=False)  # unconditional
    assert (up.mode, up.mirror_tags, up.version) == ("active", False, 3)
    assert (await db.update_mirror(m.id, 3)).version == 3  # no changes: checked, not bumped
    with pytest.raises(PreconditionFailedError):
        await db.update_mirror(m.id, 2)
    with pytest.raises(NotFoundError):
        await db.update_mirror(new_mirror_id(), 1, paused=True)
    with pytest.raises(BadInputError) as info:
        await db.update_mirror(m.id, 3, name="renamed")
    assert info.value.field == "name"
    with pytest.raises(BadInputError) as info:
        await db.update_mirror(m.id, 3, mode="fast")
    assert info.value.field == "mode"


async def test_concurrent_updates_at_one_version_one_wins(db_url: str) -> None:
    dbs = [await MirrorsDB.open(db_url) for _ in range(2)]
    try:
        await _wipe(dbs[0])
        m = await make(dbs[0])
        results = await asyncio.gather(
            *(dbs[i % 2].update_mirror(m.id, 1, paused=bool(i % 2)) for i in range(6)), return_exceptions=True
        )
        assert sum(isinstance(r, Mirror) for r in results) == 1, results
        assert sum(isinstance(r, PreconditionFailedError) for r in results) == 5
        assert (await dbs[1].get_mirror(m.id)).version == 2
    finally:
        for d in dbs:
            await d.close()


async def test_status_upsert_list_and_delete(db: MirrorsDB) -> None:
    m = await make(db)
    head = "a" * 64
    await db.upsert_status(
        MirrorStatus(
            m.id, "branch", "main", source_head=head, candidate=head, missing_objects=7, last_checked_at=T0
        )
    )
    await db.upsert_status(MirrorStatus(m.id, "tag", "v1", source_head=head, mirror_head=head))
    promoted = T0 + timedelta(seconds=1)
    await db.upsert_status(
        MirrorStatus(
            m.id,
            "branch",
            "main",
            source_head=head,
            mirror_head=head,
            lag_seconds=1.5,
            last_promotion_at=promoted,
            last_checked_at=promoted,
        )
    )
    later = T0 + timedelta(seconds=9)
    # a later check that promoted nothing keeps the last promotion time
    await db.upsert_status(
        MirrorStatus(
            m.id,
            "branch",
            "main",
            source_head="b" * 64,
            mirror_head=head,
            last_error="x\0y",
            last_checked_at=later,
        )
    )
    rows = await db.list_status(m.id)
    assert [(r.kind, r.branch) for r in rows] == [("branch", "main"), ("tag", "v1")]
    main = rows[0]
    assert main.source_head == "b" * 64 and main.mirror_head == head and main.candidate is None
    assert main.missing_objects == 0 and main.lag_seconds is None
    assert main.last_promotion_at == promoted and main.last_checked_at == later
    assert main.last_error == "x\\0y"
    long_tag = "t" * 512
    await db.upsert_status(MirrorStatus(m.id, "tag", long_tag, last_error="e" * 10_000))
    (stored,) = [r for r in await db.list_status(m.id) if r.branch == long_tag]
    assert stored.last_error == "e" * 4000
    assert await db.delete_status(m.id, "tag", long_tag) is True
    assert await db.delete_status(m.id, "tag", "v1") is True
    assert await db.delete_status(m.id, "tag", "v1") is False
    assert [r.branch for r in await db.list_status(m.id)] == ["main"]
    with pytest.raises(BadInputError):
        await db.upsert_status(MirrorStatus(m.id, "commit", "main"))  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        await db.upsert_status(MirrorStatus(m.id, "branch", "main", missing_objects=-1))


async def test_delete_removes_status_in_the_same_transaction(db: MirrorsDB) -> None:
    m = await make(db)
    keep = await make(db, "other")
    await db.upsert_status(MirrorStatus(m.id, "branch", "main"))
    await db.upsert_status(MirrorStatus(keep.id, "branch", "main"))
    await db.delete_mirror(m.id)
    with pytest.raises(NotFoundError):
        await db.get_mirror(m.id)
    assert await db.list_status(m.id) == []
    assert len(await db.list_status(keep.id)) == 1
    with pytest.raises(NotFoundError):
        await db.delete_mirror(m.id)
    # an engine writing status for a mirror deleted meanwhile gets NotFound, not an orphan row
    with pytest.raises(NotFoundError):
        await db.upsert_status(MirrorStatus(m.id, "branch", "main"))
    assert await db.list_status(m.id) == []


async def test_resync_request_and_clear(db: MirrorsDB) -> None:
    m = await make(db)
    asked = await db.request_resync(m.id, now=T0)
    assert asked.resync_requested_at == T0 and asked.version == m.version
    # the engine acted on the T0 request; a newer one arrived meanwhile and must survive
    await db.request_resync(m.id, now=T0 + timedelta(seconds=3))
    assert await db.clear_resync(m.id, T0) is False
    assert (await db.get_mirror(m.id)).resync_requested_at == T0 + timedelta(seconds=3)
    again = await db.get_mirror(m.id)
    assert again.resync_requested_at is not None
    assert await db.clear_resync(m.id, again.resync_requested_at) is True
    assert (await db.get_mirror(m.id)).resync_requested_at is None
    assert await db.clear_resync(m.id, T0) is False
    with pytest.raises(NotFoundError):
        await db.request_resync(new_mirror_id())


async def test_mirrors_for_region(db: MirrorsDB) -> None:
    a = await make(db, "one", region="eu")
    b = await make(db, "two", region="eu", source_repo="other-src")
    await make(db, "three", region="ap")
    assert sorted(m.id for m in await db.mirrors_for_region("eu")) == sorted([a.id, b.id])
    assert await db.mirrors_for_region("nowhere") == []


async def test_lease_semantics(db: MirrorsDB) -> None:
    assert await db.lease("eu") is None
    assert await db.try_acquire("eu", "daemon-1", 10, 100.0) is True
    assert await db.try_acquire("eu", "daemon-2", 10, 105.0) is False  # held
    assert await db.try_acquire("eu", "daemon-1", 10, 105.0) is True  # re-acquire extends
    lease = await db.lease("eu")
    assert lease is not None and lease.holder == "daemon-1"
    assert lease.expires_at == datetime.fromtimestamp(115, tz=UTC)
    assert await db.renew("eu", "daemon-1", 10, 110.0) is True  # now until 120
    assert await db.renew("eu", "daemon-2", 10, 110.0) is False
    assert await db.try_acquire("eu", "daemon-2", 10, 119.999) is False
    assert await db.try_acquire("ap", "daemon-2", 10, 119.999) is True  # regions are independent
    # expired: taken over; the old holder can neither renew nor release it
    assert await db.try_acquire("eu", "daemon-2", 10, 120.0) is True
    assert await db.renew("eu", "daemon-1", 10, 121.0) is False
    assert await db.release("eu", "daemon-1") is False
    assert (await db.lease("eu")).holder == "daemon-2"  # type: ignore[union-attr]
    # a lapsed lease is not revived by renew (re-acquire instead)
    assert await db.renew("eu", "daemon-2", 10, 131.0) is False
    assert await db.release("eu", "daemon-2") is True
    assert await db.lease("eu") is None
    assert await db.try_acquire("eu", "daemon-1", 10, 0.0) is True  # free again
    # datetimes are accepted as "now"
    assert await db.try_acquire("dt", "d", 5, T0) is True
    assert await db.try_acquire("dt", "e", 5, T0 + timedelta(seconds=4)) is False
    assert await db.try_acquire("dt", "e", 5, T0 + timedelta(seconds=5)) is True
    with pytest.raises(BadInputError):
        await db.try_acquire("eu", "x", 0)


async def test_lease_race_two_engines(db_url: str) -> None:
    """Two daemons (separate engines, separate connections) race for one region's lease."""
    a, b = await MirrorsDB.open(db_url), await MirrorsDB.open(db_url)
    try:
        await _wipe(a)
        ttl = 10.0
        for round_no in range(15):
            now = 1000.0 + round_no * 20  # every round starts after the previous lease expired
            contenders = [(a, "daemon-a"), (b, "daemon-b")] * 3
            results = await asyncio.gather(*(d.try_acquire("eu", h, ttl, now) for d, h in contenders))
            holders = {h for (_, h), won in zip(contenders, results, strict=True) if won}
            assert len(holders) == 1, (round_no, results)
            winner = holders.pop()
            lease = await b.lease("eu")
            assert lease is not None and lease.holder == winner
            # while held, a racing takeover attempt by the loser and a renew by the winner:
            loser = "daemon-b" if winner == "daemon-a" else "daemon-a"
            took, renewed = await asyncio.gather(
                a.try_acquire("eu", loser, ttl, now + 5), b.renew("eu", winner, ttl, now + 5)
            )
            assert (took, renewed) == (False, True)
        # a takeover race at the exact expiry instant: still one winner
        lease = await a.lease("eu")
        assert lease is not None
        expiry = lease.expires_at
        late = await asyncio.gather(
            a.try_acquire("eu", "late-a", ttl, expiry), b.try_acquire("eu", "late-b", ttl, expiry)
        )
        assert sorted(late) == [False, True]
    finally:
        await a.close()
        await b.close()


async def test_lease_race_many_contenders_stay_exclusive(db_url: str) -> None:
    """Many holders hammer acquire/renew/release with real time: never two holders at once."""
    dbs = [await MirrorsDB.open(db_url) for _ in range(3)]
    holding: set[str] = set()
    overlaps: list[set[str]] = []
    try:
        await _wipe(dbs[0])

        async def daemon(i: int) -> int:
            db = dbs[i % len(dbs)]
            me = f"daemon-{i}"
            wins = 0
            for _ in range(6):
                if await db.try_acquire("race", me, 30.0):
                    holding.add(me)
                    if len(holding) > 1:
                        overlaps.append(set(holding))
                    wins += 1
                    await asyncio.sleep(0)
                    holding.discard(me)
                    assert await db.release("race", me)
                await asyncio.sleep(0)
            return wins

        wins = await asyncio.gather(*(daemon(i) for i in range(6)))
        assert overlaps == []
        assert sum(wins) >= 1
    finally:
        for d in dbs:
            await d.close()


async def test_open_is_idempotent_and_concurrent(db_url: str) -> None:
    opened = await asyncio.gather(*(MirrorsDB.open(db_url) for _ in range(3)))
    try:
        await _wipe(opened[0])
        m = await make(opened[0])
        assert await opened[2].get_mirror(m.id) == m
        await opened[1].ping()
    finally:
        for d in opened:
            await d.close()


async def test_bad_and_unreachable_urls(tmp_path: Path) -> None:
    with pytest.raises(BadInputError) as info:
        await MirrorsDB.open("mysql://user:topsecret@h/db")
    assert info.value.field == "mirrors_db_url"
    assert "topsecret" not in str(info.value)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UnreachableError) as unreachable:
        await MirrorsDB.open(f"postgresql://user:topsecret@127.0.0.1:{port}/db", connect_timeout=2)
    assert "topsecret" not in str(unreachable.value)
    db = await MirrorsDB.open(f"sqlite:///{tmp_path / 'nested' / 'dir' / 'm.sqlite3'}")
    assert "sqlite+aiosqlite" in db.display_url
    await db.close()
    with pytest.raises(Exception, match="closed"):
        await db.ping()

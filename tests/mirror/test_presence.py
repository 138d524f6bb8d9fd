"""PresenceCache: bounded LRU positives, validated tables, negative cooldowns, SQLite persistence."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError
from lakefs_mirror.presence import PresenceCache, _digest

NS = "s3://dest-bucket/repo"
OTHER = "s3://other-bucket/repo"  # durable: memory stores are never persisted


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_positive_lru_is_bounded_and_touched_by_hits() -> None:
    cache = PresenceCache(max_objects=4)  # two generations of 2
    for key in ("data/s/a", "data/s/b", "data/s/c"):  # c starts a generation: a, b are the old one
        cache.mark_present(NS, key)
    assert cache.is_present(NS, "data/s/a")  # touch: "a" moves to the young generation
    cache.mark_present(NS, "data/s/d")  # young full (c, a): the old one ("b") is evicted
    assert cache.present_count == 3
    assert not cache.is_present(NS, "data/s/b")
    assert all(cache.is_present(NS, k) for k in ("data/s/a", "data/s/c", "data/s/d"))
    assert cache.stats.object_evictions == 1
    assert cache.stats.object_hits == 4
    assert cache.stats.object_misses == 1
    # facts are per namespace
    assert not cache.is_present(OTHER, "data/s/a")


@pytest.mark.parametrize("bound", [1, 2, 3, 7, 10])
def test_positive_bound_holds_and_recent_facts_survive(bound: int) -> None:
    """Never more than ``max_objects`` facts; the newest ``max_objects // 2`` always held."""
    cache = PresenceCache(max_objects=bound)
    for i in range(50):
        cache.mark_present(NS, f"data/s/{i}")
        assert cache.present_count <= bound
        recent = range(max(0, i + 1 - max(1, bound // 2)), i + 1)
        assert all(cache.is_present(NS, f"data/s/{j}") for j in recent)
    assert cache.stats.object_evictions == 50 - cache.present_count


def test_validated_tables_are_bounded_and_counted() -> None:
    cache = PresenceCache(max_tables=2)
    cache.mark_validated(NS, "r1")
    cache.mark_validated(NS, "r2")
    cache.mark_validated(NS, "r3")
    assert not cache.is_validated(NS, "r1")
    assert cache.is_validated(NS, "r2") and cache.is_validated(NS, "r3")
    assert not cache.is_validated(OTHER, "r3")
    assert (cache.stats.table_hits, cache.stats.table_misses, cache.stats.table_evictions) == (2, 2, 1)
    assert cache.stats.hits == 2 and cache.stats.misses == 0


def test_negative_cooldown_uses_the_injected_clock() -> None:
    clock = FakeClock()
    cache = PresenceCache(negative_cooldown=30, clock=clock)
    assert not cache.recently_missing(NS, "data/s/a")
    cache.mark_missing(NS, "data/s/a")
    assert cache.recently_missing(NS, "data/s/a")
    clock.advance(29.9)
    assert cache.recently_missing(NS, "data/s/a")
    clock.advance(0.1)
    assert not cache.recently_missing(NS, "data/s/a")  # expired: ask again
    assert cache.negative_count == 0
    assert cache.stats.negative_hits == 2

    cache.mark_missing(NS, "data/s/b")
    cache.mark_present(NS, "data/s/b")  # arrived: the positive wins and clears the negative
    assert not cache.recently_missing(NS, "data/s/b")
    cache.mark_missing(NS, "data/s/b")  # a positive is definitive; a late negative is ignored
    assert not cache.recently_missing(NS, "data/s/b")


def test_negatives_are_bounded_and_forgettable() -> None:
    clock = FakeClock()
    cache = PresenceCache(max_negatives=2, clock=clock)
    for key in ("a", "b", "c"):
        cache.mark_missing(NS, key)
    assert cache.negative_count == 2
    assert not cache.recently_missing(NS, "a")  # evicted: at worst re-checked early
    assert cache.recently_missing(NS, "c")
    cache.forget_negative(NS, "c")
    assert not cache.recently_missing(NS, "c")
    # a store key (with the namespace prefix) is accepted too
    cache.mark_missing(NS, "data/s/x")
    cache.forget_negative(NS, "repo/data/s/x")
    assert not cache.recently_missing(NS, "data/s/x")


def test_forget_namespace_drops_every_fact_of_it() -> None:
    cache = PresenceCache()
    cache.mark_present(NS, "data/s/a")
    cache.mark_validated(NS, "r1")
    cache.mark_missing(NS, "data/s/b")
    cache.mark_present(OTHER, "data/s/a")
    assert cache.forget_namespace(NS) == 3
    assert not cache.is_present(NS, "data/s/a")
    assert not cache.is_validated(NS, "r1")
    assert not cache.recently_missing(NS, "data/s/b")
    assert cache.is_present(OTHER, "data/s/a")


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("max_objects", {"max_objects": 0}),
        ("max_tables", {"max_tables": -1}),
        ("max_negatives", {"max_negatives": True}),
        ("negative_cooldown", {"negative_cooldown": -1.0}),
    ],
)
def test_bad_settings_name_the_field(field: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(BadInputError) as info:
        PresenceCache(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


async def test_flush_and_reload_remember_positives_not_negatives(tmp_path: Path) -> None:
    path = tmp_path / "state" / "presence.sqlite3"
    cache = await PresenceCache.open(path)
    assert cache.present_count == 0  # absent file: empty
    cache.mark_present(NS, "data/s/a")
    cache.mark_present(NS, "_lakefs/" + "a" * 64)
    cache.mark_present(OTHER, "data/t/b")
    cache.mark_validated(NS, "b" * 64)
    cache.mark_missing(NS, "data/s/missing")
    await cache.close()
    await cache.close()  # idempotent
    assert path.is_file()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind

    again = await PresenceCache.open(path)
    assert again.stats.loaded_objects == 3 and again.stats.loaded_tables == 1
    assert again.is_present(NS, "data/s/a")
    assert again.is_present(NS, "_lakefs/" + "a" * 64)
    assert again.is_present(OTHER, "data/t/b")
    assert again.is_validated(NS, "b" * 64)
    assert not again.recently_missing(NS, "data/s/missing")


async def test_reload_keeps_the_most_recently_used_within_bounds(tmp_path: Path) -> None:
    path = tmp_path / "presence.sqlite3"
    cache = PresenceCache(path)
    for i in range(10):
        cache.mark_present(NS, f"data/s/{i}")
    assert cache.is_present(NS, "data/s/0")  # touch: 0 is now the most recent
    await cache.flush()
    small = await PresenceCache.open(path, max_objects=6)
    assert small.present_count == 6
    # the newest half is the young generation (a hit there moves nothing between generations)
    assert all(small.is_present(NS, f"data/s/{i}") for i in (0, 9, 8))
    assert not small.is_present(NS, "data/s/4")
    assert small.stats.object_evictions == 0


async def test_flush_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "presence.sqlite3"
    cache = PresenceCache(path)
    cache.mark_present(NS, "data/s/a")
    await cache.flush()
    first_inode = path.stat().st_ino
    cache.mark_present(NS, "data/s/b")
    await cache.flush()
    assert path.stat().st_ino != first_inode  # a new file renamed over the old one
    flushes = cache.stats.flushes
    await cache.flush()  # nothing changed: nothing written
    assert cache.stats.flushes == flushes
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT digest FROM objects ORDER BY rowid").fetchall()
        (salt,) = con.execute("SELECT salt FROM meta").fetchone()
    con.close()
    # digests only, never the keys; oldest first
    assert rows == [(_digest(salt, "data/s/a"),), (_digest(salt, "data/s/b"),)]


async def test_unreadable_file_is_ignored_then_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "presence.sqlite3"
    path.write_bytes(b"this is not a sqlite database" * 10)
    with caplog.at_level(logging.WARNING, logger="lakefs_mirror.presence"):
        cache = await PresenceCache.open(path)
    assert cache.present_count == 0
    assert "unreadable" in caplog.text
    await cache.close()  # rewritten even though nothing was added
    again = await PresenceCache.open(path)
    assert again.present_count == 0
    assert again.stats.loaded_objects == 0


async def test_foreign_sqlite_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite3"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE objects (ns INTEGER, key TEXT)")
    con.close()
    cache = await PresenceCache.open(path)
    assert cache.present_count == 0


async def test_memory_only_cache_never_touches_disk(tmp_path: Path) -> None:
    cache = PresenceCache()
    cache.mark_present(NS, "data/s/a")
    await cache.flush()
    await cache.close()
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240 (a test's own tmp dir)


async def test_schema_2_snapshot_is_read_and_digested(tmp_path: Path) -> None:
    """A file of the previous schema (keys in clear) still loads; the next flush writes schema 3."""
    path = tmp_path / "presence.sqlite3"
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA application_id = 1279675728")
        con.execute("PRAGMA user_version = 2")
        con.execute("CREATE TABLE namespaces (id INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE)")
        con.execute("CREATE TABLE objects (ns INTEGER NOT NULL, key TEXT NOT NULL)")
        con.execute("CREATE TABLE tables (ns INTEGER NOT NULL, id TEXT NOT NULL)")
        con.execute("INSERT INTO namespaces VALUES (1, ?)", (NS,))
        con.executemany("INSERT INTO objects VALUES (1, ?)", [("data/s/a",), ("data/s/b",)])
        con.execute("INSERT INTO tables VALUES (1, ?)", ("r" * 64,))
    con.close()
    cache = await PresenceCache.open(path)
    assert cache.stats.loaded_objects == 2
    assert cache.is_present(NS, "data/s/a") and cache.is_present(NS, "data/s/b")
    assert not cache.is_present(NS, "data/s/c") and cache.is_validated(NS, "r" * 64)
    cache.mark_present(NS, "data/s/c")
    await cache.close()
    again = await PresenceCache.open(path)
    assert all(again.is_present(NS, f"data/s/{k}") for k in "abc")
    assert not again.is_present(NS, "data/s/d")
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone() == (3,)
    con.close()


async def test_snapshot_with_a_bad_digest_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "presence.sqlite3"
    cache = PresenceCache(path)
    cache.mark_present(NS, "data/s/a")
    await cache.flush()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE objects SET digest = x'00'")
    con.close()
    again = await PresenceCache.open(path)
    assert again.present_count == 0 and not again.is_present(NS, "data/s/a")


async def test_load_renumbers_namespaces_the_cache_already_knows(tmp_path: Path) -> None:
    """Facts are ints carrying a namespace number: a file read into a cache that numbered other
    namespaces first must land on that cache's numbers, not the file's."""
    path = tmp_path / "presence.sqlite3"
    writer = PresenceCache(path)
    writer.mark_present(NS, "data/s/a")
    writer.mark_present(OTHER, "data/s/b")
    await writer.close()
    reader = PresenceCache(path)
    reader.mark_present(OTHER, "data/s/x")  # OTHER is number 0 here, NS number 1
    await reader.load()
    assert reader.is_present(NS, "data/s/a") and reader.is_present(OTHER, "data/s/b")
    assert not reader.is_present(NS, "data/s/b") and not reader.is_present(OTHER, "data/s/a")
    assert not reader.is_present(OTHER, "data/s/x")  # load replaces the positive facts

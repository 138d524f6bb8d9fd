"""Guards of the mirror's safety checks that no other test pinned down (found by mutation testing).

Each test names the check it guards: removing or weakening that check (trusting a cache it must not,
scanning only part of a range, ...) makes the test fail. Real drivers and repositories, the injected
clock and the request-counting wrapper of ``test_validate.py``; no mocks of the code under test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.errors import BadInputError
from lakefs_mirror import validate
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.presence import PresenceCache, _digest, _write_snapshot, namespace_key
from tests.mirror.test_api import Server, call, create_body, server
from tests.mirror.test_db import db, db_url, make
from tests.mirror.test_presence_incarnations import DURABLE, MEMORY
from tests.mirror.test_validate import COOLDOWN, Env, env, make_env, table_key

__all__ = ["db", "db_url", "env", "server"]  # fixtures, imported for the tests below


# -- validate: what proves a table present ---------------------------------------------------------


async def test_corrupt_destination_copy_stays_unproven_while_a_cache_tier_holds_good_bytes(env: Env) -> None:
    """A range served by a shared cache tier (good bytes, read from the source) whose destination copy
    is truncated is unreadable, and that verdict must not be remembered as "present": otherwise the
    next validation trusts the cache tier and promotes a commit whose range cannot be read here."""
    await env.upload(f"k{i:03d}" for i in range(40))
    mr = await env.commit()
    shared = TableCache()
    ranges = list(await env.range_addresses(mr, TableStore(env.src_store, env.src_ns, shared)))
    bad = ranges[0]
    env.dst_tables = TableStore(env.dst, env.dst_ns, shared)
    await env.replicate(k for k in await env.source_keys() if k != table_key(bad))
    full = await env.src_store.get(env.src_ns.table_key(bad))
    await env.dst_inner.put(env.dst_ns.table_key(bad), full[: len(full) // 2])

    result = await env.validate(mr)
    assert not result.complete and result.unreadable_tables == [bad]
    assert not env.cache.is_present(env.dst_ns.uri, table_key(bad))

    for wait in (0.0, COOLDOWN):  # within the cooldown, then after it: never complete
        env.clock.advance(wait)
        result = await env.validate(mr)
        assert not result.complete, result
        assert bad in result.missing_tables()
        assert not env.cache.is_validated(env.dst_ns.uri, bad)

    await env.dst_inner.put(env.dst_ns.table_key(bad), full)  # the full copy lands
    env.clock.advance(COOLDOWN)
    assert (await env.validate(mr)).complete


# -- validate: every entry of a range is looked at ---------------------------------------------------


@pytest.mark.parametrize("env", ["memory", "local"], indirect=True)
async def test_thread_scan_reads_every_batch_of_a_range(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges are decoded a batch of entries per call: objects past the first batch are required too."""
    monkeypatch.setattr(validate, "_SCAN_BATCH", 2)
    addresses = await env.upload(f"k{i:03d}" for i in range(24))
    mr = await env.commit()
    await env.replicate(k for k in await env.source_keys() if k.startswith("_lakefs/"))  # tables only
    result = await env.validate(mr)
    assert not result.complete
    assert result.objects_referenced == len(addresses)
    assert result.missing_objects_total == len(addresses)

    await env.replicate(addresses)
    env.clock.advance(COOLDOWN)
    result = await env.validate(mr)
    assert result.complete, result


async def test_process_scan_uses_every_chunk_of_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process path hands objects back in pickled chunks: every chunk is required, not only the
    first. The worker is run inline (same code, same pickles) so the chunk size can be made small."""

    async def inline(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return fn(*args, **kw)

    monkeypatch.setattr(validate, "PROCESS_SCAN_MIN_BYTES", 0)
    monkeypatch.setattr(validate, "_CHUNK_OBJECTS", 2)
    monkeypatch.setattr(validate, "run_process", inline)
    async with make_env("local", tmp_path) as env:
        addresses = await env.upload(f"k{i:03d}" for i in range(24))
        mr = await env.commit()
        await env.replicate(k for k in await env.source_keys() if k.startswith("_lakefs/"))
        result = await env.validate(mr)
        assert not result.complete
        assert result.objects_referenced == len(addresses)
        assert result.missing_objects_total == len(addresses)


# -- presence: what is trusted after a restart ---------------------------------------------------------


async def test_memory_store_facts_in_an_older_file_are_not_loaded(tmp_path: Path) -> None:
    """A snapshot written before the non-durable rule (or by another version) may hold facts about a
    ``mem://`` namespace: loading must skip them, objects and validated tables alike."""
    path = tmp_path / "presence.sqlite3"
    salt = bytes(16)
    namespaces = [MEMORY, namespace_key(MEMORY, "a" * 32), DURABLE]
    facts = [(ns, _digest(salt, "data/s/a")) for ns in namespaces]
    tables = [(ns, "b" * 64) for ns in namespaces]
    _write_snapshot(path, salt, facts, tables)

    cache = await PresenceCache.open(path)
    assert (cache.stats.loaded_objects, cache.stats.loaded_tables) == (1, 1)
    assert cache.is_present(DURABLE, "data/s/a") and cache.is_validated(DURABLE, "b" * 64)
    for ns in namespaces[:2]:
        assert not cache.is_present(ns, "data/s/a")
        assert not cache.is_validated(ns, "b" * 64)


# -- mirrors database: the version precondition ----------------------------------------------------------


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_boolean_is_no_expected_version(db: MirrorsDB) -> None:
    """``True == 1`` in Python and SQL: a boolean version would pass the compare-and-swap of a
    version-1 row. It is refused as input, and nothing changes."""
    m = await make(db)
    assert m.version == 1
    for flag in (True, False):
        with pytest.raises(BadInputError) as info:
            await db.update_mirror(m.id, flag, paused=True)  # type: ignore[arg-type]
        assert info.value.field == "version"
    with pytest.raises(BadInputError):
        await db.update_mirror(m.id, True)  # type: ignore[arg-type]  # no changes: still checked
    after = await db.get_mirror(m.id)
    assert (after.paused, after.version) == (False, 1)


# -- API: pagination limits ------------------------------------------------------------------------------


async def test_a_full_last_page_has_no_more(server: Server) -> None:
    """``has_more`` is set only when a row beyond ``amount`` exists, not when the page is merely full."""
    ids = []
    for i in range(2):
        status, created, _ = await call(server.session, "POST", server.mirrors(), create_body(f"full-{i}"))
        assert status == 201, created
        ids.append(created["id"])
    status, page, _ = await call(server.session, "GET", server.mirrors(), params={"amount": "2"})
    assert status == 200
    assert [m["id"] for m in page["results"]] == sorted(ids)
    assert page["pagination"] == {"has_more": False, "next_offset": "", "results": 2, "max_per_page": 2}
    status, page, _ = await call(server.session, "GET", server.mirrors(), params={"amount": "1"})
    assert page["pagination"]["has_more"] is True and page["pagination"]["next_offset"] == sorted(ids)[0]

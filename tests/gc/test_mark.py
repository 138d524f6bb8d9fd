"""The lite mark on a repository built by the real core (memory KV, local namespace): the deleted set
equals an independent oracle's garbage, nothing live is marked, and the reports have their shapes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.committed.addresses import metarange_ranges
from lakefs_core.compute.executor import Executor, LiteExecutor
from lakefs_core.errors import ConflictError, CorruptDataError, ReadOnlyError
from lakefs_core.repos.graveler import Graveler
from lakefs_gc.mark.mark import MarkOptions, MarkResult, run_mark
from lakefs_gc.pins import StaticPins
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, ns_relative, read_lines
from lakefs_gc.runs.record import RunRecords
from lakefs_gc.runs.reports import Summary, read_commits_csv, read_manifest, read_summary
from tests.gc.mark_support import (
    MARK_NOW,
    MIN_AGE,
    Built,
    Env,
    live_addresses,
    oracle_garbage,
    stored_objects,
)


def options(**kw: object) -> MarkOptions:
    base: dict[str, object] = {"now": MARK_NOW, "min_age": MIN_AGE}
    base.update(kw)
    return MarkOptions(**base)  # type: ignore[arg-type]


async def deleted_set(g: Graveler, built: Built, run_id: str) -> set[str]:
    store = await g.namespace_store(built.ns)
    out: set[str] = set()
    for key in await list_parts(store, RunLayout(built.ns, run_id).deleted_text):
        async for lines in read_lines(store, key):
            assert not out.intersection(lines), "an address is marked twice"
            out.update(lines)
    return out


async def mark(env: Env, executor: Executor | None = None, **kw: object) -> tuple[MarkResult, set[str]]:
    own = executor is None
    executor = executor or LiteExecutor(workers=2)
    try:
        result = await run_mark(env.g, env.built.repo, executor, options=options(**kw))
    finally:
        if own:
            executor.close()
    return result, await deleted_set(env.g, env.built, result.run_id)


async def expected(env: Env, active: list[str]) -> tuple[set[str], set[str]]:
    store = await env.g.namespace_store(env.built.ns)
    live = await live_addresses(env.g, env.built, active)
    garbage = oracle_garbage(await stored_objects(store, env.built.ns), live, env.built)
    return live, garbage


async def test_lite_mark_equals_oracle(env: Env) -> None:
    b = env.built
    result, deleted = await mark(env)
    live, garbage = await expected(env, ["c3", "d", "c1"])
    assert deleted == garbage
    assert not deleted & live  # I1
    # What the scenario promises, by name.
    a = b.addr
    assert {a["g1"], a["s2old"], a["t1"], "legacy-obj"} <= deleted
    kept = ("a1", "a2", "a3", "a1v2", "a1v3", "d1", "full", "s1", "s2", "young", "future")
    assert not {a[n] for n in kept} & deleted
    assert "dummy" not in deleted and not any(x.startswith("_lakefs") for x in deleted)

    s = result.summary
    assert s.success and s.num_deleted_objects == len(deleted)
    assert s.active_commits == 3 and s.expired_commits == len(b.commits) + 1 - 3  # + the init commit
    assert s.uncommitted == 2  # s1 and s2 (the FULL address inside the namespace was committed)
    assert s.listed is not None and s.listed >= len(deleted) and s.ranges_read
    store = await env.g.namespace_store(b.ns)
    layout = RunLayout(b.ns, result.run_id)
    assert await read_summary(store, layout.summary) == s
    manifest = await read_manifest(store, layout.manifest)
    assert manifest.cutoff_time == MARK_NOW - MIN_AGE and manifest.rules is not None
    rows = [row async for row in read_commits_csv(store, layout.commits_csv)]
    assert {c for c, _, _ in rows} == {b.commits[n] for n in ("c3", "d", "c1")}


async def test_tags_ignored_and_pins(env: Env) -> None:
    b = env.built
    _, deleted = await mark(env, tags_policy="ignore")
    live, garbage = await expected(env, ["c3", "d"])
    assert deleted == garbage and b.addr["a2"] in deleted and b.addr["a1"] in deleted
    assert not deleted & live
    # A pin keeps c1 alive like a tag would.
    executor = LiteExecutor(workers=2)
    try:
        pinned = await run_mark(
            env.g, b.repo, executor, options=options(tags_policy="ignore"), pins=StaticPins([b.commits["c1"]])
        )
    finally:
        executor.close()
    kept = await deleted_set(env.g, b, pinned.run_id)
    assert b.addr["a2"] not in kept and kept == (await expected(env, ["c3", "d", "c1"]))[1]


async def test_no_rules_keeps_every_commit(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    await store.put(b.ns.gc_rules_key(), b"")  # lakeFS's "no rules"
    _, deleted = await mark(env)
    live, garbage = await expected(env, list(b.commits))
    assert deleted == garbage and b.addr["g1"] not in deleted
    assert not deleted & live


async def test_idempotent_remark(env: Env) -> None:
    _, first = await mark(env)
    _, second = await mark(env)
    assert first == second  # I3


async def test_min_age_zero_still_skips_future_slices(env: Env) -> None:
    _, deleted = await mark(env, min_age=MIN_AGE * 0)
    assert env.built.addr["young"] in deleted  # no longer younger than the cutoff
    assert env.built.addr["future"] not in deleted


async def _corrupt_first_range(env: Env, how: str) -> str:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    head = await env.g.get_commit(b.repo, "main")
    metarange = await store.get(b.ns.table_key(head.metarange_id))
    range_id = next(iter(metarange_ranges(metarange, name="m"))).id
    key = b.ns.table_key(range_id)
    if how == "missing":
        await store.delete(key)
    else:
        await store.put(key, b"this is not an sstable")
    return key


@pytest.mark.parametrize("how", ["missing", "corrupt"])
async def test_bad_range_stops_the_run_naming_the_file(env: Env, how: str) -> None:
    key = await _corrupt_first_range(env, how)
    with pytest.raises(CorruptDataError) as info:
        await mark(env)
    assert key in str(info.value)
    store = await env.g.namespace_store(env.built.ns)
    runs = [k async for k in _summaries(store, env)]
    assert len(runs) == 1 and runs[0].success is False  # recorded as failed, never sweepable
    # ... and so says its KV record, which the API and the scheduler believe (not the summary).
    found = await RunRecords(env.g, env.built.repo).read(runs[0].run_id)
    assert found is not None and found[1].state == "failed" and key in (found[1].reason or "")
    assert ns_relative(env.built.ns, RunLayout(env.built.ns, runs[0].run_id).summary) in found[1].files


async def _summaries(store: BlockStore, env: Env) -> AsyncIterator[Summary]:
    async for item in store.list(env.built.ns.tables_prefix()):
        if isinstance(item, ObjectInfo) and "/gc/unified/" in item.key and item.key.endswith("/summary.json"):
            summary = await read_summary(store, item.key)
            assert summary is not None
            yield summary


async def test_read_only_repository_is_refused(env: Env) -> None:
    await env.g.set_read_only(env.built.repo, True)
    with pytest.raises(ReadOnlyError):
        await mark(env)


async def test_run_id_is_claimed_once(env: Env) -> None:
    result, _ = await mark(env)
    with pytest.raises(ConflictError):
        await mark(env, run_id=result.run_id)

"""The sweep after a lite mark on a repository built by the real core (local namespace): it deletes
exactly the marked garbage, rescues what became live again, resumes after a crash at a fault point,
refuses failed, dry-run and absent marks, and a re-sweep deletes nothing."""

from __future__ import annotations

import pytest

from lakefs_core.errors import ConflictError, CorruptDataError, NotFoundError, TamperedError
from lakefs_core.repos.objects import Objects
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.faults import ENV, InjectedFault
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.rules import GCRules, delete_rules, save_rules
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.record import RunRecords
from lakefs_gc.sweep.sweep import SweepOptions, SweepReport, run_sweep
from tests.gc.mark_support import stored_objects
from tests.gc.test_mark import Env, deleted_set, options


async def mark(env: Env, **kw: object) -> str:
    from lakefs_core.compute.executor import LiteExecutor

    with LiteExecutor(workers=2) as executor:
        result = await run_mark(env.g, env.built.repo, executor, options=options(**kw))
    return result.run_id


async def sweep(env: Env, mark_id: str, **kw: object) -> SweepReport:
    store = await env.g.namespace_store(env.built.ns)
    return await run_sweep(
        env.g,
        env.built.repo,
        mark_id,
        deleter=store_deleter(store),
        options=SweepOptions(**kw),  # type: ignore[arg-type]
    )


async def readable(env: Env, ref: str) -> int:
    """Read every object visible at ``ref`` (fails if one's data is gone); returns how many."""
    objects = Objects(env.g)
    page = await objects.list(env.built.repo, ref, amount=1000)
    for stat in page.objects:
        if stat.address_type == "RELATIVE" or env.built.ns.relative_of(stat.physical_address, 2):
            await objects.read_all(env.built.repo, ref, stat.path)
    return len(page.objects)


async def test_sweep_deletes_exactly_the_marked_garbage(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env)
    marked = await deleted_set(env.g, b, mark_id)
    before = await stored_objects(store, b.ns)
    report = await sweep(env, mark_id, batch_size=2)
    after = await stored_objects(store, b.ns)
    assert set(before) - set(after) == marked  # exactly the marked set is gone
    assert report.deleted == len(marked) and report.failed == 0 and report.rescued == 0
    for ref in ("main", "dev", "v1"):
        assert await readable(env, ref)  # every live object still reads (I1)
    assert "dummy" in after
    # I3: a second sweep of the same mark deletes nothing and answers the same report.
    assert await sweep(env, mark_id) == report
    # I2 after the sweep: a new mark finds no garbage left.
    assert await deleted_set(env.g, b, await mark(env)) == set()


async def test_dry_run_deletes_nothing(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env)
    before = await stored_objects(store, b.ns)
    recorded = await RunRecords(env.g, b.repo).read(mark_id)
    report = await run_sweep(env.g, b.repo, mark_id, deleter=None, options=SweepOptions(dry_run=True))
    assert (
        report.dry_run
        and report.deleted == 0
        and report.candidates == len(await deleted_set(env.g, b, mark_id))
    )
    assert await stored_objects(store, b.ns) == before
    assert not await store.exists(RunLayout(b.ns, mark_id).sweep_report)
    # The record is left exactly as the mark wrote it: not swept, no checkpoint.
    records = RunRecords(env.g, b.repo)
    assert await records.read(mark_id) == recorded
    # A dry run that finds the files tampered with records the refusal as a real sweep does: the
    # run is failed for good (the API, the scheduler and the mirrors read that), nothing deleted.
    part = f"{RunLayout(b.ns, mark_id).deleted_text}/part-00000"
    await store.put(part, await store.get(part) + b"data/planted/object\n")
    with pytest.raises(TamperedError) as refused:
        await run_sweep(env.g, b.repo, mark_id, deleter=None, options=SweepOptions(dry_run=True))
    assert refused.value.reason == "digest"
    failed = await records.read(mark_id)
    assert failed is not None and failed[1].state == "failed"
    assert (failed[1].reason or "").startswith("digest")
    assert await stored_objects(store, b.ns) == before
    with pytest.raises(TamperedError, match="not complete"):
        await sweep(env, mark_id)
    # A dry-run MARK is never swept for real.
    dry = await mark(env, mode="dry-run")
    with pytest.raises(ConflictError):
        await sweep(env, dry)


async def test_reverification_rescues_a_revived_object(env: Env) -> None:
    b = env.built
    mark_id = await mark(env, tags_policy="ignore")
    marked = await deleted_set(env.g, b, mark_id)
    assert b.addr["a2"] in marked and b.addr["a1"] in marked  # only c1 (the tag, ignored) had them
    # Between mark and sweep a branch is created at the old commit: a2 and a1 are live again.
    await env.g.create_branch(b.repo, "revived", b.commits["c1"])
    report = await sweep(env, mark_id)
    assert report.rescued == 2 and report.deleted == len(marked) - 2
    assert await readable(env, "revived") == 3


async def test_reverification_honours_rules_changed_after_the_mark(env: Env) -> None:
    """Retention lengthened between mark and sweep is honoured (within 60 days c1 and the dangling
    leaf ``g`` are active again: a1, a2 and g1 are live); retention shortened after the mark
    deletes no more than the mark chose."""
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env, tags_policy="ignore")
    marked = await deleted_set(env.g, b, mark_id)
    revived = {b.addr["a1"], b.addr["a2"], b.addr["g1"]}
    assert revived <= marked
    await save_rules(store, b.ns, GCRules.of(60))
    report = await sweep(env, mark_id)
    assert report.rescued == 3 and report.deleted == len(marked) - 3
    assert revived <= set(await stored_objects(store, b.ns))

    # Rules removed after a mark (lakeFS's "no rules": nothing expires): everything is rescued.
    await save_rules(store, b.ns, GCRules.of(7))
    last = await mark(env, tags_policy="ignore")
    marked = await deleted_set(env.g, b, last)
    assert marked == revived
    await delete_rules(store, b.ns)
    report = await sweep(env, last)
    assert report.deleted == 0 and report.rescued == len(marked)

    await save_rules(store, b.ns, GCRules.of(7))
    shorter = await mark(env, tags_policy="ignore")
    marked = await deleted_set(env.g, b, shorter)
    assert marked == revived
    await save_rules(store, b.ns, GCRules.of(0, {"dev": 0}))
    before = set(await stored_objects(store, b.ns))
    report = await sweep(env, shorter)
    assert before - set(await stored_objects(store, b.ns)) == marked and report.rescued == 0


async def test_reverification_during_the_sweep(env: Env) -> None:
    """A revival after the sweep started is seen at the next periodic re-verification."""
    b = env.built
    mark_id = await mark(env, tags_policy="ignore")
    marked = sorted(await deleted_set(env.g, b, mark_id))
    store = await env.g.namespace_store(b.ns)
    revived = False

    class Reviving:
        """The real deleter; after the first batch, a branch revives c1 (a concurrent user)."""

        def __init__(self) -> None:
            self.inner = store_deleter(store)

        async def delete_keys(self, keys: list[str]):  # type: ignore[no-untyped-def]
            nonlocal revived
            outcome = await self.inner.delete_keys(keys)
            if not revived:
                revived = True
                await env.g.create_branch(b.repo, "revived", b.commits["c1"])
            return outcome

    opts = SweepOptions(batch_size=1, reverify_every_batches=1)
    report = await run_sweep(env.g, b.repo, mark_id, deleter=Reviving(), options=opts)
    assert report.reverifications >= 2
    gone = {b.addr["a1"], b.addr["a2"]} - set(await stored_objects(store, b.ns))
    # At most the first batch could have deleted one of them before the revival was seen.
    assert len(gone) <= 1 and report.rescued >= 1
    assert len(marked) == report.deleted + report.rescued


async def test_killed_sweep_resumes_from_the_checkpoint(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env)
    marked = await deleted_set(env.g, b, mark_id)
    monkeypatch.setenv(ENV, "sweep:batch:2")
    with pytest.raises(InjectedFault):
        await sweep(env, mark_id, batch_size=1, checkpoint_every_batches=1)
    assert not await store.exists(RunLayout(b.ns, mark_id).sweep_report)
    partly = set(await stored_objects(store, b.ns))
    assert len(marked - partly) == 2  # two batches of one key were deleted
    monkeypatch.delenv(ENV)
    report = await sweep(env, mark_id, batch_size=1)
    assert not marked & set(await stored_objects(store, b.ns))
    assert report.candidates == len(marked)  # the resumed sweep counts from its checkpoint
    assert await readable(env, "main")


async def test_sweep_refuses_absent_and_failed_marks(env: Env) -> None:
    b = env.built
    with pytest.raises(NotFoundError):
        await sweep(env, "no-such-run")
    store = await env.g.namespace_store(b.ns)
    head = await env.g.get_commit(b.repo, "main")
    await store.put(b.ns.table_key(head.metarange_id), b"corrupt")
    with pytest.raises(CorruptDataError):
        await mark(env, run_id="failed-run")
    with pytest.raises(ConflictError):
        await sweep(env, "failed-run")


async def test_tampered_report_never_deletes_metadata(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env)
    part = RunLayout(b.ns, mark_id).deleted_text + "/part-00000"
    await store.put(part, b"_lakefs/dummy\n")
    with pytest.raises(CorruptDataError):
        await sweep(env, mark_id)
    assert await store.exists(b.ns.dummy_key())

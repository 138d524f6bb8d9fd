"""Guards found by mutation testing: boundaries and checks of the GC mark and of the hard-delete
journal whose removal (or an off-by-one) no other test noticed. Each test names the logic it pins
down; all run on real stores (memory/SQLite KV, local namespace) with injected clocks. (The
retention walk of ``lakefs_gc.mark.active`` had no surviving mutant: its oracle tests already catch them.)
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.refs import kvkeys
from lakefs_core.repos.journal import DEFAULT_CLOCK_SKEW_SECONDS, DEFAULT_GRACE_SECONDS
from lakefs_gc.mark.mark import DEFAULT_MIN_AGE, MarkOptions, _job_options
from tests.gc.mark_support import CUTOFF, MIN_AGE, REAL_NOW, Env, _full_record, _stage_full, set_mtime
from tests.gc.test_mark import mark
from tests.journal import conftest as journal_fixtures
from tests.journal.conftest import World
from tests.journal.test_decide import commit, fate, upload

# The journal tests' fixtures (a real Graveler with the journal on, memory and SQLite KV).
kv = journal_fixtures.kv
world = journal_fixtures.world

GRACE = DEFAULT_GRACE_SECONDS
SKEW = DEFAULT_CLOCK_SKEW_SECONDS


# -- the journal --------------------------------------------------------------------------------------


async def test_stored_intent_is_due_a_grace_after_it_was_stored_not_recorded(world: World) -> None:
    """A slow PUT eats no grace: the stored-to-staged step has ``grace`` from ``t_stored`` (a
    decision counted from ``t`` would delete an upload that is about to stage its address)."""
    w = world
    journal = await w.g.journal(w.repo)
    t0 = w.clock()
    pending = await journal.record_intent("data/slowput/obj", "main", b"k", t0)
    stored = await journal.mark_stored(pending, t0 + timedelta(minutes=30))
    almost = t0 + timedelta(minutes=30, seconds=GRACE - 1)
    assert await journal.due_intents(almost) == []
    assert await journal.decide(stored, now=almost) == "wait"
    due = t0 + timedelta(minutes=30, seconds=GRACE)
    assert [i.address for i in await journal.due_intents(due)] == [stored.address]
    assert await journal.decide(stored, now=due) == "delete"  # never staged: garbage once due


async def test_intent_inside_the_skew_margin_of_turning_on_is_handed_over(world: World) -> None:
    """Commits just before the journal was turned on (by a clock up to ``clock_skew`` behind)
    recorded nothing: an intent within the margin after ``since`` is not provable garbage."""
    w = world
    await w.g.set_hard_delete_journal(w.repo, False)
    await w.g.set_hard_delete_journal(w.repo, True)
    w.advance(SKEW / 2)
    address = await upload(w, "a")
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    assert await fate(w, address) == "committed"


async def test_commit_by_a_clock_behind_the_uploader_still_protects_the_address(world: World) -> None:
    """The consumption record of a committer whose clock is behind (within the margin) is before
    the intent's ``t``: the decision must look back ``clock_skew`` or it deletes committed data."""
    w = world
    address = await upload(w, "a")
    w.advance(-SKEW / 2)  # the committing writer's clock is behind the uploader's
    await commit(w)
    w.advance(SKEW / 2 + GRACE)
    assert await fate(w, address) == "committed"


async def test_consumed_since_and_prune_keep_a_record_at_the_boundary(world: World) -> None:
    """``consumed_since(t)`` includes a record made at exactly ``t``, and ``prune_consumed(before)``
    keeps it (the reconciler prunes before the oldest intent's ``t`` less the margin, which the
    decision still reads)."""
    w = world
    journal = await w.g.journal(w.repo)
    now = w.clock()
    await journal.record_consumed("main", ("tok",), "c" * 64, now)
    found = [c async for c in journal.consumed_since("main", now.timestamp())]
    assert [(c.token, c.commit_id, c.t) for c in found] == [("tok", "c" * 64, now.timestamp())]
    assert await journal.prune_consumed("main", now.timestamp()) == 0
    assert len([c async for c in journal.consumed_since("main", 0.0)]) == 1
    assert await journal.prune_consumed("main", now.timestamp() + 0.001) == 1


async def test_malformed_consumed_key_is_corrupt_data(world: World) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    key = kvkeys.gc_consumed_prefix("main") + b"token-without-commit"
    await w.g.kv.set(repo.partition, key, b'{"t": 1}')
    journal = await w.g.journal(w.repo)
    with pytest.raises(CorruptDataError):
        _ = [c async for c in journal.consumed_since("main", 0.0)]


async def test_staged_value_with_an_unresolvable_address_keeps_the_object(world: World) -> None:
    """When the staged value of the intent's key cannot be classified, the address is kept
    ("staged"): the journal deletes only on definite knowledge."""
    w = world
    address = await upload(w, "a")
    weird = f"local://{w.root}/data//{address.rsplit('/', 1)[-1]}"  # inside, not a normal path
    await w.g.set_entry(w.repo, "main", _full_record(b"a", weird))
    w.advance(GRACE)
    assert await fate(w, address) == "staged"


# -- the mark -----------------------------------------------------------------------------------------


async def test_object_exactly_at_the_cutoff_is_not_a_candidate(env: Env) -> None:
    """``mtime < cutoff`` strictly, for slice and root objects alike: an object exactly ``min_age``
    old is kept, one a second older is garbage (no entry references any of them)."""
    cutoff = CUTOFF.replace(microsecond=0)  # whole seconds: the mtime round-trips exactly
    ns, store = env.built.ns, await env.g.namespace_store(env.built.ns)
    slice_id = new_slice_id(REAL_NOW - timedelta(days=3))  # an old slice: listed
    objects = {
        "edge": (ns.relative_address(slice_id, new_object_id()), cutoff),
        "older": (ns.relative_address(slice_id, new_object_id()), cutoff - timedelta(seconds=1)),
        "edge-root": ("edge-root-obj", cutoff),
        "older-root": ("older-root-obj", cutoff - timedelta(seconds=1)),
    }
    for name, (relative, when) in objects.items():
        await store.put(ns.key(relative), name.encode())
        set_mtime(str(env.root), relative, when)
    result, deleted = await mark(env, now=cutoff + MIN_AGE)
    assert result.manifest.cutoff_time == cutoff
    assert objects["older"][0] in deleted and objects["older-root"][0] in deleted
    assert objects["edge"][0] not in deleted
    assert objects["edge-root"][0] not in deleted


async def test_staged_full_address_inside_the_namespace_is_live(env: Env) -> None:
    """An uncommitted entry whose FULL address names an object of the namespace protects it."""
    store = await env.g.namespace_store(env.built.ns)
    await _stage_full(env.g, store, env.built, "staged-full")
    _, deleted = await mark(env)
    assert env.built.addr["staged-full"] not in deleted
    assert "legacy-obj" in deleted  # the mark did run and mark garbage


async def test_mark_without_now_uses_the_graveler_clock(env: Env) -> None:
    """``now`` defaults to the Graveler's (injected) clock, not the wall clock: at the builder's
    day 6, every commit is within the 7-day rule and every object is younger than the cutoff."""
    result, deleted = await mark(env, now=None)
    assert result.manifest.now == env.clock()
    assert result.manifest.cutoff_time == env.clock() - MIN_AGE
    assert result.summary.expired_commits == 0
    assert deleted == set()


def test_negative_min_age_is_refused() -> None:
    """A negative ``min_age`` puts the cutoff in the future: every object becomes a candidate."""
    with pytest.raises(BadInputError):
        MarkOptions(min_age=timedelta(seconds=-1))
    assert MarkOptions(min_age=timedelta(0)).min_age == timedelta(0)


def test_job_args_default_to_the_safe_min_age() -> None:
    """``gc-mark`` job arguments without ``min_age_seconds`` mean the default 24 h, not zero."""
    assert _job_options({})[0].min_age == DEFAULT_MIN_AGE == timedelta(hours=24)
    assert _job_options({"min_age_seconds": 60})[0].min_age == timedelta(seconds=60)
    with pytest.raises(BadInputError):
        _job_options({"min_age_seconds": -1})

"""Commits: ids, parents, generations, KV records, token rotation, asynchronous token drops, diff.

Includes the writer-protocol fault injection: a KV wrapper runs a commit between a writer's staging
write and its branch re-read (and between its branch read and its write); the write must end up
committed exactly once.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from datetime import timedelta

import pytest

from lakefs_core.committed.model import DiffType
from lakefs_core.errors import BadInputError, NoChangesError, NotFoundError, TooManyRetriesError
from lakefs_core.format.ids import commit_id
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.cleanup import TokenCleaner
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import Clock, HookedKV, collect, mem_namespace, new_graveler, record, unique


async def test_commit_without_changes_is_refused(g: Graveler, repo: str) -> None:
    before = await g.branch(repo, "main")
    with pytest.raises(NoChangesError):
        await g.commit(repo, "main", committer="t", message="m")
    after = await g.branch(repo, "main")
    assert after == before  # no token was sealed


async def test_commit_needs_a_message(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    with pytest.raises(BadInputError):
        await g.commit(repo, "main", committer="t", message="")


@pytest.mark.parametrize(
    "case",
    [
        ("message", "t", "m\udcff", {}),
        ("committer", "u\udcff", "m", {}),  # e.g. $USER holding bytes the OS could not decode
        ("metadata", "t", "m", {"k\udcff": "v"}),
        ("metadata['k']", "t", "m", {"k": "\ud800"}),
    ],
)
async def test_text_that_is_not_utf8_is_refused_before_anything_moves(
    g: Graveler, repo: str, case: tuple[str, str, str, dict[str, str]]
) -> None:
    field, committer, message, metadata = case
    await g.set_entry(repo, "main", record("a"))
    await g.commit(repo, "main", committer="t", message="first")
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("f"))
    await g.commit(repo, "feature", committer="t", message="f")
    await g.set_entry(repo, "main", record("b"))
    before = await g.branch(repo, "main")
    with pytest.raises(BadInputError, match=rf"^{re.escape(field)}: .* is not valid UTF-8"):
        await g.commit(repo, "main", committer=committer, message=message, metadata=metadata)
    assert await g.branch(repo, "main") == before  # no token was sealed
    await g.commit(repo, "main", committer="t", message="b")
    before = await g.branch(repo, "main")
    with pytest.raises(BadInputError, match=rf"^{re.escape(field)}: "):
        await g.merge(repo, "feature", "main", committer=committer, message=message, metadata=metadata)
    if not metadata:  # revert takes no metadata
        with pytest.raises(BadInputError, match=rf"^{re.escape(field)}: "):
            await g.revert(repo, "main", "main", committer=committer, message=message)
    assert await g.branch(repo, "main") == before


async def test_commit_unknown_branch(g: Graveler, repo: str) -> None:
    with pytest.raises(NotFoundError):
        await g.commit(repo, "nope", committer="t", message="m", allow_empty=True)


async def test_allow_empty_commit(g: Graveler, repo: str) -> None:
    head = await g.get_commit(repo, "main")
    made = await g.commit(repo, "main", committer="t", message="empty", allow_empty=True)
    assert made.parents == (head.id,)
    assert made.generation == head.generation + 1
    assert (await g.get_commit(repo, "main")).id == made.id
    assert await collect(g.list_entries(repo, "main")) == []


async def test_commit_id_parents_generation_and_kv_record(g: Graveler, repo: str) -> None:
    r = await g.repository(repo)
    previous = await g.get_commit(repo, "main")
    for i in range(3):
        await g.set_entry(repo, "main", record(f"k{i}"))
        made = await g.commit(
            repo, "main", committer="alice", message=f"commit {i}", metadata={"i": str(i), "x": "y"}
        )
        assert made.parents == (previous.id,)
        assert made.generation == previous.generation + 1
        raw = await g.kv.get(r.partition, kvkeys.commit_key(made.id))
        data = graveler_pb2.CommitData.FromString(raw)
        recomputed = commit_id(
            committer=data.committer,
            message=data.message,
            metarange_id=data.meta_range_id,
            creation_date=data.creation_date.seconds,
            metadata=dict(data.metadata),
            parents=list(data.parents),
        )
        assert data.id == made.id == recomputed
        assert (data.committer, data.message) == ("alice", f"commit {i}")
        assert dict(data.metadata) == {"i": str(i), "x": "y"}
        assert list(data.parents) == [previous.id]
        assert data.generation == made.generation
        assert data.version == 1
        assert data.creation_date.nanos == 0
        branch = graveler_pb2.BranchData.FromString(await g.kv.get(r.partition, kvkeys.branch_key("main")))
        assert branch.commit_id == made.id
        assert list(branch.sealed_tokens) == []
        assert await g.get_commit(repo, made.id) == made
        previous = made
    assert [r.key async for r in g.list_entries(repo, "main@")] == [b"k0", b"k1", b"k2"]


async def test_commit_rotates_the_staging_token(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    before = await g.branch(repo, "main")
    await g.commit(repo, "main", committer="t", message="m")
    after = await g.branch(repo, "main")
    assert after.staging_token != before.staging_token
    assert after.staging_token.startswith(f"{repo}-main:")
    assert after.sealed_tokens == ()
    assert await g.staging.is_empty(after.staging_token)


async def test_commit_applies_deletions_and_changes(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a", "1"))
    await g.set_entry(repo, "main", record("b", "1"))
    c1 = await g.commit(repo, "main", committer="t", message="one")
    await g.delete_entry(repo, "main", b"a")
    await g.set_entry(repo, "main", changed := record("b", "2"))
    await g.set_entry(repo, "main", record("c", "1"))
    c2 = await g.commit(repo, "main", committer="t", message="two")
    diff = {(d.type, d.key) for d in await collect(g.diff(repo, c1.id, c2.id))}
    assert diff == {(DiffType.REMOVED, b"a"), (DiffType.CHANGED, b"b"), (DiffType.ADDED, b"c")}
    assert (await g.get_entry(repo, "main@", b"b")).identity == changed.identity


async def test_commit_of_a_rewrite_with_the_same_identity_has_no_changes(g: Graveler, repo: str) -> None:
    rec = record("a")
    await g.set_entry(repo, "main", rec)
    await g.commit(repo, "main", committer="t", message="m")
    await g.set_entry(repo, "main", rec)  # idempotent rewrite
    assert await collect(g.diff_uncommitted(repo, "main")) == []
    with pytest.raises(NoChangesError):
        await g.commit(repo, "main", committer="t", message="again")


async def test_merge_and_revert_accept_a_branch_holding_only_noop_staging(g: Graveler, repo: str) -> None:
    """A staged rewrite identical to the committed value (what a writer racing a commit leaves
    behind) is not a change: merge/revert into that branch are not refused for it."""
    rec = record("a")
    await g.set_entry(repo, "main", rec)
    await g.commit(repo, "main", committer="t", message="m")
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("f"))
    await g.commit(repo, "feature", committer="t", message="f")
    await g.set_entry(repo, "main", rec)
    with pytest.raises(NoChangesError):
        await g.commit(repo, "main", committer="t", message="noop")
    assert (await g.branch(repo, "main")).sealed_tokens == ()
    merged = await g.merge(repo, "feature", "main", committer="t")
    assert (await g.get_commit(repo, "main")).id == merged.id


async def test_repeated_noop_commits_do_not_grow_the_branch_record(g: Graveler, repo: str) -> None:
    rec = record("a")
    await g.set_entry(repo, "main", rec)
    await g.commit(repo, "main", committer="t", message="m")
    await g.set_entry(repo, "main", rec)
    for _ in range(5):
        with pytest.raises(NoChangesError):
            await g.commit(repo, "main", committer="t", message="noop")
    assert (await g.branch(repo, "main")).sealed_tokens == ()


# -- asynchronous token drops ---------------------------------------------------------------------------


async def test_consumed_tokens_dropped_after_grace_period(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    clock = Clock()
    g = new_graveler(kv, stores, clock=clock)
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    for i in range(3):
        await g.set_entry(repo, "main", record(f"k{i}"))
    token = (await g.branch(repo, "main")).staging_token
    await g.commit(repo, "main", committer="t", message="m")

    pending = dict([p async for p in g.refs.pending_cleanup()])
    assert pending == {token: int(clock().timestamp())}
    raw = await kv.get(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(token))
    assert int(raw) == int(clock().timestamp())
    assert not await g.staging.is_empty(token)  # still readable by in-flight readers

    cleaner = TokenCleaner(g.refs, g.staging, grace_seconds=30, clock=clock)
    assert await cleaner.step() == 0
    clock.advance(29)
    assert await cleaner.step() == 0
    assert not await g.staging.is_empty(token)
    clock.advance(1)
    assert await cleaner.step() == 1
    assert cleaner.dropped_tokens == 1 and cleaner.dropped_entries == 3
    assert await g.staging.is_empty(token)
    assert [p async for p in g.refs.pending_cleanup()] == []
    assert await cleaner.step() == 0
    # Committed data is unaffected.
    assert [r.key async for r in g.list_entries(repo, "main")] == [b"k0", b"k1", b"k2"]


async def test_a_new_process_picks_up_pending_drops(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    clock = Clock()
    g = new_graveler(kv, stores, clock=clock)
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    tokens = []
    for i in range(3):
        await g.set_entry(repo, "main", record(f"k{i}"))
        tokens.append((await g.branch(repo, "main")).staging_token)
        await g.commit(repo, "main", committer="t", message=f"m{i}")
        clock.advance(10)
    dev = await g.create_branch(repo, "dev", "main")
    await g.set_entry(repo, "dev", record("d"))
    await g.delete_branch(repo, "dev")
    tokens.append(dev.staging_token)
    # The first process goes away with one drop done at most.
    first = TokenCleaner(g.refs, g.staging, grace_seconds=15, clock=clock)
    assert await first.step(limit=1) == 1
    del first, g

    clock.advance(100)
    fresh = new_graveler(kv, StoreRegistry(), clock=clock)  # "new process": new Graveler, same KV
    cleaner = TokenCleaner(fresh.refs, fresh.staging, grace_seconds=15, clock=clock)
    assert await cleaner.step() == 3
    for token in tokens:
        assert await fresh.staging.is_empty(token)
    assert [p async for p in fresh.refs.pending_cleanup()] == []


async def test_interrupted_drop_is_retried(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    clock = Clock()
    hooked = HookedKV(kv)
    g = new_graveler(hooked, stores, clock=clock)
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    await g.set_entry(repo, "main", record("a"))
    await g.set_entry(repo, "main", record("b"))
    token = (await g.branch(repo, "main")).staging_token
    await g.commit(repo, "main", committer="t", message="m")
    clock.advance(60)
    calls = 0

    def crash_on_second_delete(op: str, partition: bytes, key: bytes) -> None:
        nonlocal calls
        if op == "delete" and partition == kvkeys.staging_partition(token):
            calls += 1
            if calls == 2:
                raise RuntimeError("process died")

    hooked.before.append(crash_on_second_delete)
    with pytest.raises(RuntimeError):
        await TokenCleaner(g.refs, g.staging, clock=clock).step()
    hooked.before.clear()
    assert [t async for t, _ in g.refs.pending_cleanup()] == [token]  # mark kept
    assert await TokenCleaner(g.refs, g.staging, clock=clock).step() == 1
    assert await g.staging.is_empty(token)


async def test_cleaner_run_loop_stops(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    g = new_graveler(kv, stores)
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    await g.set_entry(repo, "main", record("a"))
    await g.commit(repo, "main", committer="t", message="m")
    cleaner = TokenCleaner(g.refs, g.staging, grace_seconds=0)
    stop = asyncio.Event()
    task = asyncio.create_task(cleaner.run(0.01, stop))
    for _ in range(100):
        if cleaner.dropped_tokens:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert cleaner.dropped_tokens == 1


# -- diff -------------------------------------------------------------------------------------------------


async def test_diff_between_refs(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("keep"))
    await g.set_entry(repo, "main", record("change", "1"))
    await g.set_entry(repo, "main", record("remove"))
    c1 = await g.commit(repo, "main", committer="t", message="one")
    await g.create_branch(repo, "dev", "main")
    await g.set_entry(repo, "dev", record("change", "2"))
    await g.delete_entry(repo, "dev", b"remove")
    await g.set_entry(repo, "dev", record("add"))
    await g.commit(repo, "dev", committer="t", message="two")
    await g.create_tag(repo, "base", c1.id)

    forward = [(d.type, d.key) for d in await collect(g.diff(repo, "base", "dev"))]
    assert forward == [(DiffType.ADDED, b"add"), (DiffType.CHANGED, b"change"), (DiffType.REMOVED, b"remove")]
    backward = [(d.type, d.key) for d in await collect(g.diff(repo, "dev", "main"))]
    assert backward == [
        (DiffType.REMOVED, b"add"),
        (DiffType.CHANGED, b"change"),
        (DiffType.ADDED, b"remove"),
    ]
    changed = next(d for d in await collect(g.diff(repo, "main", "dev")) if d.key == b"change")
    assert changed.left is not None and changed.right is not None
    assert changed.left.identity != changed.right.identity
    assert await collect(g.diff(repo, "main", c1.id)) == []
    first = await collect(g.diff(repo, "main~1", "main"))
    assert {d.key for d in first} == {b"keep", b"change", b"remove"}
    assert {d.type for d in first} == {DiffType.ADDED}


async def test_diff_ignores_staged_changes(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await g.commit(repo, "main", committer="t", message="one")
    await g.set_entry(repo, "main", record("staged"))
    assert await collect(g.diff(repo, "main~1", "main")) != []
    assert {d.key for d in await collect(g.diff(repo, "main~1", "main"))} == {b"a"}


async def test_uncommitted_diff(g: Graveler, repo: str) -> None:
    same = record("same")
    await g.set_entry(repo, "main", same)
    await g.set_entry(repo, "main", record("change", "1"))
    await g.set_entry(repo, "main", record("remove"))
    await g.commit(repo, "main", committer="t", message="one")
    assert await collect(g.diff_uncommitted(repo, "main")) == []
    await g.set_entry(repo, "main", same)
    await g.set_entry(repo, "main", record("change", "2"))
    await g.delete_entry(repo, "main", b"remove")
    await g.set_entry(repo, "main", record("add"))
    await g.set_entry(repo, "main", record("ghost"))
    await g.delete_entry(repo, "main", b"ghost")  # added then deleted: no difference
    diff = [(d.type, d.key) for d in await collect(g.diff_uncommitted(repo, "main"))]
    assert diff == [(DiffType.ADDED, b"add"), (DiffType.CHANGED, b"change"), (DiffType.REMOVED, b"remove")]


# -- the writer protocol under token rotation ---------------------------------------------------------------


async def _added_in(g: Graveler, repo: str) -> Counter[bytes]:
    """How many first-parent commits of main add each key."""
    counts: Counter[bytes] = Counter()
    async for c in g.log(repo, "main"):
        if not c.parents:
            continue
        for d in await collect(g.diff(repo, c.parents[0], c.id)):
            assert d.type is DiffType.ADDED
            counts[d.key] += 1
    return counts


@pytest.mark.parametrize("moment", ["between-write-and-reread", "between-read-and-write"])
async def test_writer_survives_a_commit_rotating_its_token(
    kv: MemoryKVStore, stores: StoreRegistry, moment: str
) -> None:
    hooked = HookedKV(kv)
    writer = new_graveler(hooked, stores)  # the writer's operations go through the hooks
    committer = new_graveler(kv, stores)  # the committer's do not
    repo = unique()
    await committer.create_repository(repo, mem_namespace())
    await committer.set_entry(repo, "main", record("other"))  # something else to commit
    token = (await committer.branch(repo, "main")).staging_token
    fired: list[str] = []

    async def commit_now(op: str, partition: bytes, key: bytes) -> None:
        if op == "set" and partition == kvkeys.staging_partition(token) and key == b"racy" and not fired:
            fired.append((await committer.commit(repo, "main", committer="c", message="racing")).id)

    (hooked.after if moment == "between-write-and-reread" else hooked.before).append(commit_now)
    await writer.set_entry(repo, "main", record("racy"))
    assert fired, "the hook did not run"
    racing = await committer.get_commit(repo, fired[0])
    staging_writes = [p for op, p, _ in hooked.ops if op == "set"]
    assert len(staging_writes) == 2  # the write was repeated on the new live token
    assert staging_writes[0] == kvkeys.staging_partition(token)
    live = (await committer.branch(repo, "main")).staging_token
    assert staging_writes[1] == kvkeys.staging_partition(live)

    in_racing = {d.key for d in await collect(committer.diff(repo, racing.parents[0], racing.id))}
    if moment == "between-write-and-reread":
        assert in_racing == {b"other", b"racy"}
        # The repeat is identical to what was committed: nothing left to commit.
        assert await collect(committer.diff_uncommitted(repo, "main")) == []
        with pytest.raises(NoChangesError):
            await committer.commit(repo, "main", committer="c", message="next")
    else:
        assert in_racing == {b"other"}
        assert [d.key for d in await collect(committer.diff_uncommitted(repo, "main"))] == [b"racy"]
        await committer.commit(repo, "main", committer="c", message="next")
    counts = await _added_in(committer, repo)
    assert counts == {b"other": 1, b"racy": 1}
    assert (await committer.get_entry(repo, "main@", b"racy")).key == b"racy"


async def test_writer_survives_several_rotations(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    hooked = HookedKV(kv)
    writer = new_graveler(hooked, stores)
    committer = new_graveler(kv, stores)
    repo = unique()
    await committer.create_repository(repo, mem_namespace())
    rounds = 0

    async def rotate(op: str, partition: bytes, key: bytes) -> None:
        nonlocal rounds
        if op == "set" and key == b"racy" and rounds < 3:
            rounds += 1
            await committer.set_entry(repo, "main", record(f"filler{rounds}"))
            await committer.commit(repo, "main", committer="c", message=f"r{rounds}")

    hooked.after.append(rotate)
    await writer.set_entry(repo, "main", record("racy"))
    assert rounds == 3
    with pytest.raises(NoChangesError):
        await committer.commit(repo, "main", committer="c", message="final")
    counts = await _added_in(committer, repo)
    assert counts == {b"racy": 1, b"filler1": 1, b"filler2": 1, b"filler3": 1}


async def test_writer_gives_up_when_the_token_keeps_rotating(
    kv: MemoryKVStore, stores: StoreRegistry
) -> None:
    hooked = HookedKV(kv)
    writer = Graveler(hooked, stores, GravelerSettings(write_attempts=3))
    committer = new_graveler(kv, stores)
    repo = unique()
    await committer.create_repository(repo, mem_namespace())

    async def rotate(op: str, partition: bytes, key: bytes) -> None:
        if op == "set" and key == b"racy":
            await committer.commit(repo, "main", committer="c", message="r", allow_empty=True)

    hooked.after.append(rotate)
    with pytest.raises(TooManyRetriesError):
        await writer.set_entry(repo, "main", record("racy"))


async def test_concurrent_commits_in_one_process(g: Graveler, repo: str) -> None:
    for i in range(20):
        await g.set_entry(repo, "main", record(f"k{i:02d}"))

    async def attempt() -> str | None:
        try:
            return (await g.commit(repo, "main", committer="t", message="m")).id
        except NoChangesError:
            return None

    results = await asyncio.gather(*(attempt() for _ in range(6)))
    history = [c.id async for c in g.log(repo, "main")]
    assert {r for r in results if r is not None} <= set(history)
    assert len(history) == len(set(history))
    counts = await _added_in(g, repo)
    assert counts == {f"k{i:02d}".encode(): 1 for i in range(20)}
    assert (await g.branch(repo, "main")).sealed_tokens == ()


async def test_commit_creation_date_uses_the_clock(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    clock = Clock()
    g = new_graveler(kv, stores, clock=clock)
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    clock.advance(3600.75)
    await g.set_entry(repo, "main", record("a"))
    made = await g.commit(repo, "main", committer="t", message="m")
    assert made.creation_date == (clock() - timedelta(microseconds=750_000))


@pytest.mark.parametrize("other_has_changes", [False, True])
async def test_commit_whose_tokens_another_commit_consumed(
    kv: MemoryKVStore, stores: StoreRegistry, other_has_changes: bool
) -> None:
    """B seals its token; before B publishes, A seals again (owning B's token too) and publishes.

    If A committed real changes, B returns A's commit (B's writes are in it). If the tokens were
    only no-ops, A unseals them and B reports NoChangesError instead of an unrelated commit."""
    hooked = HookedKV(kv)
    b = new_graveler(hooked, stores)
    a = new_graveler(kv, stores)
    repo = unique()
    r = await a.create_repository(repo, mem_namespace())
    rec = record("k")
    await a.set_entry(repo, "main", rec)
    await a.commit(repo, "main", committer="a", message="setup")
    await a.set_entry(repo, "main", rec)  # a no-op rewrite: B's only staged change
    fired: list[str] = []

    async def a_commits(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and partition == r.partition and key == b"branches/main" and not fired:
            fired.append("rotated")
            if other_has_changes:
                await a.set_entry(repo, "main", record("real"))
                fired.append((await a.commit(repo, "main", committer="a", message="A")).id)
            else:
                with pytest.raises(NoChangesError):
                    await a.commit(repo, "main", committer="a", message="A", allow_empty=False)

    hooked.after.append(a_commits)
    if other_has_changes:
        got = await b.commit(repo, "main", committer="b", message="B")
        assert got.id == fired[1]
        assert got.committer == "a"
    else:
        with pytest.raises(NoChangesError):
            await b.commit(repo, "main", committer="b", message="B")
    branch = await a.branch(repo, "main")
    assert branch.sealed_tokens == ()
    assert len([c async for c in a.log(repo, "main")]) == (3 if other_has_changes else 2)


@pytest.mark.parametrize("crash_at", ["after-seal", "after-commit-record"])
async def test_a_crashed_commit_leaves_nothing_lost(
    kv: MemoryKVStore, stores: StoreRegistry, crash_at: str
) -> None:
    """A commit that dies after sealing (or after storing its record, before publishing) leaves its
    token sealed: reads still see the changes and the next commit publishes them."""
    hooked = HookedKV(kv)
    g = new_graveler(hooked, stores)
    repo = unique()
    r = await g.create_repository(repo, mem_namespace())
    await g.set_entry(repo, "main", record("a"))
    head = (await g.get_commit(repo, "main")).id

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if crash_at == "after-seal" and op == "set_if" and key == b"branches/main":
            raise RuntimeError("died after sealing")
        if crash_at == "after-commit-record" and op == "set_if" and key.startswith(kvkeys.COMMITS_PREFIX):
            raise RuntimeError("died after storing the commit record")

    hooked.after.append(crash)
    with pytest.raises(RuntimeError):
        await g.commit(repo, "main", committer="t", message="dies")
    hooked.after.clear()
    branch = await g.branch(repo, "main")
    assert branch.commit_id == head and len(branch.sealed_tokens) == 1
    assert (await g.get_entry(repo, "main", b"a")).key == b"a"
    assert [d.key async for d in g.diff_uncommitted(repo, "main")] == [b"a"]
    await g.set_entry(repo, "main", record("b"))
    made = await g.commit(repo, "main", committer="t", message="recovers")
    assert made.parents == (head,)
    assert [x.key async for x in g.list_entries(repo, "main@")] == [b"a", b"b"]
    assert (await g.branch(repo, "main")).sealed_tokens == ()
    pending = {t async for t, _ in g.refs.pending_cleanup()}
    assert set(branch.sealed_tokens) <= pending
    if crash_at == "after-commit-record":
        # The orphaned record is harmless: same content would give the same id, else it is unreachable.
        assert len([c async for c in g.refs.list_commits(r)]) >= 2


async def test_recreated_branch_does_not_see_old_staging(g: Graveler, repo: str) -> None:
    await g.create_branch(repo, "dev", "main")
    await g.set_entry(repo, "dev", record("old"))
    await g.delete_branch(repo, "dev")
    await g.create_branch(repo, "dev", "main")
    assert [x.key async for x in g.list_entries(repo, "dev")] == []
    with pytest.raises(NoChangesError):
        await g.commit(repo, "dev", committer="t", message="m")


async def test_reset_during_a_commit(kv: MemoryKVStore, stores: StoreRegistry) -> None:
    """A reset that lands between a commit's seal and its publish discards the sealed changes; the
    commit then reports NoChangesError rather than returning an unrelated commit."""
    hooked = HookedKV(kv)
    committer = new_graveler(hooked, stores)
    other = new_graveler(kv, stores)
    repo = unique()
    await other.create_repository(repo, mem_namespace())
    await other.set_entry(repo, "main", record("a"))
    fired: list[bool] = []

    async def reset(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and key == b"branches/main" and not fired:
            fired.append(True)
            await other.reset_branch(repo, "main")

    hooked.after.append(reset)
    with pytest.raises(NoChangesError):
        await committer.commit(repo, "main", committer="t", message="m")
    assert [c.id async for c in other.log(repo, "main")] == [(await other.get_commit(repo, "main")).id]
    assert (await other.branch(repo, "main")).sealed_tokens == ()

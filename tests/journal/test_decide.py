"""The journal's decision on real Gravelers (memory and SQLite KV, local namespace): every fate of an
uploaded address that issue 11 lists, through the real upload, commit, reset and delete paths."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from lakefs_core.errors import ConflictError, CorruptDataError, NoChangesError, PreconditionFailedError
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.journal import (
    DEFAULT_CLOCK_SKEW_SECONDS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_PENDING_TIMEOUT_SECONDS,
    Intent,
    decide,
    new_batch_id,
)
from lakefs_core.repos.objects import Objects, UploadItem
from tests.journal.conftest import World

GRACE = DEFAULT_GRACE_SECONDS


async def upload(w: World, path: str, body: bytes = b"x", branch: str = "main") -> str:
    return (await w.objects.upload(w.repo, branch, path, body)).physical_address


async def intent_of(w: World, address: str) -> Intent:
    found = await (await w.g.journal(w.repo)).intent(address)
    assert found is not None, address
    return found


async def fate(w: World, address: str) -> str:
    journal = await w.g.journal(w.repo)
    return await decide(journal, await intent_of(w, address), now=w.clock())


async def commit(w: World, branch: str = "main") -> str:
    return (await w.g.commit(w.repo, branch, committer="t", message="m")).id


async def test_upload_writes_intent_before_put_and_settles_it_after(world: World) -> None:
    w = world
    seen: list[tuple[str, bool]] = []

    def check(op: str, partition: bytes, key: bytes) -> None:
        if op in ("set_if", "set_many_if") and key.startswith(kvkeys.GC_INTENTS_PREFIX):
            address = key[len(kvkeys.GC_INTENTS_PREFIX) :].decode()
            seen.append((address, w.object_path(address).exists()))

    w.kv.after.append(check)
    w.kv.ops.clear()
    address = await upload(w, "a.txt", b"hello")
    # First the pending intent, with no object yet; then the stored update, with the object there.
    assert seen == [(address, False), (address, True)]
    # The stored update and the staged entry are ONE conditional write.
    settle = [op for op in w.kv.ops if op[0] == "set_many_if"]
    assert [k for _, _, k in settle] == [kvkeys.gc_intent_key(address), b"a.txt"]
    intent = await intent_of(w, address)
    assert (intent.state, intent.branch, intent.key) == ("stored", "main", b"a.txt")
    assert intent.t == intent.t_stored == w.clock().timestamp()


async def test_still_staged_is_kept_and_not_due_waits(world: World) -> None:
    w = world
    address = await upload(w, "a")
    assert await fate(w, address) == "wait"  # inside the grace period
    w.advance(GRACE)
    assert await fate(w, address) == "staged"
    # Sealed by a commit in progress (the token rotated, not yet published): still staged.
    branch, raw = await w.g.refs.get_branch(await w.g.repository(w.repo), "main")
    rotated = replace(branch, staging_token="x-main:sealed-test", sealed_tokens=(branch.staging_token,))
    await w.g.refs.cas_branch(await w.g.repository(w.repo), rotated, raw)
    assert await fate(w, address) == "staged"


async def test_committed_address_is_handed_to_retention_gc(world: World) -> None:
    w = world
    address = await upload(w, "a")
    await commit(w)
    w.advance(GRACE)
    assert await fate(w, address) == "committed"
    # Still committed in that commit after being overwritten and committed again.
    await upload(w, "a", b"newer")
    await commit(w)
    assert await fate(w, address) == "committed"


async def test_overwrite_before_commit_is_garbage(world: World) -> None:
    w = world
    old = await upload(w, "a", b"1")
    new = await upload(w, "a", b"2")
    w.advance(GRACE)
    assert await fate(w, old) == "delete"
    assert await fate(w, new) == "staged"
    await commit(w)
    assert await fate(w, old) == "delete"  # the commit holds the newer address only
    assert await fate(w, new) == "committed"


async def test_overwrite_across_a_sealed_token_waits_for_the_commit(world: World) -> None:
    w = world
    old = await upload(w, "a", b"1")
    # Seal the token holding ``old`` as a commit does, then overwrite in the new live token.
    repo = await w.g.repository(w.repo)
    branch, raw = await w.g.refs.get_branch(repo, "main")
    sealed = replace(branch, staging_token=f"{w.repo}-main:later", sealed_tokens=(branch.staging_token,))
    await w.g.refs.cas_branch(repo, sealed, raw)
    # Another process (no cached live token) overwrites: only the new live token gets the value.
    other = Objects(Graveler(w.kv, w.g.stores, w.g.settings, clock=w.clock))
    await other.upload(w.repo, "main", "a", b"2")
    w.advance(GRACE)
    assert await fate(w, old) == "staged"  # its sealed token still holds it
    await commit(w)
    assert await fate(w, old) == "delete"


async def test_delete_before_commit_is_garbage(world: World) -> None:
    w = world
    address = await upload(w, "a")
    await w.objects.delete(w.repo, "main", "a")
    w.advance(GRACE)
    assert await fate(w, address) == "delete"
    with pytest.raises(NoChangesError):  # a no-op: "a" was never committed
        await commit(w)
    # The no-op attempt recorded its tokens as consumed into the unchanged head, which lacks "a".
    assert [c async for c in (await w.g.journal(w.repo)).consumed_since("main", 0.0)] != []
    assert await fate(w, address) == "delete"


async def test_branch_reset_is_garbage(world: World) -> None:
    w = world
    address = await upload(w, "a")
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    assert await fate(w, address) == "delete"


async def test_branch_delete_is_garbage_but_its_commits_are_not(world: World) -> None:
    w = world
    await w.g.create_branch(w.repo, "dev", "main")
    committed = await upload(w, "c", branch="dev")
    await commit(w, "dev")
    staged = await upload(w, "s", branch="dev")
    await w.g.delete_branch(w.repo, "dev")
    w.advance(GRACE)
    assert await fate(w, staged) == "delete"
    assert await fate(w, committed) == "committed"


async def test_crash_between_put_and_stored_update_stays_pending(world: World) -> None:
    w = world
    crashed: list[str] = []

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and key.startswith(kvkeys.GC_INTENTS_PREFIX) and crashed:
            raise RuntimeError("crash after the PUT")  # before its settle-and-stage write
        if op == "set_if" and key.startswith(kvkeys.GC_INTENTS_PREFIX):
            crashed.append(key[len(kvkeys.GC_INTENTS_PREFIX) :].decode())

    w.kv.before.append(crash)
    with pytest.raises(RuntimeError):
        await upload(w, "a")
    w.kv.before.clear()
    address = crashed[0]
    assert w.object_path(address).exists()  # the PUT happened
    intent = await intent_of(w, address)
    assert intent.state == "pending"
    w.advance(GRACE)
    assert await fate(w, address) == "wait"  # the PUT may still be in flight
    w.advance(DEFAULT_PENDING_TIMEOUT_SECONDS)
    assert await fate(w, address) == "delete"


async def test_no_crash_leaves_an_intent_stored_but_not_staged(world: World) -> None:
    """The stored update and the staging are one atomic write: an upload that fails in it (here:
    the KV refuses it mid-way) leaves its intent pending (due after the pending timeout, when no
    upload can stage it any more), never stored without its entry (which the grace would let the
    reconciler delete under an upload about to stage it)."""
    w = world
    repo = await w.g.repository(w.repo)
    token = (await w.g.refs.get_branch(repo, "main"))[0].staging_token

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and partition == kvkeys.staging_partition(token):
            raise RuntimeError("crash in the staging write")

    w.kv.before.append(crash)
    with pytest.raises(RuntimeError):
        await upload(w, "a")
    w.kv.before.clear()
    [intent] = [i async for i in (await w.g.journal(w.repo)).intents()]
    assert intent.state == "pending"
    assert [r async for r in w.g.list_entries(w.repo, "main")] == []
    w.advance(GRACE)
    assert await fate(w, intent.address) == "wait"
    w.advance(DEFAULT_PENDING_TIMEOUT_SECONDS)
    assert await fate(w, intent.address) == "delete"


# -- batch uploads: one settle record per batch ---------------------------------------------------------


async def upload_batch(w: World, *paths: str) -> dict[str, str]:
    items = [UploadItem(path, path.encode()) for path in paths]
    stats = await w.objects.upload_many(w.repo, "main", items)
    return {s.path: s.physical_address for s in stats}


async def due_fates(w: World) -> dict[str, str]:
    """The reconciler's view: the due intents (batch records applied), each decided."""
    journal = await w.g.journal(w.repo)
    due = await journal.due_intents(w.clock())
    return {i.address: await decide(journal, i, now=w.clock()) for i in due}


async def test_batch_upload_is_due_a_grace_after_its_settle_record(world: World) -> None:
    w = world
    addresses = await upload_batch(w, "a", "b", "c")
    await upload(w, "b")  # overwrites b's batch address
    await w.objects.delete(w.repo, "main", "c")
    w.advance(GRACE - 1)
    assert await due_fates(w) == {}
    w.advance(1)
    fates = await due_fates(w)
    assert {fates[addresses[p]] for p in "bc"} == {"delete"}
    assert fates[addresses["a"]] == "staged"


async def test_a_pruned_settle_record_changes_no_decision(world: World) -> None:
    w = world
    addresses = await upload_batch(w, "a", "b")
    await upload(w, "b")
    journal = await w.g.journal(w.repo)
    w.advance(DEFAULT_PENDING_TIMEOUT_SECONDS + 2 * DEFAULT_CLOCK_SKEW_SECONDS + 1)
    before = await due_fates(w)
    batch = {i.address: i for i in await journal.due_intents(w.clock()) if i.batch is not None}
    assert set(batch) == set(addresses.values()) and {i.state for i in batch.values()} == {"stored"}
    # too recent for the cut-off: kept
    assert await journal.prune_settled(w.clock().timestamp() - 2 * DEFAULT_PENDING_TIMEOUT_SECONDS) == 0
    cutoff = w.clock().timestamp() - DEFAULT_PENDING_TIMEOUT_SECONDS - 2 * DEFAULT_CLOCK_SKEW_SECONDS
    assert await journal.prune_settled(cutoff) == 1
    assert await journal.settled_at(batch[addresses["a"]].batch or "") is None
    due = [i for i in await journal.due_intents(w.clock()) if i.batch is not None]
    assert {i.state for i in due} == {"pending"} and len(due) == 2  # read as written, due all the same
    assert await due_fates(w) == before
    assert before[addresses["b"]] == "delete" and before[addresses["a"]] == "staged"
    claimed = await journal.claim(next(i for i in due if i.address == addresses["b"]))
    assert claimed.state == "deleting"


async def test_a_settled_record_without_its_entries_is_garbage(world: World) -> None:
    """A batch record settled with no entries staged (no upload does that: the settle and the
    entries are one conditional write on every driver; forged here): the addresses are garbage
    one grace later."""
    w = world
    journal = await w.g.journal(w.repo)
    repo = await w.g.repository(w.repo)
    ns = StorageNamespace.parse(repo.storage_namespace)
    store = await w.g.namespace_store(ns)
    batch = new_batch_id()
    intents = await journal.record_intents(
        [Intent(f"data/s/o{n}", "main", b"k%d" % n, w.clock().timestamp(), batch=batch) for n in range(2)]
    )
    for intent in intents:
        await store.put(ns.key(intent.address), b"body", if_none_match=True)
    settle = journal.settle_batch(intents, w.clock(), "forged")
    await w.kv.set(settle.partition, settle.key, settle.value)
    assert await journal.settled_at(batch) == w.clock().timestamp()
    w.advance(GRACE - 1)
    assert await due_fates(w) == {}
    w.advance(1)
    assert await due_fates(w) == {i.address: "delete" for i in intents}


async def test_crash_before_the_settle_record_stays_pending(world: World) -> None:
    w = world

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and key.startswith(b"gc-settled/"):
            raise RuntimeError("crash after the PUTs")

    w.kv.before.append(crash)
    with pytest.raises(RuntimeError):
        await upload_batch(w, "a", "b")
    w.kv.before.clear()
    w.advance(GRACE)
    assert await due_fates(w) == {}  # the PUTs may still be in flight
    w.advance(DEFAULT_PENDING_TIMEOUT_SECONDS)
    assert set((await due_fates(w)).values()) == {"delete"}


async def test_claimed_pending_intent_fails_the_late_upload(world: World) -> None:
    """The reconciler claimed a timed-out pending intent: the upload must not stage the address."""
    w = world

    reconciler = Graveler(w.kv.inner, w.g.stores, w.g.settings, clock=w.clock)  # not hooked

    async def claim_first(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and key.startswith(kvkeys.GC_INTENTS_PREFIX):
            journal = await reconciler.journal(w.repo)
            intent = await journal.intent(key[len(kvkeys.GC_INTENTS_PREFIX) :].decode())
            if intent is not None and intent.state == "pending":
                await journal.claim(intent)

    w.kv.before.append(claim_first)
    with pytest.raises(ConflictError, match="lost to the hard-delete reconciler") as lost:
        await upload(w, "a")
    assert not isinstance(lost.value, PreconditionFailedError)  # the upload's error, not the KV's
    w.kv.before.clear()
    assert [r async for r in w.g.list_entries(w.repo, "main")] == []


async def test_consumed_record_is_written_before_the_branch_cas(world: World) -> None:
    w = world
    address = await upload(w, "a")
    repo = await w.g.repository(w.repo)
    token = (await w.g.refs.get_branch(repo, "main"))[0].staging_token
    at_cas: list[list[str]] = []

    async def record(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and partition == repo.partition and key == kvkeys.branch_key("main"):
            consumed = (await w.g.journal(w.repo)).consumed_since("main", 0.0)
            at_cas.append([c.token async for c in consumed])

    w.kv.before.append(record)
    commit_id = await commit(w)
    w.kv.before.clear()
    assert at_cas[0] == []  # the rotation CAS
    assert at_cas[1] == [token]  # the publishing CAS: the record is already there
    [consumed] = [c async for c in (await w.g.journal(w.repo)).consumed_since("main", 0.0)]
    assert (consumed.token, consumed.commit_id) == (token, commit_id)
    w.advance(GRACE)
    assert await fate(w, address) == "committed"


async def test_journal_off_or_turned_on_later_hands_over(world: World) -> None:
    w = world
    address = await upload(w, "a")
    await w.g.set_hard_delete_journal(w.repo, False)
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    assert await fate(w, address) == "committed"  # off: nothing is provable
    await w.g.set_hard_delete_journal(w.repo, True)
    assert await fate(w, address) == "committed"  # older than the switch: not provable either
    w.advance(DEFAULT_CLOCK_SKEW_SECONDS)
    fresh = await upload(w, "b")
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    assert await fate(w, fresh) == "delete"


async def test_journal_off_writes_nothing(world: World) -> None:
    w = world
    await w.g.set_hard_delete_journal(w.repo, False)
    w.advance(10)  # past the flag cache
    await upload(w, "a")
    await commit(w)
    journal = await w.g.journal(w.repo)
    assert [i async for i in journal.intents()] == []
    assert [c async for c in journal.consumed_since("main", 0.0)] == []


async def test_reconciler_moves_and_due_batches(world: World) -> None:
    w = world
    journal = await w.g.journal(w.repo)
    staged = await upload(w, "a")
    gone = await upload(w, "b")
    await w.objects.delete(w.repo, "main", "b")
    assert await journal.due_intents(w.clock()) == []
    w.advance(GRACE)
    due = {i.address: i for i in await journal.due_intents(w.clock())}
    assert set(due) == {staged, gone}
    assert len(await journal.due_intents(w.clock(), limit=1)) == 1
    # Still staged: postponed (backoff), not due until then.
    later = await journal.postpone(due[staged], w.clock() + timedelta(minutes=10))
    assert later.checks == 1
    assert [i.address for i in await journal.due_intents(w.clock())] == [gone]
    # Garbage: claimed, then settled after the deleter removed the object.
    claimed = await journal.claim(due[gone])
    assert claimed.state == "deleting"
    with pytest.raises(PreconditionFailedError):
        await journal.claim(due[staged])  # stale predicate: it was postponed meanwhile
    assert await decide(journal, claimed, now=w.clock()) == "delete"  # a resumed claim re-decides
    await journal.settle(claimed)
    assert await journal.intent(gone) is None
    await journal.drop(later)
    assert [i async for i in journal.intents()] == []


async def test_prune_consumed_keeps_recent_records(world: World) -> None:
    w = world
    await upload(w, "a")
    await commit(w)
    w.advance(100)
    await upload(w, "b")
    await commit(w)
    journal = await w.g.journal(w.repo)
    assert await journal.prune_consumed("main", w.clock().timestamp() - 50) == 1
    assert len([c async for c in journal.consumed_since("main", 0.0)]) == 1


async def test_consumed_record_naming_a_missing_commit_is_corrupt(world: World) -> None:
    w = world
    address = await upload(w, "a")
    await w.g.reset_branch(w.repo, "main")
    journal = await w.g.journal(w.repo)
    await journal.record_consumed("main", ("tok",), "f" * 64, w.clock())
    w.advance(GRACE)
    with pytest.raises(CorruptDataError, match="missing commit") as err:
        await fate(w, address)
    assert "gc-consumed/main/tok/" in str(err.value)

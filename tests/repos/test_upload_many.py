"""Batch uploads (``Objects.upload_many``) and batched staging (``Graveler.set_entries``).

Real components: memory and SQLite KV, local namespaces. The KV is wrapped in ``HookedKV`` to count
the batches and to run a commit in the middle of a batch write (a token rotation).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.block.base import ObjectInfo, PutItem
from lakefs_core.block.local import LocalBlockStore
from lakefs_core.committed.model import DiffType
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    NotFoundError,
    ReadOnlyError,
    TransientError,
)
from lakefs_core.format.records import ValueRecord
from lakefs_core.kv import KVStore, open_kv
from lakefs_core.refs import kvkeys
from lakefs_core.repos import staging_writes
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.journal import (
    Intent,
    IntentState,
    Journal,
    batch_bytes,
    new_batch_id,
)
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import Clock, HookedKV, fast_settings, record, unique
from tests.support.profiles import examples
from tests.support.timing import scaled


@pytest.fixture(params=["memory", "sqlite"])
async def kv(request: pytest.FixtureRequest, sqlite_url: str) -> AsyncIterator[KVStore]:
    store = await open_kv("memory://" if request.param == "memory" else sqlite_url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def hooked(kv: KVStore) -> HookedKV:
    return HookedKV(kv)


@pytest.fixture
async def g(hooked: HookedKV) -> AsyncIterator[Graveler]:
    stores = StoreRegistry()
    try:
        yield Graveler(hooked, stores, fast_settings(), clock=Clock())
    finally:
        await stores.close()


async def new_repo(g: Graveler, root: Path, *, journal: bool) -> str:
    repo = unique()
    await g.create_repository(repo, f"local://{root / repo}", hard_delete_journal=journal)
    return repo


def set_many_batches(kv: HookedKV, partition_prefix: bytes) -> int:
    """How many ``set_many`` items went to partitions starting with ``partition_prefix``."""
    return sum(1 for op, p, _ in kv.ops if op == "set_many" and p.startswith(partition_prefix))


@pytest.mark.parametrize("journal", [False, True])
async def test_upload_many_stages_every_object_in_one_batch(
    g: Graveler, hooked: HookedKV, local_root: Path, journal: bool
) -> None:
    repo = await new_repo(g, local_root, journal=journal)
    objects = Objects(g)
    progress: list[tuple[str, int]] = []

    async def lazy() -> bytes:
        return b"opened late"

    items = [UploadItem(f"dir/f{i:03d}", b"x" * i, content_type="text/plain") for i in range(50)]
    items.append(UploadItem("lazy", lazy, metadata={"owner": "me"}))

    def on_stored(item: UploadItem, info: ObjectInfo) -> None:
        progress.append((item.path, info.size))

    hooked.ops.clear()
    stats = await objects.upload_many(repo, "main", items, concurrency=4, on_stored=on_stored)
    assert [s.path for s in stats] == [i.path for i in items]
    sizes = [len(i.body) if isinstance(i.body, bytes) else 11 for i in items]
    assert sorted(progress) == sorted(zip([i.path for i in items], sizes, strict=True))
    assert await objects.read_all(repo, "main", "dir/f007") == b"x" * 7
    assert await objects.read_all(repo, "main", "lazy") == b"opened late"
    assert (await objects.stat(repo, "main", "lazy")).metadata == {"owner": "me"}
    assert (await objects.stat(repo, "main", "dir/f001")).content_type == "text/plain"
    # One staging write per object, in one batch (conditional with the journal); no per-object set.
    partition = (await g.repository(repo)).partition
    staged = [op for op in hooked.ops if op[1] != partition and op[0] != "get"]
    assert len(staged) == len(items)
    assert {op[0] for op in staged} == {"set_many_if" if journal else "set_many"}
    assert not [op for op in hooked.ops if op[0] == "set" and op[1].startswith(b"staging")]
    intents_written = [op for op in hooked.ops if op[2].startswith(kvkeys.GC_INTENTS_PREFIX)]
    settles = [op for op in hooked.ops if op[2].startswith(kvkeys.GC_SETTLED_PREFIX)]
    if journal:
        # Each intent once (pending) through set_many, never one by one; ONE record for the batch,
        # written open with the intents and settled with the staged entries (in the same
        # conditional batch): no per-intent update.
        assert len(intents_written) == len(items)
        assert {op[0] for op in intents_written} == {"set_many"}
        assert [op[0] for op in settles] == ["set_many", "set_many_if"]
        first_settle = hooked.ops.index(settles[1])
        assert hooked.ops[first_settle : first_settle + len(items) + 1] == [settles[1], *staged]
        j = await g.journal(repo)
        intents = [i async for i in j.intents()]
        assert len(intents) == len(items) and {i.state for i in intents} == {"pending"}
        assert len({i.batch for i in intents}) == 1
        effective = [await j.effective(i) for i in intents]
        assert {i.state for i in effective} == {"stored"}
        assert {i.raw for i in effective} == {i.raw for i in intents}  # a CAS compares the stored bytes
    else:
        assert intents_written == [] and settles == []
    commit = await g.commit(repo, "main", committer="t", message="batch")
    added = [d.key async for d in g.diff(repo, commit.parents[0], commit.id)]
    assert len(added) == len(items)


async def test_journal_decides_batch_uploads_like_single_ones(g: Graveler, local_root: Path) -> None:
    repo = await new_repo(g, local_root, journal=True)
    objects = Objects(g)
    await objects.upload_many(repo, "main", [UploadItem(f"kept/{i}", b"k") for i in range(5)])
    await g.commit(repo, "main", committer="t", message="kept")
    await objects.upload_many(repo, "main", [UploadItem(f"staged/{i}", b"s") for i in range(5)])
    journal = await g.journal(repo)
    assert isinstance(g.clock, Clock)
    # Due one grace period (1 h) after their batch was settled, as stored single uploads are; read
    # as recorded (pending), they would wait for the pending timeout (24 h).
    assert await journal.due_intents(g.clock() + timedelta(minutes=50)) == []
    now = g.clock() + timedelta(hours=2)
    assert {await journal.decide(i, now=now) async for i in journal.intents()} == {"wait"}
    due = await journal.due_intents(now)
    assert len(due) == 10 and {i.state for i in due} == {"stored"}
    decisions = {i.key: await journal.decide(i, now=now) for i in due}
    assert {d for k, d in decisions.items() if k.startswith(b"kept/")} == {"committed"}
    assert {d for k, d in decisions.items() if k.startswith(b"staged/")} == {"staged"}
    await g.reset_branch(repo, "main")
    decisions = {i.key: await journal.decide(i, now=now) for i in await journal.due_intents(now)}
    assert {d for k, d in decisions.items() if k.startswith(b"staged/")} == {"delete"}


async def test_batch_settle_is_a_cas_of_its_open_record_and_a_claimed_batch_stages_nothing(
    g: Graveler, local_root: Path
) -> None:
    """The batch's record is written open with its intents; the staging write settles it by CAS of
    those bytes. A claim deletes it: the staging write then stores nothing (ConflictError), on
    every attempt, however late."""
    repo = await new_repo(g, local_root, journal=True)
    journal = Journal(g, await g.repository(repo))
    batch = new_batch_id()
    intents = await journal.record_intents(
        [Intent(f"data/x/{n}", "main", b"k%d" % n, g.clock().timestamp(), batch=batch) for n in range(3)]
    )
    assert await journal.settled_at(batch) is None  # open
    settle = journal.settle_batch(intents, g.clock(), "the test's batch")
    assert settle.key == kvkeys.gc_settled_key(batch)
    assert await g.kv.get(journal.partition, settle.key) == settle.expected
    assert {i.state async for i in journal.intents()} == {"pending"}
    await journal.claim(intents[1])  # pending, of a batch: its record goes first
    records = [record(f"k{n}") for n in range(3)]
    with pytest.raises(ConflictError, match="the test's batch lost to the hard-delete reconciler"):
        await g.set_entries(repo, "main", records, settle=settle)
    assert [r async for r in g.list_entries(repo, "main")] == []
    states = {i.address: i.state async for i in journal.intents()}
    assert states == {"data/x/0": "pending", "data/x/1": "deleting", "data/x/2": "pending"}
    # An unclaimed batch settles with its entries: the record now reads settled.
    other = await journal.record_intents(
        [Intent("data/x/9", "main", b"k9", g.clock().timestamp(), batch=new_batch_id())]
    )
    await g.set_entries(repo, "main", [record("k9")], settle=journal.settle_batch(other, g.clock(), "b"))
    assert await journal.settled_at(other[0].batch or "") == g.clock().timestamp()
    assert [r.key async for r in g.list_entries(repo, "main")] == [b"k9"]
    # A record of any other content (or none) is not the open bytes: never settled over.
    with pytest.raises(ConflictError):
        await g.set_entries(repo, "main", [record("k8")], settle=journal.settle_batch(other, g.clock(), "b"))


async def test_record_intents_refuses_a_mixed_or_unnamed_batch(g: Graveler, local_root: Path) -> None:
    repo = await new_repo(g, local_root, journal=True)
    journal = Journal(g, await g.repository(repo))
    now = g.clock().timestamp()
    for intents in (
        [Intent("data/x/1", "main", b"k", now)],  # no batch
        [Intent("data/x/1", "main", b"k", now, batch=new_batch_id()) for _ in range(2)],  # two
        [Intent("data/x/1", "main", b"k", now, "stored", now, batch="0" * 32)],  # not pending
    ):
        with pytest.raises(BadInputError):
            await journal.record_intents(intents)
    assert [i async for i in journal.intents()] == []


@pytest.mark.parametrize("when", ["before", "after"])
async def test_set_entries_rewrites_the_batch_when_a_commit_rotates_the_token(
    g: Graveler, hooked: HookedKV, local_root: Path, when: str
) -> None:
    """A commit sealing the live token just before the batch lands (the batch would be lost
    without the re-read and rewrite) or just after (it must not be committed twice)."""
    repo = await new_repo(g, local_root, journal=False)
    await g.set_entry(repo, "main", record("first"))
    rotated: list[str] = []

    async def commit_once(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many" and not rotated and key.startswith(b"b/"):
            rotated.append((await g.commit(repo, "main", committer="c", message="race")).id)

    (hooked.before if when == "before" else hooked.after).append(commit_once)
    batch = [record(f"b/{i:02d}") for i in range(30)]
    await g.set_entries(repo, "main", batch)
    hooked.before.clear()
    hooked.after.clear()
    assert rotated
    final = await g.commit(repo, "main", committer="c", message="final", allow_empty=True)
    added: dict[bytes, int] = {}
    for c in [c async for c in g.log(repo, "main")][:-1]:
        async for d in g.diff(repo, c.parents[0], c.id):
            assert d.type is DiffType.ADDED
            added[d.key] = added.get(d.key, 0) + 1
    assert set(added) == {b"first", *(r.key for r in batch)}
    assert set(added.values()) == {1}, "an entry was added by two commits"
    assert final.id == (await g.branch(repo, "main")).commit_id


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_journalled_batch_lands_once_when_a_commit_moves_the_branch(
    g: Graveler, hooked: HookedKV, local_root: Path, when: str
) -> None:
    """The settle-and-stage write expects the branch as read: a commit sealing the token just
    before it makes it fail and go again into the new token (nothing landed the first time); one
    just after it commits the batch as it is (no second write to rewrite it)."""
    repo = await new_repo(g, local_root, journal=True)
    rotated: list[str] = []
    attempts: list[int] = []

    async def commit_once(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and key.startswith(kvkeys.GC_SETTLED_PREFIX):
            attempts.append(1)
            if not rotated:
                await g.set_entry(repo, "main", record("first"))
                rotated.append((await g.commit(repo, "main", committer="c", message="race")).id)

    (hooked.before if when == "before" else hooked.after).append(commit_once)
    items = [UploadItem(f"b/{i:02d}", b"%d" % i) for i in range(30)]
    stats = await Objects(g).upload_many(repo, "main", items)
    hooked.before.clear()
    hooked.after.clear()
    assert rotated and len(attempts) == (2 if when == "before" else 1)
    await g.commit(repo, "main", committer="c", message="final", allow_empty=True)
    added: dict[bytes, int] = {}
    for c in [c async for c in g.log(repo, "main")][:-1]:
        async for d in g.diff(repo, c.parents[0], c.id):
            added[d.key] = added.get(d.key, 0) + 1
    assert set(added) == {b"first", *(i.path.encode() for i in items)}
    assert set(added.values()) == {1}, "an entry was added by two commits"
    journal = await g.journal(repo)
    assert {(await journal.effective(i)).state async for i in journal.intents()} == {"stored"}
    assert [await Objects(g).read_all(repo, "main", s.path) for s in stats[:2]] == [b"0", b"1"]


@pytest.mark.parametrize("landed", [True, False])
async def test_an_unknown_outcome_of_the_settle_and_stage_write_is_read_back(
    g: Graveler, hooked: HookedKV, local_root: Path, landed: bool
) -> None:
    """A lost connection during the settle-and-stage write: the settle key holding the upload's own
    value proves the write landed (the upload succeeds); otherwise the outcome stays unknown and
    the upload says so (TransientError), single and batch alike."""
    repo = await new_repo(g, local_root, journal=True)
    cut: list[bool] = []

    def lose_connection(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and len(cut) < 2:
            cut.append(True)
            raise TransientError("lost connection during a write; outcome unknown")

    (hooked.after if landed else hooked.before).append(lose_connection)
    objects = Objects(g)
    if landed:
        await objects.upload(repo, "main", "one", b"1")
        await objects.upload_many(repo, "main", [UploadItem("b/1", b"2"), UploadItem("b/2", b"3")])
        assert await objects.read_all(repo, "main", "b/2") == b"3"
        assert [r.key async for r in g.list_entries(repo, "main")] == [b"b/1", b"b/2", b"one"]
        return
    with pytest.raises(TransientError, match="outcome unknown"):
        await objects.upload(repo, "main", "one", b"1")
    with pytest.raises(TransientError, match="outcome unknown"):
        await objects.upload_many(repo, "main", [UploadItem("b/1", b"2"), UploadItem("b/2", b"3")])
    assert [r async for r in g.list_entries(repo, "main")] == []
    journal = await g.journal(repo)
    assert {i.state async for i in journal.intents()} == {"pending"}


async def test_set_entries_checks_input_and_permissions(g: Graveler, local_root: Path) -> None:
    repo = await new_repo(g, local_root, journal=False)
    with pytest.raises(BadInputError):
        await g.set_entries(repo, "main", [record("ok"), record(b"")])
    with pytest.raises(BadInputError, match="tombstone"):  # refused as the store takes it: nothing staged
        await g.set_entries(repo, "main", [record("ok"), ValueRecord(b"bad", b"", b"data"), record("z")])
    await g.set_entries(repo, "main", [])  # nothing to do
    with pytest.raises(NotFoundError):
        await g.set_entries(repo, "no-such-branch", [record("x")])
    await g.set_read_only(repo, True)
    with pytest.raises(ReadOnlyError):
        await g.set_entries(repo, "main", [record("x")])
    await g.set_entries(repo, "main", [record("x")], force=True)
    assert [r.key async for r in g.list_entries(repo, "main")] == [b"x"]


async def test_delete_entries_stages_tombstones_in_one_batch(g: Graveler, local_root: Path) -> None:
    repo = await new_repo(g, local_root, journal=False)
    await g.set_entries(repo, "main", [record("a"), record("b"), record("c")])
    await g.commit(repo, "main", committer="t", message="abc")
    await g.set_entries(repo, "main", [record("d")])
    await g.delete_entries(repo, "main", [b"a", b"d", b"never-there"])
    assert [r.key async for r in g.list_entries(repo, "main")] == [b"b", b"c"]
    await g.set_read_only(repo, True)
    with pytest.raises(ReadOnlyError):
        await g.delete_entries(repo, "main", [b"b"])
    await g.delete_entries(repo, "main", [b"b"], force=True)
    assert [r.key async for r in g.list_entries(repo, "main")] == [b"c"]


async def test_upload_many_failing_put_stages_nothing(g: Graveler, local_root: Path) -> None:
    repo = await new_repo(g, local_root, journal=True)

    async def broken() -> bytes:
        raise BadInputError("cannot read the source", field="--source")

    items = [UploadItem(f"a/{i}", b"v") for i in range(10)] + [UploadItem("bad", broken)]
    with pytest.raises(BadInputError, match="cannot read the source"):
        await Objects(g).upload_many(repo, "main", items, concurrency=2)
    assert [r async for r in g.list_entries(repo, "main")] == []
    # Their intents stay pending: the reconciler deletes what was PUT once they are due.
    journal = await g.journal(repo)
    assert {i.state async for i in journal.intents()} == {"pending"}
    with pytest.raises(BadInputError):
        await Objects(g).upload_many(repo, "main", items, concurrency=0)


class GateTrace:
    """Records, per batch (told apart by its size), when its PUTs start and end and when its
    entries are staged; each PUT call yields to the loop a few times, so that batches not kept
    apart by a gate overlap. A PUT call starts only once all ``batches`` have recorded their
    journal intents, which they do before the gate: so every batch is at the gate (or past it)
    when the first one writes, whatever the order the KV store's thread finished their intents
    in (without this, a batch still recording its intents when the previous one left the gate
    started its PUTs after that one's staging, and the order checked below was a race)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, batches: int) -> None:
        self.events: list[tuple[str, int]] = []
        put_batch, set_entries = LocalBlockStore.put_batch, staging_writes.set_entries
        record_intents = Journal.record_intents
        recorded: list[int] = []
        all_recorded = asyncio.Event()

        async def traced_record(journal: Journal, intents: list[Intent]) -> list[Intent]:
            try:
                return await record_intents(journal, intents)
            finally:
                recorded.append(len(intents))
                if len(recorded) == batches:
                    all_recorded.set()

        async def traced_put(store: LocalBlockStore, items: Sequence[PutItem], **kw: Any) -> list[ObjectInfo]:
            if not all_recorded.is_set():  # (once set, no wait: it would add turns of the loop)
                await asyncio.wait_for(all_recorded.wait(), 30)
            self.events.append(("put", len(items)))
            for _ in range(5):
                await asyncio.sleep(0)
            try:
                return await put_batch(store, items, **kw)
            finally:
                self.events.append(("put-end", len(items)))

        async def traced_stage(ctx: RepoContext, repo: str, branch: str, records: Any, **kw: Any) -> None:
            self.events.append(("stage", len(records)))
            await set_entries(ctx, repo, branch, records, **kw)

        monkeypatch.setattr(LocalBlockStore, "put_batch", traced_put)
        monkeypatch.setattr(staging_writes, "set_entries", traced_stage)  # what Objects stages through
        monkeypatch.setattr(Journal, "record_intents", traced_record)


@pytest.mark.parametrize("gated", [True, False])
async def test_batches_sharing_a_write_gate_write_one_at_a_time(
    g: Graveler, local_root: Path, monkeypatch: pytest.MonkeyPatch, gated: bool
) -> None:
    """With one ``write_gate``, concurrent batches write their objects one batch after the other,
    and the next batch's PUTs start before the previous batch's entries are staged (the overlap
    the gate exists for). Without it, their PUTs overlap: the check below can tell."""
    repo = await new_repo(g, local_root, journal=True)
    sizes = (3, 4, 5)
    trace = GateTrace(monkeypatch, len(sizes))
    gate = asyncio.Lock() if gated else None
    batches = [[UploadItem(f"b{n}/{i}", b"x") for i in range(n)] for n in sizes]
    results = await asyncio.gather(
        *(Objects(g).upload_many(repo, "main", items, write_gate=gate) for items in batches)
    )
    assert [len(r) for r in results] == list(sizes)
    puts = [e for e in trace.events if e[0] != "stage"]
    one_at_a_time = all(
        puts[i][0] == "put" and puts[i + 1] == ("put-end", puts[i][1]) for i in range(0, len(puts), 2)
    )
    assert one_at_a_time is gated
    if gated:
        order = [n for kind, n in puts if kind == "put"]
        for earlier, later in itertools.pairwise(order):
            assert trace.events.index(("put", later)) < trace.events.index(("stage", earlier))
    assert len([r async for r in g.list_entries(repo, "main")]) == sum(sizes)


async def test_a_failing_batch_releases_the_write_gate(g: Graveler, local_root: Path) -> None:
    repo = await new_repo(g, local_root, journal=True)

    async def broken() -> bytes:
        raise BadInputError("cannot read the source", field="--source")

    gate = asyncio.Lock()
    failing = [UploadItem("a/0", b"v"), UploadItem("a/bad", broken)]
    fine = [UploadItem(f"b/{i}", b"v") for i in range(3)]
    async with asyncio.timeout(scaled(30)):
        outcomes = await asyncio.gather(
            Objects(g).upload_many(repo, "main", failing, write_gate=gate),
            Objects(g).upload_many(repo, "main", fine, write_gate=gate),
            return_exceptions=True,
        )
    assert isinstance(outcomes[0], BadInputError) and not gate.locked()
    assert [s.path for s in outcomes[1]] == [i.path for i in fine]  # type: ignore[union-attr]
    assert [r.key async for r in g.list_entries(repo, "main")] == [b"b/0", b"b/1", b"b/2"]


def test_only_batch_upload_stages_values_in_batches() -> None:
    """The journal's invariant (tests/journal: only uploads stage values, each of a fresh address it
    just PUT) covers the batch path too: the only ``set_entries`` call with values is
    ``Objects.upload_many``'s, and ``stage_entry`` is reached only through ``Graveler.set_entry``
    and ``Objects.upload``/``upload_written``/``copy`` (their shared ``_stage_written``)/``delete``
    (tests/journal checks what each of them stages)."""
    import ast

    root = Path(__file__).resolve().parents[2]
    batch_calls: list[tuple[str, str]] = []
    stage_calls: list[tuple[str, str]] = []
    for package in ("lakefs_core", "lakefs_mirror", "lakefs_gc"):
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        where = (str(path.relative_to(root)), func.name)
                        if node.func.attr == "set_entries":
                            batch_calls.append(where)
                        elif node.func.attr == "stage_entry":
                            stage_calls.append(where)
    assert set(batch_calls) == {
        ("lakefs_core/repos/objects.py", "upload_many"),
        ("lakefs_core/repos/graveler.py", "set_entries"),  # the facade's delegation
        ("lakefs_core/repos/graveler.py", "delete_entries"),  # tombstones it builds itself
    }
    assert sorted(stage_calls) == [
        ("lakefs_core/repos/graveler.py", "set_entry"),
        # the value upload (or a multipart completion) just wrote, or copy just copied, to the fresh
        # address _fresh_address journalled
        ("lakefs_core/repos/objects.py", "_stage_written"),
        ("lakefs_core/repos/objects.py", "delete"),  # a tombstone
        ("lakefs_core/repos/objects.py", "link"),  # the address stage_address journalled, settled once
    ]


_TIMES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.5, -1.5]),
    st.integers(-(2**40), 2**40),
)


@settings(max_examples=examples(3), deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["main", "dev", "ünïcode", 'quo"te']),
            st.binary(min_size=1, max_size=12) | st.text(min_size=1, max_size=12).map(str.encode),
            _TIMES,
            st.sampled_from(["pending", "stored", "deleting"]),
            st.none() | _TIMES,
            st.none() | st.floats(allow_nan=False, allow_infinity=False),
            st.integers(0, 3),
            st.none() | st.sampled_from(["0" * 32, "0123456789abcdef" * 2]),
        ),
        max_size=12,
    ),
)
def test_batch_bytes_match_to_bytes(
    rows: list[tuple[str, bytes, float, IntentState, float | None, float | None, int, str | None]],
) -> None:
    """The shared-shell encoder writes exactly what ``Intent.to_bytes`` writes, for any mix of
    batches, branches, keys (undecodable bytes too), times (-0.0 and 0.0, ints, NaN, infinities),
    states, and the fields a batch never has (``next``, ``checks``), which take the generic path."""
    intents = [Intent(f"data/x/{n}", *row) for n, row in enumerate(rows)]
    assert batch_bytes(intents) == [i.to_bytes() for i in intents]

"""The journal's records and the GC seams around it: cleanup marks with a reason, live tokens, the
uncommitted-address stream, deleted-repository records, settings, and hostile values."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.records import ADDRESS_RELATIVE
from lakefs_core.kv.base import KVStore
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch
from lakefs_core.refs.staging import tombstone
from lakefs_core.repos.cleanup import TokenCleaner
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.journal import Intent, new_batch_id
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.journal.conftest import World
from tests.repos.support import HookedKV, fast_settings, unique

ROOT = Path(__file__).resolve().parents[2]


async def test_cleanup_marks_carry_their_reason(world: World) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    await w.objects.upload(w.repo, "main", "a", b"1")
    committed = (await w.g.refs.get_branch(repo, "main"))[0].staging_token
    await w.g.commit(w.repo, "main", committer="t", message="m")
    await w.objects.upload(w.repo, "main", "b", b"1")
    reset = (await w.g.refs.get_branch(repo, "main"))[0].staging_token
    await w.g.reset_branch(w.repo, "main")
    dev = await w.g.create_branch(w.repo, "dev", "main")
    await w.g.delete_branch(w.repo, "dev")
    marks = {m.token: m async for m in w.g.refs.cleanup_marks()}
    assert marks[committed].reason == "committed"
    assert marks[reset].reason == "discarded"
    assert marks[dev.staging_token].reason == "discarded"
    assert marks[committed].marked == int(w.clock().timestamp())
    # The mark's own value is unchanged (Unix seconds as text): older readers keep parsing it.
    raw = await w.kv.get(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(committed))
    assert int(raw) == int(w.clock().timestamp())
    with pytest.raises(BadInputError):
        await w.g.refs.mark_for_cleanup(("t",), w.clock(), "gone")  # type: ignore[arg-type]


async def test_old_marks_read_as_unknown_and_the_cleaner_drops_all(world: World) -> None:
    w = world
    await w.kv.set(kvkeys.CLEANUP_PARTITION, b"old-token", b"12")  # an older version's mark
    await w.kv.set(kvkeys.CLEANUP_PARTITION, b"lakefs-token", b"stub-value")  # lakeFS's
    await w.g.refs.mark_for_cleanup(("new-token",), w.clock(), "discarded")
    await w.kv.set(kvkeys.GC_PARTITION, kvkeys.token_fate_key("old-token"), b"bogus")
    marks = {m.token: m async for m in w.g.refs.cleanup_marks()}
    assert (marks["old-token"].reason, marks["old-token"].marked) == ("unknown", 12)
    assert (marks["lakefs-token"].reason, marks["lakefs-token"].marked) == ("unknown", 0)
    assert marks["new-token"].reason == "discarded"
    w.advance(60)
    cleaner = TokenCleaner(w.g.refs, w.g.staging, grace_seconds=30, clock=w.clock)
    assert await cleaner.step() == 3
    assert [m async for m in w.g.refs.cleanup_marks()] == []
    assert await w.g.refs.cleanup_mark("new-token") is None
    fates = [e async for e in w.kv.scan(kvkeys.GC_PARTITION, kvkeys.TOKEN_FATES_PREFIX)]
    assert fates == []


async def test_live_tokens_cover_every_branch_hidden_too(world: World) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    main = (await w.g.refs.get_branch(repo, "main"))[0]
    hidden = Branch("hid", main.commit_id, "tok-live", ("tok-s1", "tok-s2"), hidden=True)
    await w.g.refs.create_branch(repo, hidden)
    got = [t async for t in w.g.refs.live_tokens(repo)]
    assert got == [("hid", "tok-live"), ("hid", "tok-s1"), ("hid", "tok-s2"), ("main", main.staging_token)]


async def test_staged_addresses_streams_the_newest_value_per_key(world: World) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    a_old = (await w.objects.upload(w.repo, "main", "a", b"1")).physical_address
    # Seal main's token (as a commit in progress does) and overwrite "a" and delete "b" above it.
    b = (await w.objects.upload(w.repo, "main", "b", b"1")).physical_address
    main, raw = await w.g.refs.get_branch(repo, "main")
    sealed = replace(main, staging_token=f"{w.repo}-main:new", sealed_tokens=(main.staging_token,))
    await w.g.refs.cas_branch(repo, sealed, raw)
    await w.g.staging.set(sealed.staging_token, tombstone(b"b"))
    other = Graveler(w.kv, w.g.stores, w.g.settings, clock=w.clock)  # no cached live token
    a_new = (await Objects(other).upload(w.repo, "main", "a", b"2")).physical_address
    await w.g.create_branch(w.repo, "dev", "main")
    c = (await w.objects.upload(w.repo, "dev", "c", b"1")).physical_address
    # A hidden branch whose only token is marked for cleanup contributes nothing.
    await w.g.refs.create_branch(repo, Branch("gone", main.commit_id, "tok-marked", hidden=True))
    await w.g.staging.set("tok-marked", (await w.g.get_entry(w.repo, "main", b"a")))
    await w.g.refs.mark_for_cleanup(("tok-marked",), w.clock(), "discarded")
    rows = [r async for r in w.g.staged_addresses(w.repo)]
    assert sorted(rows) == sorted([("main", a_new, ADDRESS_RELATIVE), ("dev", c, ADDRESS_RELATIVE)])
    assert a_old not in {r[1] for r in rows} and b not in {r[1] for r in rows}


async def test_delete_repository_leaves_its_namespace_record(world: World) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    await w.objects.upload(w.repo, "main", "a", b"1")
    await w.g.delete_repository(w.repo)
    [gone] = [d async for d in w.g.deleted_repositories()]
    assert (gone.repo, gone.instance_uid, gone.namespace) == (
        repo.id,
        repo.instance_uid,
        repo.storage_namespace,
    )
    assert gone.deleted_at == w.clock().timestamp()
    assert [e async for e in w.kv.scan(repo.partition)] == []  # the journal went with the partition
    # A resumed deletion keeps the first record; forgetting it is explicit.
    w.advance(10)
    await w.g.refs.record_deleted_repository(repo, w.clock())
    assert [d.deleted_at async for d in w.g.deleted_repositories()] == [gone.deleted_at]
    journal_view = [d async for d in w.g.refs.deleted_repositories()]
    assert journal_view == [gone]
    await w.g.refs.forget_deleted_repository(repo.id, repo.instance_uid)
    assert [d async for d in w.g.deleted_repositories()] == []


async def test_delete_repository_without_journal_records_too(kv: KVStore) -> None:
    g = Graveler(kv, StoreRegistry(), fast_settings())
    repo = await g.create_repository(unique(), "mem://ns-deleted/repo")
    await g.delete_repository(repo.id)
    assert [d.namespace async for d in g.deleted_repositories()] == ["mem://ns-deleted/repo"]


async def test_journal_setting_per_repository(kv: KVStore) -> None:
    hooked = HookedKV(kv)
    g = Graveler(hooked, StoreRegistry(), fast_settings())  # library default: off
    off = await g.create_repository(unique(), "mem://ns-off/repo")
    assert not await g.journal_enabled(off)
    assert not [op for op in hooked.ops if op[2] == kvkeys.gc_settings_key()]
    on = await g.create_repository(unique(), "mem://ns-on/repo", hard_delete_journal=True)
    assert await g.journal_enabled(on)
    # Written before the repository record, so no upload can run without it.
    writes = [(p, k) for op, p, k in hooked.ops if op in ("set", "set_if")]
    assert writes.index((on.partition, kvkeys.gc_settings_key())) < writes.index(
        (kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(on.id))
    )
    defaulted = Graveler(kv, StoreRegistry(), fast_settings(hard_delete_journal=True))
    assert await defaulted.journal_enabled(await defaulted.create_repository(unique(), "mem://ns-d/repo"))


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"branch": "main", "key": "a", "t": "soon", "state": "stored", "t_stored": 1}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "gone"}',
        b'{"branch": "", "key": "a", "t": 1, "state": "pending"}',
        b'{"branch": "main", "key": 3, "t": 1, "state": "pending"}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "stored"}',
        b'{"branch": "main", "key": "a", "t": true, "state": "pending"}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "pending", "checks": -1}',
        b'{"branch": "main", "key": "a", "t": 1e999, "state": "pending"}',
        b'{"branch": "main", "key": "' + b"k" * 9000 + b'", "t": 1, "state": "pending"}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "pending", "batch": "ABCDEF"}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "pending", "batch": 7}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "pending", "batch": "' + b"0" * 33 + b'"}',
        b'{"branch": "main", "key": "a", "t": 1, "state": "pending", "batch": "' + b"A" * 32 + b'"}',
    ],
)
async def test_hostile_intents_are_corrupt_data_naming_the_record(world: World, raw: bytes) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    await w.kv.set(repo.partition, kvkeys.gc_intent_key("data/x/y"), raw)
    journal = await w.g.journal(w.repo)
    with pytest.raises(CorruptDataError) as err:
        await journal.intent("data/x/y")
    assert "gc-intents/data/x/y" in str(err.value)
    with pytest.raises(CorruptDataError):
        await journal.due_intents(w.clock())


async def test_hostile_settings_consumed_and_deleted_records(world: World) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    await w.kv.set(repo.partition, kvkeys.gc_consumed_key("main", "tok", "c"), b'{"t": "x"}')
    journal = await w.g.journal(w.repo)
    with pytest.raises(CorruptDataError, match="gc-consumed/main/tok/c"):
        [c async for c in journal.consumed_since("main", 0.0)]
    await w.kv.set(repo.partition, kvkeys.gc_settings_key(), b'{"hard_delete_journal": "yes"}')
    with pytest.raises(CorruptDataError, match="gc-settings"):
        await journal.settings()
    await w.kv.set(kvkeys.GC_PARTITION, kvkeys.deleted_repo_key("r", "uid"), json.dumps({"ns": 3}).encode())
    with pytest.raises(CorruptDataError, match="deleted-repos/r-uid"):
        [d async for d in w.g.deleted_repositories()]


@pytest.mark.parametrize(
    "raw",
    [
        b"{}",
        b'{"t_stored": "now"}',
        b'{"t_stored": 1e999}',
        b"[1]",
        b'{"t_stored": 1, "x": "' + b"y" * 300 + b'"}',
        b'{"state": "open"}',
        b'{"state": "open", "t": "then"}',
        b'{"state": "closed", "t": 1}',
    ],
)
async def test_hostile_settle_records_are_corrupt_data_naming_the_record(world: World, raw: bytes) -> None:
    w = world
    repo = await w.g.repository(w.repo)
    batch = new_batch_id()
    await w.kv.set(repo.partition, kvkeys.gc_settled_key(batch), raw)
    journal = await w.g.journal(w.repo)
    with pytest.raises(CorruptDataError, match=f"gc-settled/{batch}"):
        await journal.settled_at(batch)
    with pytest.raises(CorruptDataError, match=f"gc-settled/{batch}"):
        await journal.prune_settled(w.clock().timestamp())
    # An intent of that batch is decided on nothing it says: its due time read raises, not guesses.
    pending = Intent("data/x/y", "main", b"k", w.clock().timestamp() - 7200, batch=batch)
    await w.kv.set(repo.partition, kvkeys.gc_intent_key("data/x/y"), pending.to_bytes())
    with pytest.raises(CorruptDataError):
        await journal.due_intents(w.clock())


def test_key_formats_refuse_separators() -> None:
    with pytest.raises(BadInputError):
        kvkeys.gc_consumed_key("a/b", "t", "c")
    with pytest.raises(BadInputError):
        kvkeys.gc_intent_key("")
    with pytest.raises(BadInputError):
        kvkeys.gc_intent_key("x" * 2000)
    assert kvkeys.gc_consumed_key("main", "r-main:u", "c1") == b"gc-consumed/main/r-main:u/c1"
    assert kvkeys.deleted_repo_key("repo", "abc") == b"deleted-repos/repo-abc"
    with pytest.raises(BadInputError):
        kvkeys.gc_settled_key("a/b")
    assert kvkeys.gc_settled_key("0f" * 16) == b"gc-settled/" + b"0f" * 16


def test_intent_round_trips_non_utf8_keys() -> None:
    intent = Intent("data/s/o", "main", b"\xff\xfe/k", 1.5, "stored", 2.5, None, 2)
    raw = intent.to_bytes()
    assert Intent.parse("data/s/o", raw, "kv:x") == intent


def test_batch_intent_round_trips() -> None:
    intent = Intent("data/s/o", "main", b"k", 1.5, batch=new_batch_id())
    raw = intent.to_bytes()
    assert raw.startswith(b'{"batch": "')  # sorted keys, as batch_bytes writes them
    assert Intent.parse("data/s/o", raw, "kv:x") == intent
    assert len({new_batch_id() for _ in range(100)}) == 100


# -- the invariant the journal rests on (issue 11) ------------------------------------------------------


def _set_entry_calls() -> list[tuple[str, str, str]]:
    """(module, enclosing function, record argument's source) of every call staging one entry."""
    found: list[tuple[str, str, str]] = []
    for package in ("lakefs_core", "lakefs_mirror", "lakefs_gc"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                        continue
                    # the facade's set_entry(repo, branch, record) and the helper it delegates to,
                    # staging_writes.stage_entry(ctx, repo, branch, record): the record's argument
                    at = {"set_entry": 2, "stage_entry": 3}.get(node.func.attr)
                    if at is not None and len(node.args) > at:
                        rel = str(path.relative_to(ROOT))
                        found.append((rel, func.name, ast.unparse(node.args[at])))
    return found


def test_only_upload_stages_an_address_everything_else_stages_tombstones() -> None:
    """No API copies or links an address into a second entry: the only staging of a value is
    ``Objects.upload``'s (also a multipart completion's, through ``upload_written``) and
    ``Objects.copy``'s, of the fresh address they just wrote. Checking every
    set_entry against every entry of the repository would need an address index (a KV read per write and a
    write per entry), so the invariant is kept structurally and this test guards it: a new caller
    must either stage tombstones or journal its address (spec §3c, "invariant for future APIs")."""
    calls = _set_entry_calls()
    values = {(m, f, a) for m, f, a in calls if not a.startswith("tombstone(")}
    assert values == {
        # upload's and copy's shared staging, of the fresh address _fresh_address journalled and the
        # write just filled (a PUT create-only, a multipart
        # completion of the address reserved at its creation, or the block store's copy)
        ("lakefs_core/repos/objects.py", "_stage_written", "record"),
        # presigned staging: the address was journalled (pending) when stage_address issued it, and
        # link settles that intent once, for the branch and path it was issued for
        ("lakefs_core/repos/objects.py", "link", "record"),
        ("lakefs_core/repos/graveler.py", "set_entry", "record"),  # the facade's delegation
    }
    assert ("lakefs_core/repos/graveler.py", "delete_entry", "tombstone(key)") in calls
    assert ("lakefs_core/repos/objects.py", "delete", "tombstone(key)") in calls


async def test_uploads_use_fresh_create_only_addresses(world: World) -> None:
    w = world
    first = await w.objects.upload(w.repo, "main", "a", b"same")
    second = await w.objects.upload(w.repo, "main", "a", b"same")
    third = await w.objects.upload(w.repo, "main", "b", b"same")
    assert len({first.physical_address, second.physical_address, third.physical_address}) == 3
    # Every upload journalled its own address exactly once.
    journal = await w.g.journal(w.repo)
    assert {i.address async for i in journal.intents()} == {
        first.physical_address,
        second.physical_address,
        third.physical_address,
    }
    with pytest.raises(CorruptDataError, match="already journalled"):
        await journal.record_intent(first.physical_address, "main", b"c", w.clock())

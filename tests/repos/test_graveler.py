"""Graveler service: repositories, read-only flag, branches, refs, tags, staging reads, log.

Memory KV + memory block stores, a unique repository (and namespace) per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import pytest

from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.committed.model import MergeStrategy
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    NoChangesError,
    NotFoundError,
    ReadOnlyError,
)
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch
from lakefs_core.repos.graveler import INITIAL_COMMIT_MESSAGE, Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import HookedKV, collect, mem_namespace, new_graveler, record, unique


async def commit(g: Graveler, repo: str, branch: str = "main", message: str = "c") -> str:
    return (await g.commit(repo, branch, committer="tester", message=message)).id


async def keys(g: Graveler, repo: str, ref: str, **kw: bytes) -> list[bytes]:
    return [r.key async for r in g.list_entries(repo, ref, **kw)]


# -- repositories -----------------------------------------------------------------------------------


async def test_create_repository_initial_commit_and_default_branch(g: Graveler) -> None:
    repo_id = unique()
    repo = await g.create_repository(repo_id, mem_namespace(), default_branch="trunk")
    assert repo.default_branch == "trunk"
    assert (await g.repository(repo_id)) == repo
    head = await g.get_commit(repo_id, "trunk")
    assert head.message == INITIAL_COMMIT_MESSAGE
    assert head.parents == ()
    assert head.metarange_id == ""
    assert head.generation == 1
    assert head.id == head.computed_id()
    branches = await collect(g.list_branches(repo_id))
    assert [b.id for b in branches] == ["trunk"]
    assert branches[0].commit_id == head.id
    assert branches[0].staging_token.startswith(f"{repo_id}-trunk:")
    assert await keys(g, repo_id, "trunk") == []


async def test_create_repository_writes_commit_then_branch_then_repository_record(
    kv: MemoryKVStore, stores: StoreRegistry
) -> None:
    hooked = HookedKV(kv)
    g = new_graveler(hooked, stores)
    repo_id = unique()
    repo = await g.create_repository(repo_id, mem_namespace())
    # The storage namespace claim (our own partition) is taken before the lakeFS records.
    ours = [op for op in hooked.ops if op[1] == kvkeys.NAMESPACES_PARTITION]
    assert ours[0][0] == "set_if" and hooked.ops.index(ours[0]) < 3
    writes = [
        (p, k) for op, p, k in hooked.ops if op in ("set", "set_if") and p != kvkeys.NAMESPACES_PARTITION
    ]
    assert len(writes) == 3
    (p1, k1), (p2, k2), (p3, k3) = writes
    assert p1 == p2 == repo.partition == f"{repo_id}-{repo.instance_uid}".encode()
    assert k1.startswith(kvkeys.COMMITS_PREFIX)
    assert k2 == b"branches/main"
    assert (p3, k3) == (b"graveler", f"repos/{repo_id}".encode())


async def test_crash_before_repository_record_leaves_no_repository(
    kv: MemoryKVStore, stores: StoreRegistry
) -> None:
    hooked = HookedKV(kv)

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and partition == kvkeys.GRAVELER_PARTITION:
            raise RuntimeError("crash")

    hooked.before.append(crash)
    g = new_graveler(hooked, stores)
    repo_id = unique()
    with pytest.raises(RuntimeError):
        await g.create_repository(repo_id, mem_namespace())
    hooked.before.clear()
    with pytest.raises(NotFoundError):
        await g.repository(repo_id)
    assert repo_id not in [r.id async for r in g.list_repositories()]
    # The id is free: a later creation (on another namespace) succeeds in a fresh partition.
    repo = await g.create_repository(repo_id, mem_namespace())
    assert [b.id async for b in g.list_branches(repo_id)] == ["main"]
    assert len([c async for c in g.refs.list_commits(repo)]) == 1


async def test_namespace_claim_refuses_second_repository(g: Graveler) -> None:
    ns = mem_namespace()
    await g.create_repository(unique(), ns)
    other = unique()
    with pytest.raises(ConflictError, match="already in use"):
        await g.create_repository(other, ns)
    with pytest.raises(NotFoundError):
        await g.repository(other)
    # Mirrors pass claim_namespace=False: their namespace already holds the source's replicated
    # marker. (They still take the KV claim, so they cannot share another repository's namespace.)
    mirror_ns = StorageNamespace.parse(mem_namespace())
    await (await g.stores.namespace_store(mirror_ns)).put(mirror_ns.dummy_key(), b"replicated marker\n")
    await g.create_repository(other, mirror_ns.uri, claim_namespace=False, read_only=True)


async def test_duplicate_repository_id_refused(g: Graveler, repo: str) -> None:
    with pytest.raises(ConflictError, match="already exists"):
        await g.create_repository(repo, mem_namespace())


async def test_invalid_ids_refused(g: Graveler) -> None:
    with pytest.raises(BadInputError):
        await g.create_repository("Bad_Repo", mem_namespace())
    with pytest.raises(BadInputError):
        await g.create_repository(unique(), mem_namespace(), default_branch="a b")
    with pytest.raises(BadInputError):
        await g.create_repository(unique(), "file:///nope")


async def test_list_repositories_in_id_order(g: Graveler) -> None:
    ids = sorted(unique() for _ in range(5))
    for repo_id in reversed(ids):
        await g.create_repository(repo_id, mem_namespace())
    assert [r.id async for r in g.list_repositories()] == ids


async def test_recreated_repository_sees_none_of_the_old_records(g: Graveler) -> None:
    repo_id = unique()
    old = await g.create_repository(repo_id, mem_namespace())
    await g.set_entry(repo_id, "main", record("a"))
    old_commit = await commit(g, repo_id)
    await g.create_branch(repo_id, "dev", "main")
    await g.create_tag(repo_id, "v1", "main")
    await g.set_entry(repo_id, "dev", record("staged"))
    await g.delete_repository(repo_id)

    new = await g.create_repository(repo_id, mem_namespace())
    assert new.instance_uid != old.instance_uid
    assert new.partition != old.partition
    assert [b.id async for b in g.list_branches(repo_id)] == ["main"]
    assert await collect(g.list_tags(repo_id)) == []
    assert [c.message async for c in g.log(repo_id, "main")] == [INITIAL_COMMIT_MESSAGE]
    assert await keys(g, repo_id, "main") == []
    with pytest.raises(NotFoundError):
        await g.get_commit(repo_id, old_commit)
    with pytest.raises(NotFoundError):
        await g.branch(repo_id, "dev")


async def test_delete_repository_removes_everything(g: Graveler, kv: MemoryKVStore) -> None:
    repo_id = unique()
    repo = await g.create_repository(repo_id, mem_namespace())
    await g.set_entry(repo_id, "main", record("a"))
    await commit(g, repo_id)
    dev = await g.create_branch(repo_id, "dev", "main")
    await g.create_tag(repo_id, "v1", "main")
    await g.set_entry(repo_id, "dev", record("b"))
    main = await g.branch(repo_id, "main")
    await g.set_entry(repo_id, "main", record("c"))

    await g.delete_repository(repo_id)
    with pytest.raises(NotFoundError):
        await g.repository(repo_id)
    assert repo_id not in [r.id async for r in g.list_repositories()]
    assert [e async for e in kv.scan(repo.partition)] == []
    for token in (dev.staging_token, main.staging_token):
        assert await g.staging.is_empty(token)
    with pytest.raises(NotFoundError):
        await kv.get(kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(repo_id))
    with pytest.raises(NotFoundError):
        await g.delete_repository(repo_id)


async def test_interrupted_delete_hides_repository_and_can_be_finished(
    kv: MemoryKVStore, stores: StoreRegistry
) -> None:
    hooked = HookedKV(kv)
    g = new_graveler(hooked, stores)
    repo_id = unique()
    repo = await g.create_repository(repo_id, mem_namespace())
    await g.set_entry(repo_id, "main", record("a"))
    await commit(g, repo_id)

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "delete" and partition == repo.partition:
            raise RuntimeError("crash during delete")

    hooked.before.append(crash)
    with pytest.raises(RuntimeError):
        await g.delete_repository(repo_id)
    hooked.before.clear()
    with pytest.raises(NotFoundError, match="being deleted"):
        await g.repository(repo_id)
    assert repo_id not in [r.id async for r in g.list_repositories()]
    with pytest.raises(ConflictError, match="being deleted"):
        await g.create_repository(repo_id, mem_namespace())
    await g.delete_repository(repo_id)  # finishes the job
    assert [e async for e in kv.scan(repo.partition)] == []
    await g.create_repository(repo_id, mem_namespace())


# -- read-only repositories ---------------------------------------------------------------------------


async def test_read_only_repository_refuses_writes_unless_forced(g: Graveler) -> None:
    repo_id = unique()
    await g.create_repository(repo_id, mem_namespace(), read_only=True)
    objects = Objects(g)
    Op = Callable[[bool], Awaitable[object]]
    creating: list[Op] = [
        lambda f: g.set_entry(repo_id, "main", record("k"), force=f),
        lambda f: g.commit(repo_id, "main", committer="t", message="m", force=f),
        lambda f: g.create_branch(repo_id, "dev", "main", force=f),
        lambda f: g.create_tag(repo_id, "v1", "main", force=f),
        lambda f: g.reset_branch(repo_id, "main", force=f),
        lambda f: objects.upload(repo_id, "main", "obj", b"x", force=f),
    ]
    removing: list[Op] = [
        lambda f: g.delete_branch(repo_id, "dev", force=f),
        lambda f: g.delete_tag(repo_id, "v1", force=f),
        lambda f: g.delete_entry(repo_id, "main", b"obj", force=f),
        lambda f: objects.delete(repo_id, "main", "k", force=f),
        lambda f: g.commit(repo_id, "main", committer="t", message="deletions", force=f),
        lambda f: g.revert(repo_id, "main", "main", committer="t", force=f),
    ]
    for ops in (creating, removing):
        for op in ops:
            with pytest.raises(ReadOnlyError):
                await op(False)
        for op in ops:
            await op(True)
    with pytest.raises(ReadOnlyError):
        await g.merge(repo_id, "main~1", "main", committer="t")
    with pytest.raises(NoChangesError):  # past the read-only check
        await g.merge(repo_id, "main~1", "main", committer="t", force=True)
    # Reads are fine; the forced writes took effect.
    assert (await g.get_entry(repo_id, "main", b"k")).key == b"k"  # restored by the revert
    assert [b.id async for b in g.list_branches(repo_id)] == ["main"]
    assert (await g.repository(repo_id)).read_only


async def test_set_read_only_toggles(g: Graveler, repo: str) -> None:
    assert (await g.set_read_only(repo, True)).read_only
    assert (await g.repository(repo)).read_only
    with pytest.raises(ReadOnlyError):
        await g.set_entry(repo, "main", record("k"))
    assert not (await g.set_read_only(repo, False)).read_only
    await g.set_entry(repo, "main", record("k"))
    with pytest.raises(NotFoundError):
        await g.set_read_only(unique(), True)


# -- branches -------------------------------------------------------------------------------------------


async def test_create_branch_from_branch_tag_commit_and_ancestor(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo, message="one")
    await g.set_entry(repo, "main", record("b"))
    c2 = await commit(g, repo, message="two")
    await g.create_tag(repo, "v1", c1)

    assert (await g.create_branch(repo, "from-branch", "main")).commit_id == c2
    assert (await g.create_branch(repo, "from-tag", "v1")).commit_id == c1
    assert (await g.create_branch(repo, "from-commit", c1)).commit_id == c1
    assert (await g.create_branch(repo, "from-ancestor", "main~1")).commit_id == c1
    assert (await g.create_branch(repo, "from-branch-2", "from-branch")).commit_id == c2
    # A new branch has its own staging token and starts clean.
    fb = await g.branch(repo, "from-branch")
    main = await g.branch(repo, "main")
    assert fb.staging_token != main.staging_token and fb.sealed_tokens == ()
    assert await keys(g, repo, "from-ancestor") == [b"a"]

    with pytest.raises(ConflictError, match="already exists"):
        await g.create_branch(repo, "from-tag", "main")
    with pytest.raises(NotFoundError):
        await g.create_branch(repo, "x", "nope")
    with pytest.raises(BadInputError):
        await g.create_branch(repo, "bad name", "main")


async def test_branch_does_not_see_staged_changes_of_its_source(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("staged"))
    await g.create_branch(repo, "dev", "main")
    assert await keys(g, repo, "dev") == []
    assert await keys(g, repo, "main") == [b"staged"]


async def test_delete_branch(g: Graveler, repo: str) -> None:
    dev = await g.create_branch(repo, "dev", "main")
    await g.set_entry(repo, "dev", record("x"))
    await g.delete_branch(repo, "dev")
    with pytest.raises(NotFoundError):
        await g.branch(repo, "dev")
    assert dev.staging_token in [t async for t, _ in g.refs.pending_cleanup()]
    with pytest.raises(ConflictError, match="default branch"):
        await g.delete_branch(repo, "main")
    with pytest.raises(NotFoundError):
        await g.delete_branch(repo, "dev")


async def test_list_branches_with_after(g: Graveler, repo: str) -> None:
    for name in ("c", "a", "b-1", "b"):
        await g.create_branch(repo, name, "main")
    assert [b.id async for b in g.list_branches(repo)] == ["a", "b", "b-1", "c", "main"]
    assert [b.id async for b in g.list_branches(repo, after="b")] == ["b-1", "c", "main"]
    assert [b.id async for b in g.list_branches(repo, after="main")] == []


async def test_reset_branch_drops_staging(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await commit(g, repo)
    await g.set_entry(repo, "main", record("b"))
    await g.delete_entry(repo, "main", b"a")
    before = await g.branch(repo, "main")
    assert len(await collect(g.diff_uncommitted(repo, "main"))) == 2

    after = await g.reset_branch(repo, "main")
    assert after.commit_id == before.commit_id
    assert after.staging_token != before.staging_token and after.sealed_tokens == ()
    assert await collect(g.diff_uncommitted(repo, "main")) == []
    assert await keys(g, repo, "main") == [b"a"]
    assert before.staging_token in [t async for t, _ in g.refs.pending_cleanup()]


async def test_reset_branch_to_commit(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo)
    await g.set_entry(repo, "main", record("b"))
    await commit(g, repo)
    await g.set_entry(repo, "main", record("c"))
    reset = await g.reset_branch(repo, "main", "main~1")
    assert reset.commit_id == c1
    assert await keys(g, repo, "main") == [b"a"]
    assert (await g.get_commit(repo, "main")).id == c1


# -- ref expressions ------------------------------------------------------------------------------------


async def test_ref_expressions(g: Graveler, repo: str) -> None:
    initial = (await g.get_commit(repo, "main")).id
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("f"))
    f1 = await commit(g, repo, "feature")
    await g.set_entry(repo, "main", record("m"))
    c2 = await commit(g, repo)
    merge = (await g.merge(repo, "feature", "main", committer="t")).id

    assert (await g.get_commit(repo, "main")).id == merge
    assert (await g.get_commit(repo, "main~")).id == c2
    assert (await g.get_commit(repo, "main~1")).id == c2
    assert (await g.get_commit(repo, "main~2")).id == c1
    assert (await g.get_commit(repo, "main~3")).id == initial
    assert (await g.get_commit(repo, "main^")).id == c2
    assert (await g.get_commit(repo, "main^1")).id == c2
    assert (await g.get_commit(repo, "main^2")).id == f1
    assert (await g.get_commit(repo, "main^2~1")).id == c1
    assert (await g.get_commit(repo, "main^^")).id == c1
    assert (await g.get_commit(repo, "main^0")).id == merge
    assert (await g.get_commit(repo, f"{merge}^2")).id == f1
    assert (await g.get_commit(repo, "main@")).id == merge
    assert (await g.get_commit(repo, "main@~1")).id == c2
    with pytest.raises(NotFoundError):
        await g.get_commit(repo, "main~4")
    with pytest.raises(NotFoundError):
        await g.get_commit(repo, "main^3")
    with pytest.raises(NotFoundError):
        await g.get_commit(repo, "c1^2")  # not a ref at all
    with pytest.raises(NotFoundError):
        await g.get_commit(repo, "nope")
    with pytest.raises(NotFoundError):
        await g.get_commit(repo, "0" * 64)
    with pytest.raises(BadInputError):
        await g.get_commit(repo, "main~x")
    with pytest.raises(BadInputError):
        await g.get_commit(repo, "~1")
    with pytest.raises(BadInputError):
        await g.get_commit(repo, "")


async def test_at_and_ancestors_read_committed_data_only(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a", "one"))
    await commit(g, repo)
    await g.set_entry(repo, "main", record("a", "two"))
    await g.set_entry(repo, "main", record("b"))
    committed = await g.get_entry(repo, "main@", b"a")
    staged = await g.get_entry(repo, "main", b"a")
    assert committed.identity != staged.identity
    assert await keys(g, repo, "main@") == [b"a"]
    assert await keys(g, repo, "main") == [b"a", b"b"]
    with pytest.raises(NotFoundError):
        await g.get_entry(repo, "main@", b"b")
    with pytest.raises(NotFoundError):
        await g.get_entry(repo, "main~1", b"a")


# -- staging reads ---------------------------------------------------------------------------------------


async def _with_sealed_token(g: Graveler, repo: str, branch: str) -> str:
    """Seal the live token of ``branch`` the way a commit's first step does; returns it."""
    r = await g.repository(repo)
    current, raw = await g.refs.get_branch(r, branch)
    sealed = Branch(
        current.id,
        current.commit_id,
        kvkeys.new_staging_token(repo, branch),
        (current.staging_token, *current.sealed_tokens),
    )
    await g.refs.cas_branch(r, sealed, raw)
    return current.staging_token


async def test_reads_live_token_over_sealed_over_committed(g: Graveler, repo: str) -> None:
    committed = {k: record(k, "committed") for k in ("a", "b", "c", "d", "e")}
    for rec in committed.values():
        await g.set_entry(repo, "main", rec)
    await commit(g, repo)
    await g.set_entry(repo, "main", older := record("b", "older-sealed"))
    await g.set_entry(repo, "main", record("d", "older-sealed"))
    await _with_sealed_token(g, repo, "main")
    await g.set_entry(repo, "main", sealed_b := record("b", "sealed"))
    await g.delete_entry(repo, "main", b"c")  # tombstone in the newer sealed token
    await g.set_entry(repo, "main", record("f", "sealed"))
    await _with_sealed_token(g, repo, "main")
    await g.set_entry(repo, "main", live_d := record("d", "live"))
    await g.delete_entry(repo, "main", b"e")  # tombstone in the live token
    await g.set_entry(repo, "main", live_c := record("c", "live"))  # over the sealed tombstone

    branch = await g.branch(repo, "main")
    assert len(branch.sealed_tokens) == 2
    assert older.identity != sealed_b.identity
    assert (await g.get_entry(repo, "main", b"a")).identity == committed["a"].identity
    assert (await g.get_entry(repo, "main", b"b")).identity == sealed_b.identity
    assert (await g.get_entry(repo, "main", b"c")).identity == live_c.identity
    assert (await g.get_entry(repo, "main", b"d")).identity == live_d.identity
    with pytest.raises(NotFoundError):
        await g.get_entry(repo, "main", b"e")
    listed = {r.key: r.identity async for r in g.list_entries(repo, "main")}
    assert listed == {
        b"a": committed["a"].identity,
        b"b": sealed_b.identity,
        b"c": live_c.identity,
        b"d": live_d.identity,
        b"f": listed[b"f"],
    }
    # The committed view is untouched.
    assert {r.key async for r in g.list_entries(repo, "main@")} == {k.encode() for k in committed}
    # Committing everything applies the same precedence.
    await commit(g, repo)
    after = {r.key: r.identity async for r in g.list_entries(repo, "main")}
    assert after == listed
    assert (await g.branch(repo, "main")).sealed_tokens == ()


async def test_tombstones_hide_committed_entries(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await g.set_entry(repo, "main", record("b"))
    await commit(g, repo)
    await g.delete_entry(repo, "main", b"a")
    with pytest.raises(NotFoundError):
        await g.get_entry(repo, "main", b"a")
    assert await keys(g, repo, "main") == [b"b"]
    assert await keys(g, repo, "main@") == [b"a", b"b"]
    with pytest.raises(NotFoundError):
        await g.delete_entry(repo, "main", b"a")  # already deleted
    with pytest.raises(NotFoundError):
        await g.delete_entry(repo, "main", b"never")
    await g.set_entry(repo, "main", record("a", "again"))
    assert await keys(g, repo, "main") == [b"a", b"b"]


async def test_set_entry_validation(g: Graveler, repo: str) -> None:
    with pytest.raises(BadInputError):
        await g.set_entry(repo, "main", record(b""))
    with pytest.raises(NotFoundError):
        await g.set_entry(repo, "nope", record("a"))
    with pytest.raises(NotFoundError):
        await g.set_entry(unique(), "main", record("a"))


async def test_list_entries_prefix_after_start(g: Graveler, repo: str) -> None:
    committed = [b"a/1", b"a/3", b"b/1", b"b/2", b"c"]
    for k in committed:
        await g.set_entry(repo, "main", record(k))
    await commit(g, repo)
    await g.set_entry(repo, "main", record(b"a/2"))
    await g.set_entry(repo, "main", record(b"b/0"))
    await g.delete_entry(repo, "main", b"b/1")

    assert await keys(g, repo, "main") == [b"a/1", b"a/2", b"a/3", b"b/0", b"b/2", b"c"]
    assert await keys(g, repo, "main", prefix=b"a/") == [b"a/1", b"a/2", b"a/3"]
    assert await keys(g, repo, "main", prefix=b"b/") == [b"b/0", b"b/2"]
    assert await keys(g, repo, "main", prefix=b"z") == []
    assert await keys(g, repo, "main", after=b"a/2") == [b"a/3", b"b/0", b"b/2", b"c"]
    assert await keys(g, repo, "main", after=b"a/") == [b"a/1", b"a/2", b"a/3", b"b/0", b"b/2", b"c"]
    assert await keys(g, repo, "main", start=b"b/0") == [b"b/0", b"b/2", b"c"]
    assert await keys(g, repo, "main", prefix=b"a/", after=b"a/1") == [b"a/2", b"a/3"]
    assert await keys(g, repo, "main", prefix=b"b/", start=b"a") == [b"b/0", b"b/2"]
    assert await keys(g, repo, "main", prefix=b"a/", start=b"b") == []
    assert await keys(g, repo, "main", after=b"c") == []


# -- tags -----------------------------------------------------------------------------------------------


async def test_tags(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo)
    await g.set_entry(repo, "main", record("b"))
    c2 = await commit(g, repo)
    t1 = await g.create_tag(repo, "v1.0", "main~1")
    t2 = await g.create_tag(repo, "v2", c2)
    assert (t1.commit_id, t2.commit_id) == (c1, c2)
    assert await collect(g.list_tags(repo)) == [t1, t2]
    assert (await g.get_commit(repo, "v1.0")).id == c1
    assert await keys(g, repo, "v1.0") == [b"a"]
    assert (await g.get_commit(repo, "v2~1")).id == c1
    with pytest.raises(ConflictError):
        await g.create_tag(repo, "v2", "main")
    with pytest.raises(BadInputError):
        await g.create_tag(repo, c1, "main")  # a commit-id-shaped tag is ambiguous
    with pytest.raises(BadInputError):
        await g.create_tag(repo, "bad tag", "main")
    with pytest.raises(NotFoundError):
        await g.create_tag(repo, "v3", "nope")
    await g.delete_tag(repo, "v1.0")
    assert await collect(g.list_tags(repo)) == [t2]
    with pytest.raises(NotFoundError):
        await g.delete_tag(repo, "v1.0")
    with pytest.raises(NotFoundError):
        await g.get_commit(repo, "v1.0")


async def test_branch_name_wins_over_tag(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo)
    await g.create_tag(repo, "same", "main~1")
    await g.create_branch(repo, "same", "main")
    assert (await g.get_commit(repo, "same")).id == c1


# -- commit records cache ----------------------------------------------------------------------------


async def test_cached_commits_stay_in_their_repository_instance(
    g: Graveler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lakefs_core.refs.store.COMMIT_CACHE_SIZE", 2)
    first = unique()
    await g.create_repository(first, mem_namespace())
    ids = [
        (await g.commit(first, "main", committer="t", message=f"c{i}", allow_empty=True)).id for i in range(3)
    ]
    for commit_id in ids:
        assert (await g.get_commit(first, commit_id)).id == commit_id
    assert len(g.refs._commits) == 2  # bounded
    # The same id elsewhere (another repository, or the same one deleted and re-created): not found.
    other = unique()
    await g.create_repository(other, mem_namespace())
    with pytest.raises(NotFoundError):
        await g.get_commit(other, ids[-1])
    await g.delete_repository(first)
    await g.create_repository(first, mem_namespace())
    with pytest.raises(NotFoundError):
        await g.get_commit(first, ids[-1])


# -- log --------------------------------------------------------------------------------------------------


async def test_log_paging(g: Graveler, repo: str) -> None:
    ids = [(await g.get_commit(repo, "main")).id]
    for i in range(6):
        await g.set_entry(repo, "main", record(f"k{i}"))
        ids.append(await commit(g, repo, message=f"c{i}"))
    newest_first = list(reversed(ids))
    assert [c.id async for c in g.log(repo, "main")] == newest_first
    page1 = [c.id async for c in g.log(repo, "main", amount=3)]
    assert page1 == newest_first[:3]
    page2 = [c.id async for c in g.log(repo, "main", amount=3, after=page1[-1])]
    assert page2 == newest_first[3:6]
    page3 = [c.id async for c in g.log(repo, "main", amount=3, after=page2[-1])]
    assert page3 == newest_first[6:]
    assert [c.id async for c in g.log(repo, "main", amount=3, after=page3[-1])] == []
    assert [c.id async for c in g.log(repo, "main~2", amount=2)] == newest_first[2:4]
    assert [c.id async for c in g.log(repo, "main", amount=0)] == []


async def test_log_follows_first_parents_through_merges(g: Graveler, repo: str) -> None:
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("f"))
    f1 = await commit(g, repo, "feature")
    await g.set_entry(repo, "main", record("m"))
    m1 = await commit(g, repo)
    merge = await g.merge(repo, "feature", "main", committer="t", strategy=MergeStrategy.NONE)
    history = [c.id async for c in g.log(repo, "main")]
    assert history[:2] == [merge.id, m1]
    assert f1 not in history


async def test_commit_record_roundtrips_through_lakefs_protobuf(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    made = await g.commit(repo, "main", committer="alice", message="msg", metadata={"k": "v"})
    r = await g.repository(repo)
    raw = await g.kv.get(r.partition, kvkeys.commit_key(made.id))
    data = graveler_pb2.CommitData.FromString(raw)
    assert data.id == made.id
    assert data.committer == "alice"
    assert data.message == "msg"
    assert dict(data.metadata) == {"k": "v"}
    assert data.meta_range_id == made.metarange_id
    assert list(data.parents) == list(made.parents)
    assert data.version == 1
    assert data.generation == 2
    branch_raw = await g.kv.get(r.partition, kvkeys.branch_key("main"))
    branch = graveler_pb2.BranchData.FromString(branch_raw)
    assert branch.commit_id == made.id
    assert list(branch.sealed_tokens) == []
    repo_raw = await g.kv.get(kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(repo))
    repo_data = graveler_pb2.RepositoryData.FromString(repo_raw)
    assert (repo_data.id, repo_data.default_branch_id, repo_data.instance_uid) == (
        repo,
        "main",
        r.instance_uid,
    )


async def test_creation_retry_reclaims_its_own_namespace_only() -> None:
    name = f"n{uuid.uuid4().hex[:10]}"
    store = MemoryBlockStore(name)
    ns = StorageNamespace.parse(f"mem://{name}/repo")
    # A creation that crashed right after claiming the namespace left only the marker behind.
    await store.put(ns.dummy_key(), b"lakefs-open repository crashed-repo\n")
    g = Graveler(MemoryKVStore(), StoreRegistry())
    repo = await g.create_repository("crashed-repo", ns.uri)
    assert repo.id == "crashed-repo"
    with pytest.raises(ConflictError, match="already in use"):
        await g.create_repository("another-repo", ns.uri)

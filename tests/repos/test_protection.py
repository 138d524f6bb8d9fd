"""Branch protection rules in the facade: lakeFS's KV record and checksum, compare-and-swap updates,
glob patterns, and the refusal of every staged write and commit on a protected branch (merges into it
allowed, as lakeFS). Also the bare repository (lakeFS's CreateBareRepository) and its readers."""

from __future__ import annotations

import fnmatch
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    ProtectedBranchError,
)
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs.model import Commit
from lakefs_core.repos.branchglob import compile_glob, glob_matches
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.protection import Action, Rules, matches
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import collect, fast_settings, mem_namespace, record, unique
from tests.support.profiles import examples

WRITE = "cannot write to protected branch"
COMMIT = "cannot commit to protected branch"


async def test_rules_are_stored_as_lakefs_stores_them(g: Graveler, repo: str, kv: MemoryKVStore) -> None:
    assert await g.get_branch_protection(repo) == (Rules({}), "")
    etag = await g.set_branch_protection(repo, Rules.of(["main", "release-*"]), "")
    record_ = await g.repository(repo)
    raw = await kv.get(record_.partition, b"settings/protected_branches")
    assert etag == hashlib.sha256(raw).hexdigest()
    msg = graveler_pb2.BranchProtectionRules.FromString(raw)
    assert {p: list(a.value) for p, a in msg.branch_pattern_to_blocked_actions.items()} == {
        "main": [graveler_pb2.STAGING_WRITE, graveler_pb2.COMMIT],
        "release-*": [graveler_pb2.STAGING_WRITE, graveler_pb2.COMMIT],
    }
    # A record lakeFS wrote (one action only) reads back as it is.
    only_commits = graveler_pb2.BranchProtectionRules()
    only_commits.branch_pattern_to_blocked_actions["prod"].value.append(graveler_pb2.COMMIT)
    await kv.set(record_.partition, b"settings/protected_branches", only_commits.SerializeToString())
    rules, _ = await g.get_branch_protection(repo)
    assert rules.rules == {"prod": frozenset({Action.COMMIT})}


async def test_updates_are_compare_and_swap_on_the_checksum(g: Graveler, repo: str) -> None:
    first = await g.set_branch_protection(repo, Rules.of(["main"]), "")
    with pytest.raises(PreconditionFailedError):  # "": only if none are stored
        await g.set_branch_protection(repo, Rules.of(["other"]), "")
    second = await g.set_branch_protection(repo, Rules.of(["main", "dev"]), first)
    with pytest.raises(PreconditionFailedError, match="changed since they were read"):
        await g.set_branch_protection(repo, Rules.of(["x"]), first)  # a stale checksum
    assert (await g.get_branch_protection(repo))[1] == second
    await g.set_branch_protection(repo, Rules({}), None)  # unconditional
    assert (await g.get_branch_protection(repo))[0].rules == {}
    with pytest.raises(BadInputError):
        await g.set_branch_protection(repo, Rules.of(["a[b"]), None)


@pytest.mark.parametrize(
    ("pattern", "branch", "expected"),
    [
        ("main", "main", True),
        ("main", "main2", False),
        ("release-*", "release-1.2", True),
        ("release-*", "release", False),
        ("*", "anything", True),
        ("rel?", "rel1", True),
        ("rel?", "rel12", False),
        ("v[0-9]", "v7", True),
        ("v[!0-9]", "v7", False),
        ("{main,prod}", "prod", True),
        ("{main,prod}", "dev", False),
        ("a.b", "aXb", False),  # regex metacharacters are literal
        ("a\\*", "a*", True),
        ("a\\*", "ab", False),
        ("{rel,hot}fix-{1,2}*", "hotfix-2a", True),
        ("a{b,{c,d}}e", "ade", True),
        ("[]", "x", False),  # malformed: matches nothing
        ("*a" * 60 + "b", "a" * 200, False),  # a backtracking regex would not return
        ("*?*?*?*?*?*?*?*?*?*?*?*?*?*?x", "y" * 250, False),
    ],
)
def test_patterns_are_lakefs_globs(pattern: str, branch: str, expected: bool) -> None:
    assert matches(pattern, branch) is expected


@pytest.mark.parametrize("pattern", ["", "a[b", "{a,b", "x" * 257, "a\nb", "{a,b}" * 9])
async def test_malformed_patterns_are_refused(g: Graveler, repo: str, pattern: str) -> None:
    with pytest.raises(BadInputError, match="pattern"):
        await g.set_branch_protection(repo, Rules.of([pattern]), None)


async def test_a_corrupt_rules_record_is_named(g: Graveler, repo: str, kv: MemoryKVStore) -> None:
    await kv.set((await g.repository(repo)).partition, b"settings/protected_branches", b"\xff\xff")
    with pytest.raises(CorruptDataError, match="settings/protected_branches"):
        await g.set_entry(repo, "main", record("k"))


async def test_every_write_to_a_protected_branch_is_refused(g: Graveler, repo: str) -> None:
    objects = Objects(g)
    await objects.upload(repo, "main", "a.txt", b"a")
    await g.commit(repo, "main", committer="t", message="seed")
    await g.create_branch(repo, "dev", "main")
    await g.create_branch(repo, "release-1", "main")
    await g.set_branch_protection(repo, Rules.of(["main", "release-*"]), "")
    for branch in ("main", "release-1"):
        with pytest.raises(ProtectedBranchError, match=f"^{WRITE}: branch '{branch}'") as caught:
            await objects.upload(repo, branch, "b.txt", b"b")
        assert caught.value.lakefs_message == WRITE and caught.value.exit_code == 24
        assert caught.value.http_status == 403 and isinstance(caught.value, PermissionDeniedError)
    refused = [
        g.set_entry(repo, "main", record("k")),
        g.delete_entries(repo, "main", [b"a.txt"]),
        g.delete_entry(repo, "main", b"a.txt"),
        objects.update_metadata(repo, "main", "a.txt", {"k": "v"}),
        g.reset_changes(repo, "main", b"a.txt", prefix=False),
        g.reset_branch(repo, "main"),
        objects.stage_address(repo, "main", "c.txt"),  # lakeFS's staging/backing for a client's PUT
    ]
    for attempt in refused:
        with pytest.raises(ProtectedBranchError, match=f"^{WRITE}"):
            await attempt
    for commit in (
        g.commit(repo, "main", committer="t", message="m", allow_empty=True),
        g.commit_entries(repo, "main", [record("s")], committer="t", message="a Spark job's write"),
    ):
        with pytest.raises(ProtectedBranchError, match=f"^{COMMIT}"):
            await commit
    with pytest.raises(ProtectedBranchError, match=r"^protected branch: "):  # lakeFS's ResetHard
        await g.reset_branch(repo, "main", "dev")
    # Other branches are unaffected; merging into a protected branch is how changes reach it (lakeFS).
    await objects.upload(repo, "dev", "b.txt", b"b")
    await g.commit(repo, "dev", committer="t", message="b")
    merged = await g.merge(repo, "dev", "main", committer="t")
    assert (await g.branch(repo, "main")).commit_id == merged.id
    assert await objects.read_all(repo, "main", "b.txt") == b"b"


async def test_rules_set_elsewhere_bind_within_the_cache_time(
    kv: MemoryKVStore, stores: StoreRegistry, repo: str, g: Graveler
) -> None:
    other = Graveler(kv, stores, fast_settings(protection_cache_seconds=0.0))  # another process
    await other.set_entry(repo, "main", record("k"))  # reads "no rules"
    await g.set_entry(repo, "main", record("k"))  # g caches "no rules" for 3 s
    await g.set_branch_protection(repo, Rules.of(["main"]), "")
    with pytest.raises(ProtectedBranchError):
        await g.set_entry(repo, "main", record("k"))  # the setter's own cache is updated at once
    with pytest.raises(ProtectedBranchError):
        await other.set_entry(repo, "main", record("k"))  # no cache: read with the write


async def test_a_bare_repository_has_no_commit_until_refs_are_restored(g: Graveler) -> None:
    repo_id = unique()
    created = await g.create_repository(repo_id, mem_namespace(), "trunk", bare=True)
    assert created.default_branch == "trunk"
    assert await collect(g.list_branches(repo_id)) == []
    for attempt in (
        g.get_commit(repo_id, "trunk"),
        g.set_entry(repo_id, "trunk", record("k")),
        g.commit(repo_id, "trunk", committer="t", message="m"),
        g.create_branch(repo_id, "dev", "trunk"),
    ):
        with pytest.raises(NotFoundError, match="has no commits: its default branch 'trunk' does not exist"):
            await attempt
    with pytest.raises(NotFoundError, match="ref 'nope' not found"):
        await g.get_commit(repo_id, "nope")
    # A restore fills it: a commit record, then the default branch created at it.
    root = Commit.create(
        committer="", message="Repository created", metarange_id="", creation_date=created.creation_date
    )
    await g.put_commit(repo_id, root)
    await g.set_branch_head_if(repo_id, "trunk", None, root.id)
    await g.set_entry(repo_id, "trunk", record("k"))
    assert (await g.commit(repo_id, "trunk", committer="t", message="m")).parents == (root.id,)


@settings(max_examples=examples(3), deadline=None)
@given(
    pattern=st.text(alphabet="ab*?[]!-{},", max_size=12),
    branch=st.text(alphabet="ab-", max_size=12),
)
def test_glob_agrees_with_an_independent_matcher(pattern: str, branch: str) -> None:
    """Against fnmatch (same meaning of ``*``, ``?`` and classes) over every brace expansion; a
    pattern either matcher refuses matches nothing."""
    try:
        compiled = compile_glob(pattern)
    except BadInputError:
        assert not matches(pattern, branch)
        return
    alternatives = _expand(pattern)
    if alternatives is None or any("[]" in a or "[!]" in a for a in alternatives):
        return  # outside what both read the same way
    assert glob_matches(compiled, branch) == any(fnmatch.fnmatchcase(branch, a) for a in alternatives)


def _expand(pattern: str) -> list[str] | None:
    """Brace expansion for patterns without nesting or escapes (None otherwise)."""
    if "\\" in pattern:
        return None
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    end = pattern.find("}", start)
    if end < 0 or "{" in pattern[start + 1 : end]:
        return None
    rest = _expand(pattern[end + 1 :])
    if rest is None:
        return None
    return [pattern[:start] + alt + tail for alt in pattern[start + 1 : end].split(",") for tail in rest]

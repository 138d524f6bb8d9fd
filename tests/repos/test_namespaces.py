"""Storage namespaces are exclusive: no two repositories share, nest in or enclose one another's.

The claim lives in the KV (``lakefs-open-namespaces``), so it sees nesting and holds for mirror
repositories (which skip the ``_lakefs/dummy`` marker) and across processes: the race runs on every
KV driver over several connections, half the creators like mirrors (which write no marker), so
nothing but the KV claim can stop a second creation.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, ConflictError, NamespaceConflictError, NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import Expect
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs.model import Repository
from lakefs_core.refs.store import claim_value
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import WHEN, unique
from tests.support.kv import KV_DRIVERS, kv_url_for

RACERS = 20
CONNECTIONS = 4


@pytest.fixture
async def graveler() -> AsyncIterator[Graveler]:
    g = Graveler(MemoryKVStore(), StoreRegistry())
    try:
        yield g
    finally:
        await g.stores.close()
        await g.kv.close()


def test_distinct_exit_code() -> None:
    assert issubclass(NamespaceConflictError, ConflictError)
    assert NamespaceConflictError.exit_code == 15


def test_canonical_form_and_nesting() -> None:
    a = StorageNamespace("s3://bucket/a")
    assert a.canonical == StorageNamespace("s3://bucket/a/").canonical == "s3://bucket/a/"
    assert not a.overlaps(StorageNamespace("s3://bucket/ab"))
    assert a.overlaps(StorageNamespace("s3://bucket/a/b")) and a.overlaps(StorageNamespace("s3://bucket"))
    assert StorageNamespace("local:///x/y").ancestors() == ["local:///", "local:///x/"]
    assert StorageNamespace("s3://bucket/x/y").ancestors() == ["s3://bucket/", "s3://bucket/x/"]


@pytest.mark.parametrize("uri", ["local:///data/ns\udcff", "s3://bucket/p\udcff/", "mem://m/\ud800"])
def test_a_namespace_that_is_not_utf8_is_refused(uri: str) -> None:
    """Namespaces are stored in KV records and keys: a lone surrogate (a directory name the OS
    could not decode, say) is refused by field, never a UnicodeEncodeError later."""
    with pytest.raises(BadInputError, match=r"^storage_namespace: '.*' is not valid UTF-8"):
        StorageNamespace(uri)


@pytest.mark.parametrize(
    "second",
    [
        "{ns}/repo1",
        "{ns}/repo1/",
        "{ns}/repo1/data",
        "{ns}/repo1/_lakefs",
        "{ns}/repo1/deep/er",
        "{ns}",
        "{parent}",
    ],
)
async def test_same_nested_and_enclosing_namespaces_refused(
    graveler: Graveler, tmp_path: Path, second: str
) -> None:
    ns = f"local://{tmp_path}/ns"
    await graveler.create_repository("repo1", f"{ns}/repo1")
    namespace = second.format(ns=ns, parent=f"local://{tmp_path}")
    with pytest.raises(NamespaceConflictError, match="repo1"):
        await graveler.create_repository("repo2", namespace)
    with pytest.raises(NotFoundError):
        await graveler.repository("repo2")
    # a sibling whose name merely starts the same is not nested
    await graveler.create_repository("repo3", f"{ns}/repo1x")


async def test_s3_style_nesting_refused(graveler: Graveler) -> None:
    store = f"mem://{unique('m')}"
    await graveler.create_repository("middle", f"{store}/a/b")
    for other in (f"{store}/a", store, f"{store}/a/b/c", f"{store}/a/b/"):
        with pytest.raises(NamespaceConflictError):
            await graveler.create_repository(unique(), other)
    await graveler.create_repository(unique(), f"{store}/a/bc")
    await graveler.create_repository(unique(), f"{store}/a/c")


@pytest.mark.parametrize(
    "namespace",
    ["local:///", "local:///etc", "local:///etc/lakefs", "local:///proc/1", "local:///usr/x",
     "local:///tmp", "local:///home", "local:///var", "local:///root", "local:///lib64/x"],
)  # fmt: skip
async def test_root_and_system_directories_refused(graveler: Graveler, namespace: str) -> None:
    with pytest.raises(BadInputError) as info:
        await graveler.create_repository(unique(), namespace)
    assert info.value.field == "storage_namespace"
    assert [r async for r in graveler.list_repositories()] == []


async def test_directories_below_shared_ones_are_fine(graveler: Graveler, tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/")
    await graveler.create_repository(unique(), f"local://{tmp_path}/x")
    StorageNamespace("local:///var/lib/lakefs/repo").check_repository_namespace()
    StorageNamespace("local:///home/me/data").check_repository_namespace()


async def test_repositories_from_before_claims_are_protected(graveler: Graveler) -> None:
    ns = f"mem://{unique('m')}/old"
    # A repository record written without a claim (created before claims existed, or by lakeFS).
    await graveler.refs.create_repository(Repository("old-repo", ns, "main", WHEN, uuid.uuid4().hex))
    for other in (ns, f"{ns}/data", f"{ns}/_lakefs", ns.rsplit("/", 1)[0]):
        with pytest.raises(NamespaceConflictError, match="old-repo"):
            await graveler.create_repository(unique(), other)


async def test_mirror_repositories_take_the_claim_too(graveler: Graveler) -> None:
    store = f"mem://{unique('m')}"
    # A mirror (no _lakefs/dummy marker written) refuses ordinary repositories around it ...
    await graveler.create_repository("the-mirror", f"{store}/mirror", read_only=True, claim_namespace=False)
    with pytest.raises(NamespaceConflictError, match="the-mirror"):
        await graveler.create_repository(unique(), f"{store}/mirror/data")
    # ... and cannot be created in an ordinary repository's namespace.
    await graveler.create_repository("ordinary", f"{store}/plain")
    with pytest.raises(NamespaceConflictError, match="ordinary"):
        await graveler.create_repository(unique(), f"{store}/plain", read_only=True, claim_namespace=False)


async def test_delete_releases_the_namespace(graveler: Graveler) -> None:
    store = f"mem://{unique('m')}"
    await graveler.create_repository("inner", f"{store}/a/inner")
    with pytest.raises(NamespaceConflictError):
        await graveler.create_repository("outer", f"{store}/a")
    await graveler.delete_repository("inner")
    claim = await graveler.refs.get_namespace_claim(f"{store}/a/inner/")
    assert claim is not None and claim.owner is None  # released
    await graveler.create_repository("outer", f"{store}/a")
    await graveler.delete_repository("outer")
    # the same id may come back to its old namespace (its _lakefs/dummy marker names it)
    await graveler.create_repository("outer", f"{store}/a")


async def test_creation_retry_after_a_crash_reuses_its_claim(graveler: Graveler) -> None:
    ns = StorageNamespace(f"mem://{unique('m')}/r")
    # A creation that crashed right after claiming left only the claim behind.
    await graveler.refs.set_namespace_claim(ns.canonical, claim_value("crashed", "0" * 32), Expect.ABSENT)
    with pytest.raises(NamespaceConflictError, match="crashed"):
        await graveler.create_repository("someone-else", ns.uri)
    repo = await graveler.create_repository("crashed", ns.uri)
    claim = await graveler.refs.get_namespace_claim(ns.canonical)
    assert claim is not None and (claim.owner, claim.instance_uid) == ("crashed", repo.instance_uid)


async def test_failed_creation_releases_its_claim(graveler: Graveler) -> None:
    ns = StorageNamespace(f"mem://{unique('m')}/r")
    store = await graveler.stores.namespace_store(ns)
    await store.put(ns.dummy_key(), b"someone else's marker\n")
    with pytest.raises(NamespaceConflictError, match="dummy"):
        await graveler.create_repository("loser", ns.uri)
    claim = await graveler.refs.get_namespace_claim(ns.canonical)
    assert claim is not None and claim.owner is None
    await graveler.create_repository("nested-ok", f"{ns.uri}/sub")


# -- races: creators over several KV connections -----------------------------------------------------------


@pytest.fixture(params=KV_DRIVERS)
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    return kv_url_for(str(request.param), request, sqlite_url)


async def _race(kv_url: str, jobs: list[tuple[str, str]]) -> list[BaseException | Repository]:
    """Create the repositories concurrently; every other one like a mirror (no marker written)."""
    shared = MemoryKVStore() if kv_url.startswith("memory://") else None
    # A few connections, shared round-robin (opening a DynamoDB client per racer costs seconds).
    conns = [shared] if shared is not None else [await open_kv(kv_url) for _ in range(CONNECTIONS)]
    gravelers = [Graveler(conns[i % len(conns)], StoreRegistry()) for i in range(len(jobs))]
    try:
        return await asyncio.gather(
            *(
                g.create_repository(repo_id, ns, read_only=i % 2 == 1, claim_namespace=i % 2 == 0)
                for i, (g, (repo_id, ns)) in enumerate(zip(gravelers, jobs, strict=True))
            ),
            return_exceptions=True,
        )
    finally:
        for g in gravelers:
            await g.stores.close()
        for kv in conns:
            await kv.close()


async def test_concurrent_creates_on_one_namespace_one_wins(kv_url: str) -> None:
    ns = f"mem://{unique('race')}/repo"
    results = await _race(kv_url, [(unique(), ns) for _ in range(RACERS)])
    wins = [r for r in results if isinstance(r, Repository)]
    losses = [r for r in results if isinstance(r, NamespaceConflictError)]
    assert len(wins) == 1 and len(losses) == RACERS - 1, results


async def test_concurrent_nested_creates_never_both_win(kv_url: str) -> None:
    base = f"mem://{unique('race')}"
    chain = [base + "".join(f"/n{j}" for j in range(i)) for i in range(RACERS)]  # pairwise nested
    results = await _race(kv_url, [(unique(), ns) for ns in chain])
    wins = [r for r in results if isinstance(r, Repository)]
    losses = [r for r in results if isinstance(r, NamespaceConflictError)]
    assert len(wins) <= 1 and len(wins) + len(losses) == RACERS, results

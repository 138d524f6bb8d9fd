"""Storage namespaces are exclusive: no two repositories share, nest in or enclose one another's.

The claim lives in the KV (``lakefs-open-namespaces``), so it sees nesting and holds for mirror
repositories (which skip the ``_lakefs/dummy`` marker) and across processes: the race runs on every
KV driver over several connections, half the creators like mirrors (which write no marker), so
nothing but the KV claim can stop a second creation.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

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
from tests.support.profiles import examples
from tests.test_realpaths import NAMES, Node, check_one, made, nodes, paths, realpath_overlap, under

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
    # its _lakefs/dummy names it, but a deleted repository's namespace is not reused silently (issue
    # 38, as lakeFS refuses a namespace holding _lakefs/): only with the explicit choice
    with pytest.raises(NamespaceConflictError, match="deleted repository \\(repository 'outer', deleted "):
        await graveler.create_repository("outer", f"{store}/a")
    await graveler.create_repository("outer", f"{store}/a", reuse_namespace=True)


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


# -- real paths (issue 32, item 4): a namespace is where its path leads -----------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def real_kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    return kv_url_for(str(request.param), request, sqlite_url)


@pytest.fixture
async def gk(real_kv_url: str) -> AsyncIterator[Graveler]:
    """A Graveler over a real KV (SQLite, PostgreSQL)."""
    g = Graveler(await open_kv(real_kv_url), StoreRegistry())
    try:
        yield g
    finally:
        await g.stores.close()
        await g.kv.close()


def links(tmp_path: Path) -> Path:
    """``real/ns`` and ``real/src`` (with a file), and links to them in every shape."""
    real = tmp_path / "real"
    (real / "ns").mkdir(parents=True)
    (real / "src" / "sub").mkdir(parents=True)
    (real / "src" / "sub" / "f.csv").write_bytes(b"f")
    os.symlink(real, tmp_path / "abs")  # absolute, to an ancestor of both
    os.symlink("real/ns", tmp_path / "rel")  # relative
    os.symlink("rel", tmp_path / "chain")  # chained
    os.symlink("real/src", tmp_path / "to-src")
    os.symlink("src/sub", real / "to-sub")
    return real


async def test_a_namespace_through_a_symlink_is_recorded_and_claimed_at_its_real_path(
    gk: Graveler, tmp_path: Path
) -> None:
    real = links(tmp_path)
    repo = await gk.create_repository(unique(), f"local://{tmp_path}/chain/")
    assert repo.storage_namespace == f"local://{real}/ns"
    assert (await gk.repository(repo.id)).storage_namespace == f"local://{real}/ns"
    claim = await gk.refs.get_namespace_claim(f"local://{real}/ns/")
    assert claim is not None and claim.owner == repo.id
    assert (real / "ns" / "_lakefs" / "dummy").exists()
    for other in [
        f"{real}/ns",  # equal, as spelled
        f"{tmp_path}/rel",  # equal, through a relative link
        f"{tmp_path}/abs/ns/data",  # inside, through an absolute link
        f"{tmp_path}/abs",  # enclosing, through a link
        f"{tmp_path}/x/../chain/",  # ".." and a trailing "/"
        f"{tmp_path}//real/./ns",
    ]:
        with pytest.raises(NamespaceConflictError, match=repo.id):
            await gk.create_repository(unique(), f"local://{other}")
    await gk.create_repository(unique(), f"local://{tmp_path}/abs/nsx")  # a sibling is fine


async def test_a_namespace_over_an_import_source_through_a_symlink_is_refused(
    gk: Graveler, tmp_path: Path
) -> None:
    """Item 4: r6 imported from ``src``; r7 on ``src`` is refused, and so is r7 on a link to it, a
    link into it or a link to a directory enclosing it."""
    real = links(tmp_path)
    r6 = await gk.create_repository(unique("r6"), f"local://{tmp_path}/ns6")
    await gk.import_objects(r6.id, "main", "imp/", f"{tmp_path}/to-src", committer="t")
    for other in [f"{real}/src", f"{tmp_path}/to-src", f"{real}/to-sub", f"{tmp_path}/abs"]:
        with pytest.raises(NamespaceConflictError, match=rf"from which repository '{r6.id}' imported"):
            await gk.create_repository(unique("r7"), f"local://{other}")
    assert (real / "src" / "sub" / "f.csv").read_bytes() == b"f"


async def test_records_written_through_a_symlink_are_compared_where_they_lead(
    gk: Graveler, tmp_path: Path
) -> None:
    """Records from before real paths were stored (or lakeFS's) hold paths through links: both
    sides are resolved at check time, so the real path behind them is refused too."""
    real = links(tmp_path)
    old = Repository(unique("old"), f"local://{tmp_path}/rel", "main", WHEN, uuid.uuid4().hex)
    await gk.refs.create_repository(old)  # no claim: written like a record of lakeFS's
    importer = Repository(unique("imp"), f"local://{tmp_path}/ns-imp", "main", WHEN, uuid.uuid4().hex)
    await gk.refs.create_repository(importer)
    await gk.refs.record_import_source(f"local://{tmp_path}/to-src/", importer, 0.0)
    with pytest.raises(NamespaceConflictError, match=rf"which leads to local://{real}/ns\), .*'{old.id}'"):
        await gk.create_repository(unique(), f"local://{real}/ns/inner")
    with pytest.raises(NamespaceConflictError, match=f"'{importer.id}' imported"):
        await gk.create_repository(unique(), f"local://{real}/src/sub")
    with pytest.raises(NamespaceConflictError, match=old.id):
        await gk.check_namespace_available(f"local://{tmp_path}/abs/ns/x", "")


async def test_a_dangling_symlink_in_a_namespace_is_refused(gk: Graveler, tmp_path: Path) -> None:
    """A link to nothing could later be pointed anywhere: refused by field, nothing claimed."""
    os.symlink(tmp_path / "not-yet", tmp_path / "dangling")
    with pytest.raises(BadInputError, match="dangling symbolic link") as info:
        await gk.create_repository(unique(), f"local://{tmp_path}/dangling/ns")
    assert info.value.field == "storage_namespace"
    assert [c async for c in gk.refs.namespace_claims_within(f"local://{tmp_path}/")] == []
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(BadInputError, match="symbolic links"):
        await gk.create_repository(unique(), f"local://{tmp_path}/loop")


async def test_a_namespace_that_does_not_exist_yet_is_compared_by_its_eventual_real_path(
    gk: Graveler, tmp_path: Path
) -> None:
    """A mirror's namespace is not written at creation: recorded at its longest existing ancestor's
    real path plus the rest, it conflicts with what will be there."""
    real = links(tmp_path)
    mirror = await gk.create_repository(
        unique("m"), f"local://{tmp_path}/abs/later/ns", read_only=True, claim_namespace=False
    )
    assert mirror.storage_namespace == f"local://{real}/later/ns" and not (real / "later").exists()
    with pytest.raises(NamespaceConflictError, match=mirror.id):
        await gk.create_repository(unique(), f"local://{real}/later")
    with pytest.raises(NamespaceConflictError, match=mirror.id):
        await gk.create_repository(unique(), f"local://{tmp_path}/abs/later/ns/x/../y")


async def test_a_symlink_to_a_system_directory_is_refused(gk: Graveler, tmp_path: Path) -> None:
    os.symlink("/etc", tmp_path / "etc")
    os.symlink("/", tmp_path / "root")
    for namespace in (
        f"local://{tmp_path}/etc/x",
        f"local://{tmp_path}/root",
        f"local://{tmp_path}/root/tmp",
    ):
        with pytest.raises(BadInputError, match=r"system directory|filesystem root") as info:
            await gk.create_repository(unique(), namespace)
        assert info.value.field == "storage_namespace"


# Paths that start by going down: fewer climb out of the tree, more reach both steps.
inward = st.tuples(st.sampled_from(NAMES), paths).map(lambda t: (t[0], *t[1]))


@pytest.mark.parametrize("mode", ["create, create", "create, import", "import, create"])
@settings(
    max_examples=examples(0.3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=nodes, a=inward, b=inward)
async def test_generated_trees_refuse_as_realpath_overlaps(
    gk: Graveler, spec: list[Node], a: tuple[str, ...], b: tuple[str, ...], mode: str
) -> None:
    """On a generated tree of directories and symlinks: a repository on ``a``, then a second one on
    ``b`` or an import from ``b`` (or that import first, then the repository on ``a``). The second
    step is refused for an overlap exactly when ``os.path.realpath`` of both sides overlaps, and
    anything is refused as bad input only where a link leads nowhere (``check_one``)."""
    with made(spec) as root:
        pa, pb = under(root, a), under(root, b)
        if not within(root, pa, pb):
            return  # climbed out of the tree: other examples' repositories live there
        if mode == "import, create":
            if check_one(pb) is None:
                return
            await imported_from(gk, pb)
            first_ok = True
        else:
            first_ok = await created(gk, pa) is not None
        if not first_ok:
            return
        expect = realpath_overlap(pa, pb)  # now: the first step made directories
        note(f"{mode}: {spec}: {described(pa)}, {described(pb)}: overlap {expect}")
        try:
            if mode == "create, create":
                done = await created(gk, pb) is not None
            elif mode == "create, import":
                done = await imported_from(gk, pb)
            else:
                done = await created(gk, pa) is not None
        except NamespaceConflictError:
            assert expect and mode != "create, import"
        except BadInputError as e:
            if "overlaps" in str(e):
                assert expect and mode == "create, import"
            else:
                raise
        else:
            assert not expect or not done  # not done: refused as bad input, checked by check_one


async def created(g: Graveler, path: str) -> Repository | None:
    """A repository on ``path``; None when the path is refused as bad input (checked by check_one)."""
    try:
        return await g.create_repository(unique(), f"local://{path}")
    except BadInputError as e:
        if "overlaps" in str(e) or check_one(path) is not None:
            raise
        return None


async def imported_from(g: Graveler, path: str) -> bool:
    """An import from ``path`` into a repository of its own outside the tree (a file is put there
    first if the path resolves); False when the path is refused as bad input (checked by check_one)."""
    real = check_one(path)
    repo = await g.create_repository(unique("y"), f"local://{tempfile.mkdtemp(prefix='y-')}")
    try:
        if real is None:
            with pytest.raises(BadInputError, match=r"symbolic link|below a file"):
                await g.import_objects(repo.id, "main", "i/", path, committer="t")
            return False
        put_a_file(real)
        await g.import_objects(repo.id, "main", "i/", path, committer="t")
    except BadInputError as e:
        assert "overlaps" in str(e)
        raise
    return True


def described(path: str) -> str:
    return f"{path} -> {os.path.realpath(path)}"


def within(root: Path, *paths: str) -> bool:
    return all(os.path.realpath(p).startswith(f"{root}/") for p in paths)


def put_a_file(directory: str) -> None:
    Path(directory).mkdir(parents=True, exist_ok=True)
    Path(directory, "zz.bin").write_bytes(b"z")

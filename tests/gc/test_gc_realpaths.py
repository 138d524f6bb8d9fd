"""GC checks where a namespace leads before it deletes anything in it (issue 32, items 3 and 4).

Repository creation and import compare real paths, but the filesystem moves on: a namespace's
directory may be swapped for a symlink after its creation, an import source's directory for a link
into a namespace, and records written before real paths were stored hold paths through links. So the
mark, the sweep, the hard-delete reconciler and the deleted-repository purge first check
(``namespace_claims.check_for_gc`` / ``check_recorded``) that the namespace still resolves to the path
recorded for it and overlaps no other repository's namespace and no live import source, every side
compared where it leads NOW; otherwise they refuse with one line and delete nothing. Each scenario
would delete (or be free to delete) another repository's committed objects without the check. Real
components: SQLite and PostgreSQL KV, local namespaces, the lite executor.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import NamespaceConflictError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.refs.model import Repository
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.namespace_claims import NamespaceIndex, check_for_gc
from lakefs_core.repos.objects import Objects
from lakefs_core.service.deleter import KeyDeleter, store_deleter
from lakefs_gc.mark.mark import MarkOptions, run_mark
from lakefs_gc.reconcile import ReconcileOptions, reconcile_deleted_repositories, reconcile_repository
from lakefs_gc.sweep.sweep import run_sweep
from tests.repos.support import WHEN, Clock, fast_settings, unique
from tests.repos.test_import import write_tree
from tests.support.kv import kv_url_for

LANDING = {"top.csv": b"top", "data/0000000000/obj": b"obj", "sub/x.csv": b"x"}


@pytest.fixture(params=["sqlite", "postgres"])
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    return kv_url_for(str(request.param), request, sqlite_url)


@pytest.fixture
async def kv(kv_url: str) -> AsyncIterator[KVStore]:
    store = await open_kv(kv_url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def g(kv: KVStore) -> AsyncIterator[Graveler]:
    graveler = Graveler(kv, StoreRegistry(), fast_settings(hard_delete_journal=True), clock=Clock(WHEN))
    try:
        yield graveler
    finally:
        await graveler.stores.close()


async def importer(g: Graveler, tmp_path: Path) -> tuple[str, Path]:
    """A repository ``s`` that imported ``landing/`` (files at its root, under ``data/``, deeper)."""
    s = unique("s")
    await g.create_repository(s, f"local://{tmp_path / s}")
    landing = tmp_path / "landing"
    write_tree(landing, LANDING)
    await g.import_objects(s, "main", "imp/", str(landing), committer="t")
    return s, landing


async def assert_imports_readable(g: Graveler, s: str, landing: Path) -> None:
    for rel, body in LANDING.items():
        assert (landing / rel).read_bytes() == body
        assert await Objects(g).read_all(s, "main", f"imp/{rel}") == body


async def deleter(g: Graveler, repo: str) -> KeyDeleter:
    return store_deleter(
        await g.namespace_store(StorageNamespace((await g.repository(repo)).storage_namespace))
    )


def options(mode: str = "full") -> MarkOptions:
    return MarkOptions(now=datetime.now(UTC) + timedelta(days=2), min_age=timedelta(0), mode=mode)  # type: ignore[arg-type]


async def test_a_namespace_swapped_for_a_symlink_to_an_import_source_is_never_swept(
    g: Graveler, tmp_path: Path
) -> None:
    """Item 4's attack after the fact: r7 is created on a directory of its own, then that directory
    is replaced by a symlink to what r6 imported. Its namespace now leads elsewhere than recorded:
    mark, sweep (of a mark made before the swap) and the reconciler refuse, naming both paths."""
    s, landing = await importer(g, tmp_path)
    r = unique("r")
    root = tmp_path / r
    await g.create_repository(r, f"local://{root}")
    o = Objects(g)
    await o.upload(r, "main", "kept", b"kept")
    # garbage a mark of r deletes: a file no entry or journal intent names, in a real slice
    [slice_dir] = (root / "data").iterdir()
    (slice_dir / "garbage").write_bytes(b"junk")
    executor = LiteExecutor()
    try:
        before = await run_mark(g, r, executor, options=options("mark"))
        assert before.summary.num_deleted_objects == 1
        root.rename(tmp_path / "moved-away")
        os.symlink(landing, root)
        leads = rf"storage namespace local://{root} of repository '{r}' now leads to local://{landing}, "
        with pytest.raises(NamespaceConflictError, match=leads):
            await run_mark(g, r, executor, options=options())
        with pytest.raises(NamespaceConflictError, match=leads):
            await run_sweep(g, r, before.run_id, deleter=await deleter(g, r))
        with pytest.raises(NamespaceConflictError, match=leads):
            await reconcile_repository(g, r, deleter=await deleter(g, r))
    finally:
        executor.close()
    await assert_imports_readable(g, s, landing)
    assert not (landing / "_lakefs").exists()  # not even a run's files were written there


async def test_an_import_source_that_now_leads_into_a_namespace_stops_its_gc(
    g: Graveler, tmp_path: Path
) -> None:
    """The other side moved: s imported from ``landing/``, which is then replaced by a symlink into
    r's namespace. s's entries now point at objects r's GC would take for its garbage; every side is
    resolved at check time, so r's GC refuses (and GC of s itself is unaffected)."""
    s, landing = await importer(g, tmp_path)
    r = unique("r")
    root = tmp_path / r
    await g.create_repository(r, f"local://{root}")
    await Objects(g).upload(r, "main", "x", b"x")
    landing.rename(tmp_path / "landing-was")
    (root / "data").mkdir(exist_ok=True)
    os.symlink(root / "data", landing)
    executor = LiteExecutor()
    try:
        leads = rf"encloses local://{landing} \(which leads to local://{root}/data\)"
        imported = rf"{leads}, from which repository '{s}' imported"
        with pytest.raises(NamespaceConflictError, match=imported):
            await run_mark(g, r, executor, options=options())
        await run_mark(g, s, executor, options=options())  # its own namespace is fine
    finally:
        executor.close()
    with pytest.raises(NamespaceConflictError, match=f"'{s}' imported"):
        await reconcile_repository(g, r, deleter=await deleter(g, r))


async def test_a_record_written_through_a_symlink_is_refused_by_gc(g: Graveler, tmp_path: Path) -> None:
    """A repository record from before real paths were stored (or lakeFS's) whose path goes through
    a link: what its path leads to was never checked as its own, so GC refuses it (one line naming
    the real path) until the record holds a real path."""
    real = tmp_path / "real"
    (real / "ns").mkdir(parents=True)
    os.symlink(real, tmp_path / "link")
    repo = Repository(unique("old"), f"local://{tmp_path}/link/ns", "main", WHEN, uuid.uuid4().hex)
    await g.refs.create_repository(repo)
    with pytest.raises(NamespaceConflictError, match=f"now leads to local://{real}/ns, not the real path"):
        await reconcile_repository(g, repo.id, deleter=await deleter(g, repo.id))


async def test_the_deleted_repository_purge_refuses_a_namespace_that_leads_elsewhere_now(
    g: Graveler, tmp_path: Path
) -> None:
    """A deleted repository's namespace swapped for a symlink to an import source before its purge:
    the purge refuses the record (kept for a later pass) and deletes nothing."""
    s, landing = await importer(g, tmp_path)
    d = unique("d")
    root = tmp_path / d
    await g.create_repository(d, f"local://{root}")
    await g.delete_repository(d)
    root.rename(tmp_path / "d-moved")
    os.symlink(landing, root)

    async def deleter_for(ns: StorageNamespace) -> KeyDeleter:
        return store_deleter(await g.namespace_store(ns))

    reports = await reconcile_deleted_repositories(
        g, deleter_for=deleter_for, options=ReconcileOptions(now=datetime.now(UTC) + timedelta(days=30))
    )
    [report] = [r for r in reports if r.repository == d]
    assert (report.refused, report.deleted, report.candidates) == (1, 0, 0)
    assert f"now leads to local://{landing}" in report.errors[0]
    assert d in [r.repo async for r in g.deleted_repositories()]  # kept: decided again later
    await assert_imports_readable(g, s, landing)


async def _verdict(g: Graveler, repo: str, index: NamespaceIndex | None) -> str | None:
    try:
        await check_for_gc(g, repo, index=index)
    except NamespaceConflictError as e:
        return str(e)
    return None


async def test_a_namespace_index_gives_every_repository_the_verdict_of_a_fresh_check(
    g: Graveler, tmp_path: Path
) -> None:
    """The GC daemon's reconciler checks every repository against one NamespaceIndex per minute
    instead of scanning and resolving every record per repository. Its verdicts must be the fresh
    check's: repositories clear of everything, one whose import source now leads into another's
    namespace, one whose record goes through a link, one whose own import source encloses its
    namespace's neighbour, a memory-store namespace beside local ones, and a repository being deleted."""
    s, landing = await importer(g, tmp_path)  # s imported landing/
    clear = [unique("c") for _ in range(3)]
    for c in clear:
        await g.create_repository(c, f"local://{tmp_path / 'clear' / c}")
    await g.create_repository(unique("m"), f"mem://{unique('b')}/ns")
    r = unique("r")
    root = tmp_path / r
    await g.create_repository(r, f"local://{root}")
    (root / "data").mkdir(exist_ok=True)
    landing.rename(tmp_path / "landing-was")
    os.symlink(root / "data", landing)  # s's source now leads into r's namespace
    real = tmp_path / "real"
    (real / "ns").mkdir(parents=True)
    os.symlink(real, tmp_path / "link")
    old = Repository(unique("old"), f"local://{tmp_path}/link/ns", "main", WHEN, uuid.uuid4().hex)
    await g.refs.create_repository(old)  # a record through a link
    gone = unique("gone")
    await g.create_repository(gone, f"local://{tmp_path / 'clear' / 'gone'}")
    await g.delete_repository(gone)
    index = await NamespaceIndex.load(g)
    repos = [x.id async for x in g.refs.list_repositories()]
    verdicts = {x: (await _verdict(g, x, None), await _verdict(g, x, index)) for x in repos}
    for repo, (fresh, indexed) in verdicts.items():
        assert (fresh is None) == (indexed is None), (repo, fresh, indexed)
    assert verdicts[r][1] is not None and f"'{s}' imported" in verdicts[r][1]
    assert verdicts[old.id][1] is not None and "now leads to" in verdicts[old.id][1]
    assert all(verdicts[c] == (None, None) for c in clear)
    # the reconciler takes the index: r is refused through it as without it
    with pytest.raises(NamespaceConflictError, match=f"'{s}' imported"):
        await reconcile_repository(g, r, deleter=await deleter(g, r), namespaces=index)
    await reconcile_repository(g, clear[0], deleter=await deleter(g, clear[0]), namespaces=index)


async def test_a_namespace_index_answers_without_reading_the_kv(g: Graveler, tmp_path: Path) -> None:
    """One index answers any number of checks: its check reads nothing (the KV may even be gone)."""
    repos = [unique("n") for _ in range(20)]
    for repo in repos:
        await g.create_repository(repo, f"local://{tmp_path / repo}")
    index = await NamespaceIndex.load(g)
    await g.kv.close()
    for repo in repos:
        index.check(StorageNamespace.parse(f"local://{tmp_path / repo}"), repo)
    with pytest.raises(NamespaceConflictError, match="is inside"):
        index.check(StorageNamespace.parse(f"local://{tmp_path / repos[0]}/deeper"), "newcomer")
    with pytest.raises(NamespaceConflictError, match="encloses"):
        index.check(StorageNamespace.parse(f"local://{tmp_path}"), "newcomer")

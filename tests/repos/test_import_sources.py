"""No repository is created over objects another repository imported (issue 12's import safety).

An import leaves a record of its source (``lakefs-open-import-sources``): the importing repository's
entries point at the objects there, in place. A repository created over them (same directory,
inside, or enclosing) would treat them as its own: its retention GC, hard delete or purge could
remove them. So creation refuses such a namespace while the importing repository lives, the
read-only availability check (used by the mirror API and the purge of a deleted repository's
namespace) reports it, a refused import leaves no record, and an import racing a creation over the
same objects never lets both succeed, on every KV driver. A local source file whose name is not
UTF-8 is refused by name (a skipped file would be an entry missing without a word).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, NamespaceConflictError, NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import Expect, KVStore
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Repository
from lakefs_core.refs.store import claim_value
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.importing import ImportResult
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.test_import import write_tree
from tests.support.kv import KV_DRIVERS, kv_url_for

PAIRS = 6


@pytest.fixture
async def g(tmp_path: Path) -> Graveler:
    graveler = Graveler(MemoryKVStore(), StoreRegistry())
    await graveler.create_repository("imp1", f"local://{tmp_path / 'ns'}")
    write_tree(tmp_path / "lake" / "src", {"a.csv": b"a", "d/b.csv": b"b"})
    return graveler


async def _records(g: Graveler) -> list[bytes]:
    return [e.key async for e in g.kv.scan(kvkeys.IMPORT_SOURCES_PARTITION, b"")]


@pytest.mark.parametrize("where", ["lake/src", "lake/src/d", "lake/src/d/deeper", "lake"])
async def test_no_repository_over_an_import_source(g: Graveler, tmp_path: Path, where: str) -> None:
    """The source itself, a directory inside it, and any directory enclosing it are refused, by
    creation and by the read-only check, naming the importing repository."""
    await g.import_objects("imp1", "main", "v/", str(tmp_path / "lake" / "src"), committer="t")
    ns = f"local://{tmp_path / where}"
    with pytest.raises(NamespaceConflictError, match=r"repository 'imp1' imported objects"):
        await g.create_repository("over", ns)
    with pytest.raises(NamespaceConflictError, match="'imp1'"):
        await g.check_namespace_available(ns, "")
    with pytest.raises(NotFoundError):
        await g.repository("over")


async def test_a_sibling_of_the_source_is_fine(g: Graveler, tmp_path: Path) -> None:
    """``lake/src2`` is not inside ``lake/src`` (canonical forms end in ``/``)."""
    await g.import_objects("imp1", "main", "v/", str(tmp_path / "lake" / "src"), committer="t")
    await g.create_repository("sibling", f"local://{tmp_path / 'lake' / 'src2'}")
    await g.create_repository("beside", f"local://{tmp_path / 'lake' / 'other'}")


async def test_once_the_importing_repository_is_gone_the_source_is_free(g: Graveler, tmp_path: Path) -> None:
    src = tmp_path / "lake" / "src"
    await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    await g.delete_repository("imp1")
    await g.create_repository("later", f"local://{src}")


async def test_a_recreated_repository_of_the_same_id_that_imported_nothing_blocks_nothing(
    g: Graveler, tmp_path: Path
) -> None:
    """The record names the instance that imported: a new repository under the same id has no
    entries pointing at the source."""
    src = tmp_path / "lake" / "src"
    await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    await g.delete_repository("imp1")
    await g.create_repository("imp1", f"local://{tmp_path / 'ns-again'}")
    await g.create_repository("later", f"local://{src}")


async def test_a_recreated_repository_of_the_same_id_records_its_own_import(
    g: Graveler, tmp_path: Path
) -> None:
    """The first instance's record is stale once it is deleted; importing again under the same id
    replaces it with the new instance's, which protects the source again."""
    src = tmp_path / "lake" / "src"
    await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    await g.delete_repository("imp1")
    await g.create_repository("imp1", f"local://{tmp_path / 'ns-again'}")
    await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    assert len(await _records(g)) == 1
    with pytest.raises(NamespaceConflictError, match="'imp1'"):
        await g.create_repository("over", f"local://{src}")


async def test_a_refused_import_leaves_no_record(g: Graveler, tmp_path: Path) -> None:
    """Neither a source without objects nor one inside a repository's namespace is recorded, so
    they do not block a later creation there."""
    with pytest.raises(NotFoundError):
        await g.import_objects("imp1", "main", "v/", str(tmp_path / "missing"), committer="t")
    await g.create_repository("other", f"local://{tmp_path / 'other-ns'}")
    write_tree(tmp_path / "other-ns" / "in", {"x": b"x"})
    with pytest.raises(BadInputError, match="'other'"):
        await g.import_objects("imp1", "main", "v/", str(tmp_path / "other-ns" / "in"), committer="t")
    assert await _records(g) == []
    await g.create_repository("there", f"local://{tmp_path / 'missing'}")


async def test_a_record_of_an_earlier_import_stays_when_a_later_one_is_refused(
    g: Graveler, tmp_path: Path
) -> None:
    """Re-importing the same source, even when that is refused (no changes), keeps the record the
    first import left: its entries are still committed."""
    src = tmp_path / "lake" / "src"
    await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    (src / "a.csv").unlink()
    (src / "d" / "b.csv").unlink()
    with pytest.raises(NotFoundError):
        await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    assert len(await _records(g)) == 1
    with pytest.raises(NamespaceConflictError):
        await g.create_repository("over", f"local://{src}")


async def test_a_namespace_being_claimed_refuses_the_import(g: Graveler, tmp_path: Path) -> None:
    """A creation claims its namespace before its repository record exists: an import that looks in
    between must see the claim (the records alone would let both succeed)."""
    canonical = f"local://{tmp_path / 'lake'}/"
    await g.refs.set_namespace_claim(canonical, claim_value("coming", "0" * 32), Expect.ABSENT)
    with pytest.raises(BadInputError, match="'coming'"):
        await g.import_objects("imp1", "main", "v/", str(tmp_path / "lake" / "src"), committer="t")
    assert await _records(g) == []


async def test_a_corrupt_record_is_reported_not_ignored(g: Graveler, tmp_path: Path) -> None:
    src = tmp_path / "lake" / "src"
    key = kvkeys.import_source_key(f"local://{src}/", "imp9")
    await g.kv.set(kvkeys.IMPORT_SOURCES_PARTITION, key, b"[1, 2]")
    with pytest.raises(Exception, match="import source record") as info:
        await g.create_repository("over", f"local://{src}")
    assert type(info.value).__name__ == "CorruptDataError"


# -- an import racing a creation over the same objects ---------------------------------------------


@pytest.fixture(params=KV_DRIVERS)
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    return kv_url_for(str(request.param), request, sqlite_url)


async def _pair(importer: Graveler, creator: Graveler, src: Path, ns: str, name: str) -> list[object]:
    results: list[object] = await asyncio.gather(
        importer.import_objects("imp1", "main", f"{name}/", str(src), committer="t"),
        creator.create_repository(name, ns, claim_namespace=False),
        return_exceptions=True,
    )
    return results


async def test_an_import_and_a_creation_over_the_same_objects_never_both_win(
    kv_url: str, tmp_path: Path
) -> None:
    """Pairs race on one KV (two connections where the driver has them): an import of ``src<i>``
    against a creation enclosing it (even pairs) or inside it (odd pairs). At most one of each
    pair succeeds."""
    kvs: list[KVStore]
    if kv_url.startswith("memory://"):
        shared = MemoryKVStore()
        kvs = [shared, shared]
    else:
        kvs = [await open_kv(kv_url), await open_kv(kv_url)]
    importer, creator = Graveler(kvs[0], StoreRegistry()), Graveler(kvs[1], StoreRegistry())
    try:
        await importer.create_repository("imp1", f"local://{tmp_path / 'ns'}")
        jobs = []
        for i in range(PAIRS):
            src = tmp_path / f"lake{i}" / "src"
            write_tree(src, {"in/a.csv": b"a", "b.csv": b"b"})
            ns = f"local://{tmp_path / f'lake{i}'}" if i % 2 == 0 else f"local://{src / 'in'}"
            jobs.append((src, ns, f"over{i}"))
        # One pair at a time: the imports of one repository serialise on its branch anyway.
        outcomes = [await _pair(importer, creator, *job) for job in jobs]
    finally:
        for graveler in (importer, creator):
            await graveler.stores.close()
        for kv in {id(k): k for k in kvs}.values():
            await kv.close()
    for imported, created in outcomes:
        won = [isinstance(imported, ImportResult), isinstance(created, Repository)]
        assert won != [True, True], outcomes
        # A loser fails with the overlap error (both may lose: each saw the other's first write).
        if not won[0]:
            assert isinstance(imported, BadInputError) and "overlaps" in str(imported), outcomes
        if not won[1]:
            assert isinstance(created, NamespaceConflictError), outcomes


# -- a file name that cannot be a key ---------------------------------------------------------------


def _latin1_file(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(os.fsencode(directory), b"caf\xe9.csv"), "wb") as f:
        f.write(b"x")


@pytest.mark.parametrize("where", ["top", "nested"])
async def test_a_source_file_name_that_is_not_utf8_is_refused_not_skipped(
    g: Graveler, tmp_path: Path, where: str
) -> None:
    """Skipped, it would be a missing entry nobody is told about: the import is refused naming it,
    whether it sits at the source's top level (the planner's listing) or below (a chunk's)."""
    src = tmp_path / "lake" / "src"
    _latin1_file(src if where == "top" else src / "d" / "deeper")
    head = (await g.branch("imp1", "main")).commit_id
    with pytest.raises(BadInputError, match=r"caf\\xe9\.csv: the file name is not valid UTF-8"):
        await g.import_objects("imp1", "main", "v/", str(src), committer="t")
    assert (await g.branch("imp1", "main")).commit_id == head


async def test_executors_refuse_a_name_that_is_not_utf8(g: Graveler, tmp_path: Path) -> None:
    """The PySpark job's executors open the source the same way (here on the lite executor)."""
    from lakefs_core.compute.executor import LiteExecutor
    from lakefs_core.compute.import_job import import_with_executor

    src = tmp_path / "lake" / "src"
    _latin1_file(src / "d" / "deeper")
    with LiteExecutor(workers=1) as lite, pytest.raises(BadInputError, match="not valid UTF-8"):
        await import_with_executor(
            g, lite, "imp1", "main", dest_path="v/", source_uri=str(src), committer="t"
        )


async def test_a_namespace_listing_still_skips_such_a_name(g: Graveler, tmp_path: Path) -> None:
    """Only an import's source is strict: a stray file in a namespace must not break its listing
    (retention GC lists the namespace)."""
    repo = await g.repository("imp1")
    ns = StorageNamespace.parse(repo.storage_namespace)
    store = await g.namespace_store(ns)
    await store.put(ns.key("data/a/b"), b"x")
    _latin1_file(tmp_path / "ns" / "data" / "a")
    assert [i.key async for i in store.list(ns.data_prefix())] == [ns.key("data/a/b")]
    assert [i.key async for i in store.list_keys(ns.data_prefix())] == [ns.key("data/a/b")]

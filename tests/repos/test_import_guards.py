"""Import guards (lakefs_core/repos/importing.py) that the broader tests in test_import.py do not pin:
a source inside the namespace of a repository that is being deleted is still refused (its pending
purge would delete what the entries point at); the splice keeps the keys that sort before and after
the imported prefix; a source key is refused when its entry path would be empty (an S3 directory
marker equal to the source prefix), hold a NUL, or exceed 1,024 bytes (exactly 1,024 is allowed)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, NamespaceConflictError
from lakefs_core.kv import open_kv
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs.model import Repository
from lakefs_core.repos import importing
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects
from tests.block.conftest import create_bucket, raw_client, s3_settings
from tests.repos import test_import
from tests.repos.support import WHEN, unique
from tests.repos.test_import import listing, write_tree
from tests.support.kv import kv_url_for
from tests.support.moto import MotoServer

g = test_import.g  # the same fixture: an in-memory Graveler with the repository imp1


async def test_a_source_inside_a_repository_being_deleted_is_refused(g: Graveler, tmp_path: Path) -> None:
    """A repository marked in deletion (the first step of ``delete_repository``) still owns its
    namespace: its objects may be purged any time, so an import from there is refused."""
    await g.create_repository("doomed", f"local://{tmp_path / 'doomed-ns'}")
    write_tree(tmp_path / "doomed-ns" / "data", {"g1/obj": b"doomed data"})
    repo, raw = await g.refs.get_repository_raw("doomed")
    await g.refs.update_repository(replace(repo, in_deletion=True), raw)
    head = (await g.branch("imp1", "main")).commit_id
    with pytest.raises(BadInputError, match=r"overlaps .*'doomed'"):
        await g.import_objects("imp1", "main", "v1/", str(tmp_path / "doomed-ns" / "data"), committer="t")
    assert (await g.branch("imp1", "main")).commit_id == head


async def test_the_splice_keeps_keys_before_and_after_the_prefix(g: Graveler, tmp_path: Path) -> None:
    o = Objects(g)
    await o.upload("imp1", "main", "aaa.csv", b"before")
    await o.upload("imp1", "main", "imported/stale.csv", b"old")
    await o.upload("imp1", "main", "zzz.csv", b"after")
    await g.commit("imp1", "main", committer="t", message="base")
    src = tmp_path / "src"
    write_tree(src, {"x.csv": b"x", "d/y.csv": b"y"})
    result = await g.import_objects("imp1", "main", "imported/", str(src), committer="t")
    assert await listing(o, "imp1", result.commit_id) == {
        "aaa.csv": b"before",
        "imported/d/y.csv": b"y",
        "imported/x.csv": b"x",
        "zzz.csv": b"after",
    }


async def test_a_directory_marker_at_the_source_prefix_is_refused(
    moto: Callable[[str], MotoServer], tmp_path: Path
) -> None:
    """``landing/`` (a console-made "folder") is the source prefix itself: its relative key is empty,
    so it cannot be an entry; the import is refused naming it, nothing is committed."""
    server = moto("us-east-1")
    await create_bucket(server, "markers")
    async with raw_client(server) as s3:
        await s3.put_object(Bucket="markers", Key="landing/", Body=b"")
        await s3.put_object(Bucket="markers", Key="landing/a", Body=b"a")
    g = Graveler(MemoryKVStore(), StoreRegistry(s3=s3_settings(server.endpoint)))
    try:
        await g.create_repository("imp2", f"local://{tmp_path / 'ns2'}")
        head = (await g.branch("imp2", "main")).commit_id
        with pytest.raises(BadInputError, match="'landing/'"):
            await g.import_objects("imp2", "main", "raw/", "s3://markers/landing", committer="t")
        assert (await g.branch("imp2", "main")).commit_id == head
    finally:
        await g.stores.close()


async def test_a_source_key_holding_a_nul_is_refused(g: Graveler, tmp_path: Path) -> None:
    """A chunk comes from a Spark driver as JSON: a key with a NUL in it is refused by the range
    builder itself, whatever the store would list."""
    src = tmp_path / "src"
    src.mkdir()
    source = importing.source_namespace(str(src))
    store = await g.namespace_store(source)
    tables = await g.namespace_tables(StorageNamespace.parse((await g.repository("imp1")).storage_namespace))
    key = (f"{source.prefix}/" if source.prefix else "") + "x\0y"  # store keys are relative to the source
    chunk = importing.Chunk.from_json(
        {"index": 0, "prefixes": [], "objects": [[key, 1, "0" * 32, None]], "order": [f"o:{key}"]}
    )
    with pytest.raises(BadInputError, match="cannot be an entry"):
        await importing.build_chunk_ranges(store, source, tables, chunk, dest_prefix="p/")


@pytest.mark.parametrize(("size", "ok"), [(1024, True), (1025, False)])
async def test_an_entry_path_of_1024_bytes_imports_and_1025_is_refused(
    g: Graveler, tmp_path: Path, size: int, ok: bool
) -> None:
    dest = "p" * 600 + "/"  # a file name stays under the 255 bytes a local filesystem allows
    rel = "d/" + "k" * 250 + "/" + "z" * (size - len(dest) - 2 - 251)
    assert len((dest + rel).encode()) == size
    src = tmp_path / "src"
    write_tree(src, {rel: b"edge"})
    head = (await g.branch("imp1", "main")).commit_id
    if ok:
        await g.import_objects("imp1", "main", dest, str(src), committer="t")
        assert await Objects(g).read_all("imp1", "main", dest + rel) == b"edge"
        return
    with pytest.raises(BadInputError, match="1024 bytes"):
        await g.import_objects("imp1", "main", dest, str(src), committer="t")
    assert (await g.branch("imp1", "main")).commit_id == head


async def test_a_destination_that_is_not_utf8_is_refused(g: Graveler, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src, {"a.csv": b"a"})
    head = (await g.branch("imp1", "main")).commit_id
    with pytest.raises(BadInputError, match="path: must be a UTF-8 path"):
        await g.import_objects("imp1", "main", "in\udcff/", str(src), committer="t")
    assert (await g.branch("imp1", "main")).commit_id == head


# -- real paths (issue 32, item 3): a source is where its path leads ---------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def real_kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    return kv_url_for(str(request.param), request, sqlite_url)


@pytest.fixture
async def gk(real_kv_url: str) -> AsyncIterator[Graveler]:
    """A Graveler over a real KV (SQLite, PostgreSQL)."""
    graveler = Graveler(await open_kv(real_kv_url), StoreRegistry())
    try:
        yield graveler
    finally:
        await graveler.stores.close()
        await graveler.kv.close()


async def two_repositories(g: Graveler, tmp_path: Path) -> tuple[str, str, Path]:
    """repoA with a committed object (its namespace ``nsA``), repoB to import into."""
    a, b = unique("a"), unique("b")
    await g.create_repository(a, f"local://{tmp_path / 'nsA'}")
    await g.create_repository(b, f"local://{tmp_path / 'nsB'}")
    await Objects(g).upload(a, "main", "kept.csv", b"repoA's")
    await g.commit(a, "main", committer="t", message="one")
    return a, b, tmp_path / "nsA"


async def test_an_import_through_a_symlink_into_a_namespace_is_refused(gk: Graveler, tmp_path: Path) -> None:
    """Item 3: ``--from nsA/data`` was refused but ``--from link-to-nsA/data`` accepted, and GC of
    repoA later deleted what repoB had committed. Every spelling of repoA's namespace, of a place
    inside it or enclosing it is refused, naming repoA, and nothing is recorded or committed."""
    a, b, ns_a = await two_repositories(gk, tmp_path)
    os.symlink(ns_a / "data", tmp_path / "to-data")  # absolute, into the namespace
    os.symlink("nsA", tmp_path / "to-ns")  # relative, to the namespace itself
    os.symlink("to-ns", tmp_path / "chain")  # chained
    (tmp_path / "outer").mkdir()
    os.symlink("..", tmp_path / "outer" / "up")  # to an ancestor: encloses nsA
    head = (await gk.branch(b, "main")).commit_id
    for source in [
        str(tmp_path / "to-data"),
        f"local://{tmp_path}/to-data/",
        f"{tmp_path}/chain/data",
        f"{tmp_path}/to-ns",
        f"{tmp_path}/outer/up",
        f"{tmp_path}/outer/../chain//data/.",
    ]:
        with pytest.raises(BadInputError, match=rf"^source: .* overlaps .*repository '{a}'"):
            await gk.import_objects(b, "main", "imp/", source, committer="t")
    assert (await gk.branch(b, "main")).commit_id == head
    assert [s async for s in gk.refs.import_sources("", within=True) if s.repo == b] == []
    # repoA's own namespace through a link: refused as lakeFS refuses it spelled plainly
    with pytest.raises(BadInputError, match=f"repository '{a}'"):
        await gk.import_objects(a, "main", "imp/", f"{tmp_path}/to-data", committer="t")


async def test_a_source_is_recorded_and_addressed_at_its_real_path(gk: Graveler, tmp_path: Path) -> None:
    """An import through a link records, lists and addresses the real directory: the entries keep
    pointing there whatever the link is made to point at later, and a namespace over the real
    directory is refused."""
    b = unique("b")
    await gk.create_repository(b, f"local://{tmp_path / 'nsB'}")
    real = tmp_path / "landing"
    write_tree(real, {"x.csv": b"x", "d/y.csv": b"y"})
    os.symlink("landing", tmp_path / "link")
    result = await gk.import_objects(b, "main", "imp/", f"{tmp_path}/link", committer="t")
    assert result.source == f"local://{real}"
    commit = await gk.get_commit(b, result.commit_id)
    assert commit.metadata["import_source"] == f"local://{real}"
    [record] = [s async for s in gk.refs.import_sources("", within=True) if s.repo == b]
    assert record.source == f"local://{real}/"
    stat = await Objects(gk).stat(b, "main", "imp/d/y.csv")
    assert stat.physical_address == f"local://{real}/d/y.csv"
    os.remove(tmp_path / "link")
    os.symlink(tmp_path / "nsB", tmp_path / "link")  # the link moves; the entries do not
    assert await Objects(gk).read_all(b, "main", "imp/d/y.csv") == b"y"
    with pytest.raises(NamespaceConflictError, match=f"'{b}' imported"):
        await gk.create_repository(unique(), f"local://{real}/d")


async def test_a_source_through_a_dangling_symlink_is_refused(gk: Graveler, tmp_path: Path) -> None:
    b = unique("b")
    await gk.create_repository(b, f"local://{tmp_path / 'nsB'}")
    os.symlink(tmp_path / "later", tmp_path / "dangling")
    with pytest.raises(BadInputError, match=r"^source: .*dangling symbolic link"):
        await gk.import_objects(b, "main", "imp/", f"{tmp_path}/dangling", committer="t")
    assert [s async for s in gk.refs.import_sources("", within=True) if s.repo == b] == []


async def test_a_namespace_recorded_through_a_symlink_still_refuses_its_real_path(
    gk: Graveler, tmp_path: Path
) -> None:
    """A repository record written before real paths were stored holds ``link/ns``: an import from
    the real ``ns`` (or inside it) is refused, compared where the record leads now."""
    (tmp_path / "real" / "ns" / "data").mkdir(parents=True)
    (tmp_path / "real" / "ns" / "data" / "obj").write_bytes(b"o")
    os.symlink("real", tmp_path / "link")
    old = Repository(unique("old"), f"local://{tmp_path}/link/ns", "main", WHEN, uuid.uuid4().hex)
    await gk.refs.create_repository(old)
    b = unique("b")
    await gk.create_repository(b, f"local://{tmp_path / 'nsB'}")
    with pytest.raises(BadInputError, match=rf"which leads to local://{tmp_path}/real/ns\), .*'{old.id}'"):
        await gk.import_objects(b, "main", "imp/", f"{tmp_path}/real/ns/data", committer="t")

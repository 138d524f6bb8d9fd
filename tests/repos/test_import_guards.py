"""Import guards (lakefs_core/repos/importing.py) that the broader tests in test_import.py do not pin:
a source inside the namespace of a repository that is being deleted is still refused (its pending
purge would delete what the entries point at); the splice keeps the keys that sort before and after
the imported prefix; a source key is refused when its entry path would be empty (an S3 directory
marker equal to the source prefix), hold a NUL, or exceed 1,024 bytes (exactly 1,024 is allowed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos import importing
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects
from tests.block.conftest import create_bucket, raw_client, s3_settings
from tests.repos import test_import
from tests.repos.test_import import listing, write_tree
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

"""Object paths of new values are 1-1,024 bytes without NUL on every KV driver, and ``fs upload -r``
says what it skipped.

1,024 bytes is DynamoDB's limit on a sort key: without one limit for all drivers, a path would
stage on SQLite and fail on DynamoDB. The import refused longer paths already; uploads (one object,
a tree, the library's batch) now refuse them too, before any byte is written, and the staging
write refuses them for any caller. Tombstones are exempt, so an existing longer key can still be
deleted. A recursive upload reports how many entries were not regular files (FIFOs, sockets,
symlinked directories) instead of skipping them silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs.staging import tombstone
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.repos.staging_writes import MAX_PATH_BYTES
from lakefs_core.repos.stores import StoreRegistry
from tests.cli.helpers import write_tree
from tests.cli.test_fs_bulk import InProcess, repo, run

__all__ = ["repo", "run"]  # fixtures


@pytest.fixture
async def g(tmp_path: Path) -> Graveler:
    graveler = Graveler(MemoryKVStore(), StoreRegistry())
    await graveler.create_repository("paths", f"local://{tmp_path / 'ns'}")
    return graveler


def _record(key: bytes) -> ValueRecord:
    identity, data = make_entry("data/x/y", 1, "0" * 32)
    return ValueRecord(key, identity, data)


async def _data_files(tmp_path: Path) -> list[str]:
    data = tmp_path / "ns" / "data"
    return [str(p) for p in data.rglob("*") if p.is_file()] if data.exists() else []


async def test_paths_of_exactly_the_limit_stage_and_one_more_byte_is_refused(g: Graveler) -> None:
    fits = b"a/" + b"x" * (MAX_PATH_BYTES - 2)
    await g.set_entries("paths", "main", [_record(fits)])
    await g.set_entry("paths", "main", _record(fits[:-1]))
    for bad in (fits + b"x", b"a\0b"):
        with pytest.raises(BadInputError, match="at most 1024 bytes without NUL"):
            await g.set_entries("paths", "main", [_record(b"ok"), _record(bad)])
        with pytest.raises(BadInputError, match="at most 1024 bytes without NUL"):
            await g.set_entry("paths", "main", _record(bad))
    keys = [r.key async for r in g.list_entries("paths", "main")]
    assert keys == [fits[:-1], fits]  # the refused batch staged nothing


async def test_a_tombstone_of_a_longer_key_is_staged(g: Graveler) -> None:
    """Deleting an existing longer key (written by lakeFS on a SQL KV) must stay possible."""
    long_key = b"x" * (MAX_PATH_BYTES + 100)
    await g.set_entries("paths", "main", [tombstone(long_key)])
    await g.set_entry("paths", "main", tombstone(long_key + b"2"))


async def test_uploads_refuse_a_long_path_before_writing_any_byte(g: Graveler, tmp_path: Path) -> None:
    o = Objects(g)
    long_path = "p/" + "x" * MAX_PATH_BYTES
    with pytest.raises(BadInputError, match=r"'p/x{62}\.\.\.' must be at most 1024 bytes"):
        await o.upload("paths", "main", long_path, b"body")
    with pytest.raises(BadInputError, match="must be at most 1024 bytes"):
        await o.upload_many("paths", "main", [UploadItem("ok", b"1"), UploadItem(long_path, b"2")])
    with pytest.raises(BadInputError, match="NUL"):
        await o.upload("paths", "main", "a\0b", b"body")
    assert await _data_files(tmp_path) == []  # refused before any PUT


def test_upload_tree_refuses_a_long_object_path_by_file_before_uploading(
    run: InProcess, repo: str, tmp_path: Path
) -> None:
    """The tree's names fit the local filesystem (255 bytes per name) but the object path under the
    destination prefix does not fit 1,024 bytes: refused naming the file, nothing staged."""
    deep = "/".join(["d" * 200] * 4)  # 803 bytes of directories
    write_tree(tmp_path / "src", {"a.txt": b"a", f"{deep}/{'f' * 150}.txt": b"f"})
    prefix = f"{repo}/{'p' * 70}/"  # 70 + 1 + 803 + 1 + 154 = 1,029 bytes
    line = run("fs", "upload", "-r", prefix, "--source", str(tmp_path / "src")).failed(
        9, "--source", "1029 bytes", "at most 1024"
    )
    assert "f" * 150 in line
    assert run.json("fs", "ls", "-r", f"{repo}/")["results"] == []
    run("fs", "upload", "-r", f"{repo}/{'p' * 65}/", "--source", str(tmp_path / "src")).ok()


def test_upload_tree_reports_what_it_skipped(run: InProcess, repo: str, tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"a.txt": b"a", "real/b.txt": b"b"})
    os.mkfifo(src / "fifo")
    (src / "linked").symlink_to(src / "real", target_is_directory=True)
    (src / "file-link.txt").symlink_to(src / "a.txt")  # a symlink to a file is uploaded
    result = run("fs", "upload", "-r", f"{repo}/t/", "--source", str(src)).ok()
    assert "Uploaded 3 objects" in result.out
    assert "Skipped 2 entries that are not regular files" in result.out
    doc = run.json("fs", "upload", "-r", f"{repo}/u/", "--source", str(src))
    assert (doc["count"], doc["skipped"]) == (3, 2)
    os.unlink(src / "fifo")
    os.unlink(src / "linked")
    result = run("fs", "upload", "-r", f"{repo}/v/", "--source", str(src)).ok()
    assert "Skipped" not in result.out

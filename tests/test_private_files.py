"""The embedded default's files are owner-only whatever the umask: directories 0700, files 0600.

Checked with umask 022 (the usual default, which would give 0755/0644) on the real stores: the SQLite
KV store and the mirrors database (main file, ``-wal`` and ``-shm``), the range/metarange disk cache
and the mirroring daemon's state directory with its presence cache.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakefs_core.committed.tables import DiskCache
from lakefs_core.kv.sqlite import SQLiteKVStore
from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.service import MirrorService


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_sqlite_private(db: Path, created_dirs: list[Path]) -> None:
    names = sorted(p.name for p in db.parent.iterdir())
    assert {db.name, f"{db.name}-wal", f"{db.name}-shm"} <= set(names), names
    for name in names:
        assert mode(db.parent / name) == 0o600, (name, oct(mode(db.parent / name)))
    for d in created_dirs:
        assert mode(d) == 0o700, (d, oct(mode(d)))


async def test_sqlite_kv_store_files_are_private(tmp_path: Path) -> None:
    db = tmp_path / "state" / "kv" / "kv.sqlite3"
    kv = await SQLiteKVStore.open(f"sqlite:///{db}")
    try:
        await kv.set(b"p", b"k", b"v")
        assert_sqlite_private(db, [tmp_path / "state", tmp_path / "state" / "kv"])
    finally:
        await kv.close()


async def test_mirrors_database_files_are_private(tmp_path: Path) -> None:
    db = tmp_path / "mirrors" / "mirrors.sqlite3"
    mirrors = await MirrorsDB.open(f"sqlite:///{db}")
    try:
        await mirrors.ping()
        assert_sqlite_private(db, [tmp_path / "mirrors"])
    finally:
        await mirrors.close()


def test_disk_cache_is_private(tmp_path: Path) -> None:
    root = tmp_path / "cache" / "tables"
    cache = DiskCache(root, 1 << 20)
    cache.write("0" * 64, b"table bytes")
    assert mode(root) == 0o700 and mode(tmp_path / "cache") == 0o700
    files = list(root.iterdir())
    assert files and all(mode(f) == 0o600 for f in files)


async def test_mirror_state_directory_and_presence_cache_are_private(tmp_path: Path) -> None:
    state = tmp_path / "var" / "mirror-state"
    (tmp_path / "db").mkdir()  # the mirror refuses a SQLite URL whose directory does not exist
    env = {
        "LAKEFS_MIRROR__REGION": "us-east-1",
        "LAKEFS_MIRROR__REGIONS__US-EAST-1__KV_URL": "memory://",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"sqlite:///{tmp_path / 'db' / 'mirrors.sqlite3'}",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID": "AKIAMODES",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": "modes-secret",
        "LAKEFS_MIRROR__STATE_DIR": str(state),
    }
    service = await MirrorService.open(load_mirror_config(None, env), serve_api=False)
    try:
        service.presence.mark_present("s3://bucket/ns", "data/x")
    finally:
        await service.close()  # flushes the presence cache into the state directory
    assert mode(state) == 0o700 and mode(state.parent) == 0o700
    files = list(state.iterdir())
    assert files and all(mode(f) == 0o600 for f in files), [(f.name, oct(mode(f))) for f in files]

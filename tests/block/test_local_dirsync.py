"""The local store's shared directory fsyncs (lakefs_core/block/local_dirsync.py): a caller returns
only after an fsync that started after its call, callers arriving during one fsync share the next,
a failed fsync fails exactly the callers that waited on it, and nothing is kept once calls end.

``os.fsync`` is wrapped (the real call still runs) to record when each fsync starts and to hold
the first one open while others arrive."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakefs_core.block import local_dirsync
from lakefs_core.block.local import LocalBlockStore
from lakefs_core.block.local_dirsync import DirSyncs
from tests.support.timing import scaled

REAL_FSYNC = os.fsync  # the wrapper below replaces os.fsync for the test's duration


class Recorder:
    """Counts directory fsyncs (starts, in order, with the events seen before each); the first blocks until
    released; ``fail_first`` makes the first one raise after the real fsync ran."""

    def __init__(self, fail_first: bool = False) -> None:
        self.lock = threading.Lock()
        self.log: list[str] = []
        self.first_started = threading.Event()
        self.release = threading.Event()
        self.fail_first = fail_first
        self.count = 0

    def fsync(self, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # a file's (a put's own): not counted
            REAL_FSYNC(fd)
            return
        with self.lock:
            self.count += 1
            number = self.count
            self.log.append(f"start {number}")
        REAL_FSYNC(fd)
        if number == 1:
            self.first_started.set()
            assert self.release.wait(scaled(10))
            if self.fail_first:
                raise OSError(errno.EIO, "injected writeback error")

    def note(self, what: str) -> None:
        with self.lock:
            self.log.append(what)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], Recorder]]:
    def make(fail_first: bool = False) -> Recorder:
        made = Recorder(fail_first)
        monkeypatch.setattr(local_dirsync.os, "fsync", made.fsync)
        return made

    yield make


def _caller(
    syncs: DirSyncs, fd: int, rec: Recorder, name: str, errors: dict[str, BaseException]
) -> threading.Thread:
    def run() -> None:
        rec.note(f"call {name}")
        try:
            syncs.sync(fd)
        except OSError as e:
            errors[name] = e
        rec.note(f"return {name}")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waiting(syncs: DirSyncs, users: int) -> None:
    """Wait until ``users`` calls are inside :meth:`DirSyncs.sync`."""
    for _ in range(int(scaled(1000))):
        with syncs._lock:
            if sum(d.users for d in syncs._dirs.values()) >= users:
                return
        threading.Event().wait(0.01)
    raise AssertionError("the callers never arrived")


def test_callers_during_an_fsync_share_the_next_one(
    tmp_path: Path, recorder: Callable[[bool], Recorder]
) -> None:
    rec = recorder(False)
    syncs = DirSyncs()
    fd = os.open(tmp_path, os.O_RDONLY)
    errors: dict[str, BaseException] = {}
    try:
        first = _caller(syncs, fd, rec, "a", errors)
        assert rec.first_started.wait(scaled(10))
        later = [_caller(syncs, fd, rec, name, errors) for name in ("b", "c", "d")]
        _waiting(syncs, 4)
        rec.release.set()
        for thread in (first, *later):
            thread.join(scaled(10))
            assert not thread.is_alive()
    finally:
        os.close(fd)
    assert errors == {}
    assert rec.count == 2  # a's, then one for b, c and d together
    log = rec.log
    for name in ("b", "c", "d"):  # each called during fsync 1 and returned after fsync 2 started
        assert (
            log.index("start 1")
            < log.index(f"call {name}")
            < log.index("start 2")
            < log.index(f"return {name}")
        )
    assert syncs._dirs == {}  # nothing kept once the calls ended


def test_a_failed_fsync_fails_its_callers_only(tmp_path: Path, recorder: Callable[[bool], Recorder]) -> None:
    rec = recorder(True)
    syncs = DirSyncs()
    fd = os.open(tmp_path, os.O_RDONLY)
    errors: dict[str, BaseException] = {}
    try:
        first = _caller(syncs, fd, rec, "a", errors)
        assert rec.first_started.wait(scaled(10))
        second = _caller(syncs, fd, rec, "b", errors)  # waits for fsync 2, which succeeds
        _waiting(syncs, 2)
        rec.release.set()
        for thread in (first, second):
            thread.join(scaled(10))
            assert not thread.is_alive()
    finally:
        os.close(fd)
    assert list(errors) == ["a"] and isinstance(errors["a"], OSError)
    assert rec.count == 2
    assert syncs._dirs == {}


def test_directories_are_synced_apart(tmp_path: Path, recorder: Callable[[bool], Recorder]) -> None:
    rec = recorder(False)
    rec.release.set()
    syncs = DirSyncs()
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    fds = [os.open(tmp_path / name, os.O_RDONLY) for name in ("x", "y")]
    try:
        for fd in fds:
            syncs.sync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    assert rec.count == 2


async def test_concurrent_puts_to_one_directory_share_fsyncs(
    tmp_path: Path, recorder: Callable[[bool], Recorder]
) -> None:
    """A store's puts go through its DirSyncs: every put's directory is synced (never fewer than
    one fsync per burst, each object readable), and the store keeps no state after them."""
    import asyncio

    rec = recorder(False)
    rec.release.set()
    store = LocalBlockStore(tmp_path / "root", tmp_grace_seconds=None)
    try:
        keys = [f"data/slice/{i:03d}" for i in range(24)]
        await asyncio.gather(*(store.put(k, k.encode(), if_none_match=True) for k in keys))
        assert [await store.get(k) for k in keys] == [k.encode() for k in keys]
        assert 1 <= rec.count <= len(keys)
        assert store._dir_syncs._dirs == {}
    finally:
        await store.close()

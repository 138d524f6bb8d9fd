"""Leftovers of interrupted local writes: a writer killed with SIGKILL mid-upload, then the next writer.

A real subprocess streams two uploads into a local store from a slow async generator and is killed
with ``kill -9`` while both temporary files are on disk. One leftover is aged past the grace period
(``os.utime``); the next store opened for writing (in this, another, process) removes it in the
background of its first put, and leaves the fresh one, the files of live writers and every file
whose name is not exactly a temporary file name.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from lakefs_core.block.local import LocalBlockStore
from lakefs_core.block.local_leftovers import SWEEP_STAMP
from tests.support.timing import scaled

REPO = Path(__file__).resolve().parents[2]
# The documented name of a temporary file: host hash, writer pid, random part (or, older, random only).
TMP_NAME = re.compile(r"\.lakefs-tmp-(?:(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-)?[0-9a-f]{32}")
HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
WRITER = """
import asyncio, sys
from lakefs_core.block.local import LocalBlockStore

async def body(name):
    yield b"x" * (3 << 20)  # over the store's 1 MiB write chunk: lands in the temporary file
    print(name, flush=True)
    await asyncio.sleep(3600)  # a slow producer, killed here

async def main():
    store = LocalBlockStore(sys.argv[1])
    await asyncio.gather(store.put("data/old", body("old")), store.put("data/fresh", body("fresh")))

asyncio.run(main())
"""


def _kill_mid_upload(root: Path) -> dict[str, Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, env=env, cwd=REPO, text=True
    )
    try:
        assert proc.stdout is not None
        started = {proc.stdout.readline().strip(), proc.stdout.readline().strip()}
        assert started == {"old", "fresh"}
        deadline = time.monotonic() + scaled(10)  # the store writes a chunk while asking for the next
        while time.monotonic() < deadline and not (
            len(list((root / "data").glob(".lakefs-tmp-*"))) == 2
            and all(p.stat().st_size >= 3 << 20 for p in (root / "data").glob(".lakefs-tmp-*"))
        ):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=scaled(10))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    temps = sorted((root / "data").glob(".lakefs-tmp-*"))
    assert len(temps) == 2 and all(p.stat().st_size >= 3 << 20 for p in temps)
    for p in temps:  # named after the dead writer's pid, so findable by name
        m = TMP_NAME.fullmatch(p.name)
        assert m is not None and m.group("pid") == str(proc.pid)
    return {"old": temps[0], "fresh": temps[1]}


def _wait_gone(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not path.exists(), f"{path.name} was not removed in the background of the first put"


async def test_next_writer_removes_aged_leftovers_of_a_killed_upload(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    left = _kill_mid_upload(root)
    two_hours_ago = time.time() - 7200
    os.utime(left["old"], (two_hours_ago, two_hours_ago))

    meta = root / ".lakefs-meta" / "data"
    meta.mkdir(parents=True)
    legacy = meta / f".lakefs-tmp-{uuid.uuid4().hex}"  # the name used before pids were recorded
    live = root / "data" / f".lakefs-tmp-{HOST}-{os.getpid()}-{uuid.uuid4().hex}"  # a live writer's
    keep = [
        root / "data" / ".lakefs-tmp-notours",
        root / "data" / f".lakefs-tmp-{uuid.uuid4().hex}.part",
        root / "data" / f"x.lakefs-tmp-{uuid.uuid4().hex}",
        live,
    ]
    for path in [legacy, *keep]:
        path.write_bytes(b"partial")
    decoy_dir = root / "data" / f".lakefs-tmp-{uuid.uuid4().hex}"
    decoy_dir.mkdir()
    for path in [legacy, *keep, decoy_dir]:
        os.utime(path, (two_hours_ago, two_hours_ago))
    # The killed writer's own first put swept the (then empty) root and may have stamped it: the
    # next sweep is then due a grace period later. Two hours have "passed" for the stamp too.
    stamp = root / ".lakefs-meta" / SWEEP_STAMP
    if stamp.exists():  # its sweep may not have finished before the kill
        os.utime(stamp, (two_hours_ago, two_hours_ago))

    store = LocalBlockStore(root, tmp_grace_seconds=3600)
    try:
        await store.put("data/other", b"new")  # opening the namespace for writing starts the sweep
        await asyncio.to_thread(_wait_gone, left["old"], 10.0)  # no sweep_leftovers() call yet
        assert await store.sweep_leftovers() == 2  # the same background sweep, now finished
        assert not legacy.exists()
        assert left["fresh"].exists()  # younger than the grace period: may belong to a slow writer
        assert all(p.exists() for p in keep) and decoy_dir.is_dir()
        assert await store.get("data/other") == b"new"
    finally:
        await store.close()


async def test_sweep_runs_once_per_root_per_process_and_can_be_disabled(tmp_path: Path) -> None:
    aged = time.time() - 7200
    for name, grace in (("off", None), ("on", 0.0)):
        root = tmp_path / name
        (root / "d").mkdir(parents=True)
        leftover = root / "d" / f".lakefs-tmp-{uuid.uuid4().hex}"
        leftover.write_bytes(b"x")
        os.utime(leftover, (aged, aged))
        first = LocalBlockStore(root, tmp_grace_seconds=grace)
        second = LocalBlockStore(root, tmp_grace_seconds=grace)
        try:
            assert await first.sweep_leftovers() == (0 if grace is None else 1)
            assert leftover.exists() == (grace is None)
            assert await second.sweep_leftovers() == 0
        finally:
            await first.close()
            await second.close()


def test_a_root_is_swept_once_per_grace_period_by_its_stamp(tmp_path: Path) -> None:
    """Short-lived writers (each ``fs upload``) must not walk the whole namespace every time: a
    completed sweep stamps the root; an interrupted one does not."""
    from lakefs_core.block.local_leftovers import sweep_leftovers

    root = tmp_path / "ns"
    stamp = root / ".lakefs-meta" / SWEEP_STAMP
    aged = time.time() - 7200

    def leftover() -> Path:
        (root / "d").mkdir(parents=True, exist_ok=True)
        path = root / "d" / f".lakefs-tmp-{uuid.uuid4().hex}"
        path.write_bytes(b"x")
        os.utime(path, (aged, aged))
        return path

    first = leftover()
    for i in range(5):
        (root / f"e{i}").mkdir()
    sweep_leftovers(root, 3600, limit=2, stamp=stamp)
    assert not stamp.exists()  # stopped at its entry limit: not a completed sweep
    still_there = first.exists()
    assert sweep_leftovers(root, 3600, stamp=stamp) == int(still_there)
    assert not first.exists() and stamp.is_file()
    second = leftover()
    assert sweep_leftovers(root, 3600, stamp=stamp) == 0  # swept within the grace period
    assert second.exists()
    os.utime(stamp, (aged, aged))
    assert sweep_leftovers(root, 3600, stamp=stamp) == 1  # the last sweep is a grace period old
    assert not second.exists()
    assert sweep_leftovers(root, 3600, stamp=stamp) == 0 and stamp.is_file()  # the stamp stays
    third = leftover()
    future = time.time() + 7200  # the clock was stepped back, or NFS skew: not a recent sweep
    os.utime(stamp, (future, future))
    assert sweep_leftovers(root, 3600, stamp=stamp) == 1 and not third.exists()

"""What the local store's leftover sweep must never remove (mutation audit M3*).

:func:`~lakefs_core.block.local_leftovers.sweep_leftovers` on real directories under ``tmp_path``,
ages set with ``os.utime``:

- it never follows a symlinked directory: aged temporary files in a directory outside the root that a
  symlink inside the root points to are left alone (while an aged one inside the root goes);
- a temporary file whose writer's pid cannot be probed (``PermissionError``: another user's live
  process) is kept, while one whose writer is gone (``ProcessLookupError``) is removed; the probe
  (``os.kill(pid, 0)``) is made to answer each case through a wrapper around the real ``os.kill``;
- only REGULAR files are leftovers: a symlink or a FIFO named exactly like a temporary file, however
  old, stays.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from lakefs_core.block import local_leftovers
from lakefs_core.block.local_leftovers import TMP_NAME, sweep_leftovers, temp_name, temp_names

GRACE = 3600.0


def aged(path: Path, seconds: float = 2 * GRACE) -> None:
    """Push ``path``'s own mtime (not a symlink's target's) ``seconds`` into the past."""
    when = time.time() - seconds
    os.utime(path, (when, when), follow_symlinks=False)


def leftover(directory: Path, name: str | None = None) -> Path:
    """An aged temporary file in ``directory`` (by default of the pre-pid name form)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name or f".lakefs-tmp-{uuid.uuid4().hex}")
    path.write_bytes(b"partial")
    aged(path)
    return path


def test_a_symlinked_directory_is_never_walked(tmp_path: Path) -> None:
    root, outside = tmp_path / "ns", tmp_path / "outside"
    theirs = leftover(outside)  # e.g. another store's, or another program's, directory
    ours = leftover(root / "data")
    (root / "data" / "link").symlink_to(outside, target_is_directory=True)
    (root / "link").symlink_to(outside, target_is_directory=True)
    assert sweep_leftovers(root, GRACE) == 1
    assert not ours.exists()  # the sweep did run over the root
    assert theirs.exists()
    assert (root / "link").is_symlink() and (root / "data" / "link").is_symlink()


def test_an_unprobeable_writer_is_assumed_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = local_leftovers._HOST
    me = os.getpid()
    other_user, gone = me + 1, me + 2  # this host, other pids; their liveness is what the probe says
    probed: list[int] = []
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        if pid in (other_user, gone):
            assert sig == 0, "the sweep only probes"
            probed.append(pid)
            if pid == other_user:
                raise PermissionError(1, "Operation not permitted")  # alive, owned by another user
            raise ProcessLookupError(3, "No such process")
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)  # the module probes through os.kill
    directory = tmp_path / "ns" / "data"
    kept = leftover(directory, f".lakefs-tmp-{host}-{other_user}-{uuid.uuid4().hex}")
    removed = leftover(directory, f".lakefs-tmp-{host}-{gone}-{uuid.uuid4().hex}")
    mine = leftover(directory, temp_name())  # this process's own: alive without a probe
    assert sweep_leftovers(tmp_path / "ns", GRACE) == 1
    assert kept.exists() and mine.exists() and not removed.exists()
    assert sorted(probed) == sorted([other_user, gone])


def test_only_regular_files_are_leftovers(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    target = tmp_path / "target"
    target.write_bytes(b"somebody's data")
    link = root / "data" / f".lakefs-tmp-{uuid.uuid4().hex}"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    dangling = root / "data" / f".lakefs-tmp-{uuid.uuid4().hex}"
    dangling.symlink_to(tmp_path / "no-such-file")
    fifo = root / "data" / f".lakefs-tmp-{uuid.uuid4().hex}"
    os.mkfifo(fifo)
    for path in (link, dangling, fifo):
        aged(path)
        assert os.lstat(path).st_mtime < time.time() - GRACE  # old by their own mtime
    real = leftover(root / "data")  # a regular one beside them: the sweep does remove leftovers
    assert sweep_leftovers(root, GRACE) == 1
    assert not real.exists()
    assert link.is_symlink() and dangling.is_symlink() and fifo.is_fifo()
    assert target.read_bytes() == b"somebody's data"


def test_batch_temp_names_are_the_sweeps_and_unique() -> None:
    """A hop's names (``temp_names``) are what ``temp_name`` makes: the sweep recognizes them as
    this process's, and no two repeat, within a batch or with single names."""
    names = [*temp_names(3), temp_name(), *temp_names(2), *temp_names(0)]
    assert len(names) == len(set(names)) == 6
    for name in names:
        match = TMP_NAME.fullmatch(name)
        assert match is not None and match["pid"] == str(os.getpid())

"""The kill tests' fork server (tests/support/zygote.py) gives what a fresh process would: the
command's exit code and output, the caller's environment and working directory, a new session, a
SIGKILL's status; and it refuses to fork once a thread has started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.timing import scaled
from tests.support.zygote import Zygote

PROBE = "tests.test_zygote:probe"


def probe(argv: list[str]) -> int:
    """The zygote's command here: prints what the child sees, then exits, sleeps or fails."""
    print(os.environ.get("ZYGOTE_PROBE"), os.getcwd(), os.getsid(0) == os.getpid(), sys.argv[1:] == argv)
    print("to stderr", file=sys.stderr)  # both flushed at the interpreter's exit, as in a process
    if argv[0] == "sleep":
        signal.pause()
    if argv[0] == "stdin":
        sys.stdout.write(sys.stdin.read())
        return 0
    if argv[0] == "raise":
        raise RuntimeError("from the child")
    return int(argv[0])


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    with Zygote(PROBE, ["click"]) as z:
        yield z


async def test_a_child_is_the_command_with_the_callers_environment(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    proc = await zygote.spawn(["probe", "7"], {**os.environ, "ZYGOTE_PROBE": "set"})
    out, err = await proc.communicate()
    assert proc.returncode == 7 and proc.pid != os.getpid()
    assert out.decode() == f"set {tmp_path} True True\n" and err.decode() == "to stderr\n"

    proc = await zygote.spawn(["probe", "raise"], dict(os.environ))
    out, err = await proc.communicate()
    assert proc.returncode == 1 and "RuntimeError: from the child" in err.decode()


async def test_a_sigkill_is_the_childs_status(zygote: Zygote) -> None:
    proc = await zygote.spawn(["probe", "sleep"], dict(os.environ))
    os.killpg(proc.pid, signal.SIGKILL)  # its own session and group, as start_new_session gives
    await proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def test_a_popen_child_polls_waits_and_is_killed(zygote: Zygote, tmp_path: Path) -> None:
    log = tmp_path / "log"
    with log.open("ab") as out:
        proc = zygote.popen(
            ["probe", "sleep"], dict(os.environ), stdout=out.fileno(), stderr=out.fileno(), cwd="/"
        )
    deadline = time.monotonic() + scaled(30)
    while "to stderr" not in log.read_text():  # the caller's file is the child's stderr
        assert time.monotonic() < deadline, "the child never wrote to its stderr"
        time.sleep(0.02)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=scaled(30)) == -signal.SIGKILL == proc.poll()


def test_run_pipes_the_input_and_kills_at_the_timeout(zygote: Zygote, tmp_path: Path) -> None:
    """``Zygote.run`` answers what ``subprocess.run(capture_output=True)`` would (tests/cli's ``Cli``)."""
    env = {**os.environ, "ZYGOTE_PROBE": "run"}
    done = zygote.run(["probe", "stdin"], env, cwd=str(tmp_path), input=b"fed\n" * 40_000, timeout=scaled(30))
    assert done.returncode == 0 and done.stderr == b"to stderr\n"
    assert done.stdout == f"run {tmp_path} True True\n".encode() + b"fed\n" * 40_000  # beyond a pipe's buffer
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(["probe", "sleep"], env, cwd=str(tmp_path), input=None, timeout=0.5)


def test_an_ended_child_stays_a_zombie_until_its_status_is_read(zygote: Zygote, tmp_path: Path) -> None:
    """As a child of the caller's would: a ``killpg`` racing the child's end finds its group."""
    proc = zygote.popen(["probe", "3"], dict(os.environ), stdout=1, stderr=2, cwd="/")
    deadline = time.monotonic() + scaled(30)
    while Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] != "Z":
        assert time.monotonic() < deadline, "the child never ended"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # no ProcessLookupError: the group still exists
    assert proc.wait(timeout=scaled(30)) == 3  # it had ended on its own


def test_a_zygote_with_a_thread_refuses_to_fork(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.zygote", str(tmp_path / "s"), PROBE, "pyarrow"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert done.returncode == 1 and "threads after importing" in done.stderr, done.stderr
    assert done.stdout == ""  # never "ready"

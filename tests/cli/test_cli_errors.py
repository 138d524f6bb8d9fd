"""Bad identifiers and unusable local files are one line on stderr with the documented exit code,
never a traceback nor a hang (issue 8). Real processes, except the fast identifier checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Cli, InProcess, user_env
from tests.support.other_user import readable_runtime
from tests.support.timing import scaled
from tests.support.zygote import Zygote

BAD_INPUT = 9
NOT_FOUND = 2


@pytest.fixture
def run(run: InProcess, tmp_path: Path) -> InProcess:
    """The shared in-process CLI, with a small file ``f`` to upload."""
    (tmp_path / "f").write_text("one\n")
    return run


@pytest.fixture
def cli(tmp_path: Path, core_zygote: Zygote) -> Cli:
    return Cli(user_env(tmp_path / "home"), tmp_path, timeout=scaled(30), zygote=core_zygote)


def test_identifiers_are_full_ascii_matches(run: InProcess, tmp_path: Path) -> None:
    run("repo", "create", "lakefs://rr1", f"local://{tmp_path / 'ns'}").ok()
    run("repo", "create", "lakefs://xyz\n", f"local://{tmp_path / 'ns2'}").failed(BAD_INPUT, "repository")
    run("branch", "create", "lakefs://rr1/main\n", "--source", "lakefs://rr1/main").failed(BAD_INPUT)
    run("branch", "create", "lakefs://rr1/br\u00fcnch", "--source", "lakefs://rr1/main").failed(BAD_INPUT)
    run("tag", "create", "lakefs://rr1/t\n", "lakefs://rr1/main").failed(BAD_INPUT)
    head = run.json("branch", "list", "lakefs://rr1")["results"][0]["commit_id"]
    run("branch", "create", f"lakefs://rr1/{head}", "--source", "lakefs://rr1/main").failed(
        BAD_INPUT, "commit id"
    )
    run(
        "fs",
        "upload",
        "lakefs://rr1/main/a",
        "--source",
        str(tmp_path / "f"),
        "--content-type",
        "text/plain\n",
    ).failed(BAD_INPUT, "content_type")
    assert [b["id"] for b in run.json("branch", "list", "lakefs://rr1")["results"]] == ["main"]
    assert run.json("tag", "list", "lakefs://rr1")["results"] == []
    assert [r["id"] for r in run.json("repo", "list")["results"]] == ["rr1"]


def test_upload_of_an_unreadable_file(cli: Cli, tmp_path: Path) -> None:
    cli("repo", "create", "lakefs://rr1", f"local://{tmp_path / 'ns'}").ok()
    # /proc/self/mem is a regular file whose read at offset 0 fails with EIO.
    line = cli("fs", "upload", "lakefs://rr1/main/a", "--source", "/proc/self/mem").failed(BAD_INPUT)
    assert "/proc/self/mem" in line and "Input/output error" in line
    cli("fs", "upload", "lakefs://rr1/main/a", "--source", str(tmp_path / "nope")).failed(NOT_FOUND, "nope")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="lakefs-cli-perm-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_upload_of_a_file_without_read_permission(shared_dir: Path) -> None:
    """Permission denied, for a small file (read at once) and a big one (streamed in the session).
    The CLI runs as uid 65534 from a copy of what it imports (tests/support/other_user.py): the
    checkout and its virtual environment may be private to root (a clone in a 0700 directory)."""
    small, big, readable = shared_dir / "small", shared_dir / "big", shared_dir / "readable"
    small.write_bytes(b"secret")
    with big.open("wb") as f:
        f.truncate(9 << 20)  # above the 8 MiB streaming threshold
    readable.write_bytes(b"public")
    for path in (small, big):
        path.chmod(0o600)  # root's: unreadable for the user below
    env = user_env(shared_dir / "home")
    # The imports of the same commands (as root: the uploads succeed) decide what is laid out.
    trace_home = shared_dir / "trace"
    trace = [
        ["repo", "create", "lakefs://rr1", f"local://{trace_home / 'ns'}"],
        *(["fs", "upload", f"lakefs://rr1/main/{p.name}", "--source", str(p)] for p in (small, big)),
    ]
    runtime = readable_runtime(shared_dir, trace, module="lakefs_core.cli", env=user_env(trace_home))

    def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*runtime.argv, "-m", "lakefs_core.cli", *args],
            capture_output=True,
            text=True,
            env={**env, **runtime.env},
            cwd=shared_dir,
            timeout=scaled(60),
            check=False,
        )

    done = as_nobody("repo", "create", "lakefs://rr1", f"local://{shared_dir / 'ns'}")
    assert done.returncode == 0, done.stderr
    done = as_nobody("fs", "upload", "lakefs://rr1/main/readable", "--source", str(readable))
    assert done.returncode == 0, done.stderr  # the user can run the CLI: the refusals below are real
    for path in (small, big):
        done = as_nobody("fs", "upload", f"lakefs://rr1/main/{path.name}", "--source", str(path))
        line = done.stderr.strip()
        assert done.returncode == BAD_INPUT, done.stderr
        assert "\n" not in line and "Traceback" not in line, done.stderr
        assert str(path) in line and "Permission denied" in line, line


RECORD = '{"key":"a","address":"x","size":1,"etag":"e"'


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (RECORD.replace('"size":1', '"size":9223372036854775808') + "}", "size"),
        (RECORD.replace('"size":1', '"size":18446744073709551616') + "}", "size"),
        (RECORD + ',"last_modified":"0001-01-01T00:00:00+01:00"}', "last_modified"),
        (RECORD + ',"last_modified":"9999-12-31T23:59:59-01:00"}', "last_modified"),
    ],
)
def test_write_range_out_of_range_values(cli: Cli, tmp_path: Path, line: str, needle: str) -> None:
    cli("sst", "write-range", str(tmp_path / "out"), stdin=line.encode() + b"\n").failed(
        BAD_INPUT, "line 1", needle
    )
    assert not (tmp_path / "out").exists()


def test_write_range_into_an_uncreatable_directory(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "out"
    cli("sst", "write-range", str(out), stdin=(RECORD + "}\n").encode()).failed(
        BAD_INPUT, "OUT_DIR", str(out)
    )


def test_inspect_refuses_what_is_not_a_regular_file(cli: Cli, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # Reading either would never end (a FIFO without writer blocks; /dev/zero never reaches EOF).
    for path in ("/dev/zero", str(fifo), "/dev/null"):
        cli("sst", "inspect", path).failed(BAD_INPUT, "FILE", path, "not a regular file")


def test_recursive_upload_of_a_tree_with_an_unreadable_file(cli: Cli, tmp_path: Path) -> None:
    """The file read in the store's worker thread (a batched small file) fails with one line naming
    it; nothing of the batch is staged."""
    cli("repo", "create", "lakefs://rr1", f"local://{tmp_path / 'ns'}").ok()
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(40):
        (tree / f"ok{i:02}").write_bytes(b"fine")
    (tree / "zz-bad").symlink_to("/proc/self/mem")  # a regular file whose read fails with EIO
    line = cli("fs", "upload", "lakefs://rr1/main/t", "--source", str(tree), "--recursive").failed(BAD_INPUT)
    assert "zz-bad" in line and "Input/output error" in line
    assert cli.json("fs", "ls", "lakefs://rr1/main/")["results"] == []


def test_ctrl_c_mid_operation_prints_no_traceback_from_worker_threads() -> None:
    """After an interruption, a worker thread that finishes its call late (aiosqlite's, posting to
    the closed event loop) must not print a traceback: the user sees one line and exit 130."""
    program = (
        "import sys, threading, time, click\n"
        "from lakefs_core.service.cli import CLIGroup, run\n"
        "@click.group(cls=CLIGroup)\n"
        "def cli() -> None: ...\n"
        "@cli.command()\n"
        "def work() -> None:\n"
        "    def late() -> None:\n"
        "        time.sleep(0.3)\n"
        "        raise RuntimeError('Event loop is closed')\n"
        "    threading.Thread(target=late).start()\n"
        "    raise KeyboardInterrupt\n"
        "sys.exit(run(cli, ['work'], 'prog'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], check=False, capture_output=True, text=True, timeout=scaled(60)
    )
    assert proc.returncode == 130 and proc.stderr.strip() == "prog: aborted", proc.stderr

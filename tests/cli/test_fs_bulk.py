"""``fs upload --recursive`` in batches, streaming ``fs cat`` (``--json`` too) and ``fs download``.

In-process CLI on the embedded default (SQLite + local namespace), plus real subprocesses whose peak
RSS is measured for a 200 MB object (streaming must keep memory flat).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.block.base import ObjectInfo, PutItem, read_small_file
from lakefs_core.block.local import LocalBlockStore
from lakefs_core.cli import fs_transfer, main
from lakefs_core.errors import BadInputError
from tests.cli.helpers import Result, set_user_env, user_env, write_tree
from tests.support.timing import scaled


class InProcess:
    """``lakefs_core.cli.main`` in this process with binary-safe capture (objects are bytes)."""

    def __init__(self, capsys: pytest.CaptureFixture[bytes]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str) -> Result:
        self.capsys.readouterr()
        code = main(list(args))
        captured = self.capsys.readouterr()
        result = Result(tuple(args), code, captured.out, captured.err.decode(errors="replace"))
        assert "Traceback" not in result.err
        return result

    def json(self, *args: str) -> object:
        return self(*args, "--json").json()


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> InProcess:
    set_user_env(monkeypatch, tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    return InProcess(capsysbinary)


@pytest.fixture
def repo(run: InProcess, tmp_path: Path) -> str:
    run("repo", "create", "lakefs://bulk", f"local://{tmp_path / 'ns'}").ok()
    return "lakefs://bulk/main"


def test_upload_recursive_in_batches(
    run: InProcess, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 31 files in batches of 3, then 7 (the last one short); big.bin, first in path order, is streamed
    monkeypatch.setattr(fs_transfer, "BATCH_FILES", 7)
    monkeypatch.setattr(fs_transfer, "FIRST_BATCH_FILES", 3)
    files = {f"d{i % 3}/f{i:02d}.txt": f"content {i}".encode() for i in range(30)}
    files["big.bin"] = bytes(range(256)) * 40_000  # above a lowered stream threshold: streamed
    monkeypatch.setattr(fs_transfer, "STREAM_THRESHOLD", 1 << 20)
    write_tree(tmp_path / "src", files)
    writing, written = 0, []  # the batches' PUTs pass one write gate: never two at a time
    put_batch = LocalBlockStore.put_batch

    async def one_at_a_time(store: LocalBlockStore, items: Sequence[PutItem], **kw: Any) -> list[ObjectInfo]:
        nonlocal writing
        writing += 1
        try:
            assert writing == 1
            for _ in range(5):
                await asyncio.sleep(0)  # room for another batch to start writing, were it allowed
            return await put_batch(store, items, **kw)
        finally:
            writing -= 1
            written.append(len(items))

    monkeypatch.setattr(LocalBlockStore, "put_batch", one_at_a_time)
    doc = run.json("fs", "upload", "-r", f"{repo}/up/", "--source", str(tmp_path / "src"))
    assert sorted(written) == [2, 7, 7, 7, 7]  # PUTs by put_batch: all but the streamed file
    assert doc["count"] == 31 and doc["size_bytes"] == sum(len(v) for v in files.values())
    assert [r["path"] for r in doc["results"]] == sorted(f"up/{k}" for k in files)
    listed = run.json("fs", "ls", "-r", f"{repo}/up/")["results"]
    assert len(listed) == 31
    for rel, data in files.items():
        assert run("fs", "cat", f"{repo}/up/{rel}").ok().raw == data


def expected_cat_json(path: str, data: bytes) -> bytes:
    try:
        doc = {"path": path, "size_bytes": len(data), "encoding": "utf-8", "content": data.decode()}
    except UnicodeDecodeError:
        doc = {"path": path, "size_bytes": len(data), "encoding": "base64"}
        doc["content"] = base64.b64encode(data).decode()
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"plain text\n",
        # multi-byte characters and escapes straddling the 1 MiB chunk boundaries
        ('\u00e9\u20ac\U0001f600"\\\n\t' * 150_000).encode(),
        bytes(range(256)) * 5000 + b"\x01",  # binary, length not a multiple of 3
        ("\u20ac" * 400_000).encode() + b"\xff",  # UTF-8 until the very end
    ],
    ids=["empty", "text", "utf8-multichunk", "binary", "late-invalid"],
)
def test_cat_json_streams_the_same_document(run: InProcess, repo: str, tmp_path: Path, data: bytes) -> None:
    src = tmp_path / "obj"
    src.write_bytes(data)
    run("fs", "upload", f"{repo}/o", "--source", str(src)).ok()
    assert run("fs", "cat", f"{repo}/o", "--json").ok().raw == expected_cat_json("o", data)
    assert run("fs", "cat", f"{repo}/o").ok().raw == data


def test_download_single_and_recursive(run: InProcess, repo: str, tmp_path: Path) -> None:
    files = {"a/x.txt": b"x", "a/b/y.txt": b"yy", "a/b/c/z.bin": b"\0" * 3000, "other": b"o"}
    write_tree(tmp_path / "src", files)
    run("fs", "upload", "-r", f"{repo}/", "--source", str(tmp_path / "src")).ok()

    run("fs", "download", f"{repo}/a/x.txt").ok()  # no destination: the base name in the cwd
    assert (tmp_path / "x.txt").read_bytes() == b"x"
    (tmp_path / "into").mkdir()
    run("fs", "download", f"{repo}/a/b/y.txt", "into").ok()  # a directory: keep the base name
    assert (tmp_path / "into" / "y.txt").read_bytes() == b"yy"
    run("fs", "download", f"{repo}/a/b/y.txt", "renamed.txt").ok()
    assert (tmp_path / "renamed.txt").read_bytes() == b"yy"
    run("fs", "download", f"{repo}/a/b/y.txt", "newdir/").ok()  # a trailing '/': a directory
    assert (tmp_path / "newdir" / "y.txt").read_bytes() == b"yy"
    long = "n" * 250  # a name near the 255-byte limit: the temporary file must fit too
    (tmp_path / "src" / long).write_bytes(b"long")
    run("fs", "upload", f"{repo}/{long}", "--source", str(tmp_path / "src" / long)).ok()
    run("fs", "download", f"{repo}/{long}", "into/").ok()
    assert (tmp_path / "into" / long).read_bytes() == b"long"

    doc = run.json("fs", "download", "-r", f"{repo}/a", "out", "-p", "2")
    assert doc["count"] == 3 and doc["size_bytes"] == 3003
    out = tmp_path / "out"
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == {"x.txt": b"x", "b/y.txt": b"yy", "b/c/z.bin": b"\0" * 3000}
    assert not [p for p in (tmp_path / "out").rglob(".*")], "temporary files left behind"

    run("fs", "download", "-r", f"{repo}/none/", "out2").failed(2, "no objects under")
    run("fs", "download", f"{repo}/a/", "out3").failed(9, "needs an object path")
    assert not (tmp_path / "out2").exists()


def test_download_into_a_fifo_or_device_writes_through_it(run: InProcess, repo: str, tmp_path: Path) -> None:
    """``fs download x /dev/null`` (or a FIFO) writes into it as ``cat >`` would. The old download
    renamed its temporary file over the destination: as root, that replaced /dev/null itself."""
    body = bytes(range(256)) * 4096  # 1 MiB: more than one chunk through the pipe
    (tmp_path / "obj").write_bytes(body)
    run("fs", "upload", f"{repo}/obj", "--source", str(tmp_path / "obj")).ok()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(fifo)
    for dest in (fifo, tmp_path / "link"):
        got: list[bytes] = []
        reader = threading.Thread(target=lambda out=got: out.append(fifo.read_bytes()), daemon=True)
        reader.start()
        try:
            run("fs", "download", f"{repo}/obj", str(dest), "--no-progress").ok()
            reader.join(30)
        finally:
            if reader.is_alive():  # nothing opened the FIFO for writing: release the reader
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        assert got == [body]
        assert stat.S_ISFIFO(os.stat(fifo).st_mode) and (tmp_path / "link").is_symlink()
    assert not list(tmp_path.glob(".lakefs-download-*")), "a temporary file was left beside the FIFO"


def test_download_refuses_keys_that_leave_the_destination(run: InProcess, repo: str, tmp_path: Path) -> None:
    src = tmp_path / "payload"
    src.write_bytes(b"evil")
    run("fs", "upload", f"{repo}/d/../../escaped", "--source", str(src)).ok()
    run("fs", "upload", f"{repo}/d/fine", "--source", str(src)).ok()
    result = run("fs", "download", "-r", f"{repo}/d/", "dest")
    result.failed(9, "cannot be a local path")
    assert not (tmp_path / "escaped").exists()
    assert not (tmp_path / "dest").exists(), "refused before anything was written"
    with pytest.raises(BadInputError, match="holds a NUL"):  # such keys come from the API or lakeFS
        fs_transfer.safe_relative("a\0b", "n/a\0b")


def _peak_rss_mb(
    env: dict[str, str], cwd: Path, *args: str, stdout: Path, stdin: Path = Path("/dev/null")
) -> float:
    """Run ``lakefs-core ARGS`` in a child of a small wrapper process; the child's peak RSS (MB)."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "with open(sys.argv[1], 'wb') as out, open(sys.argv[2], 'rb') as inp:\n"
        "    cmd = [sys.executable, '-m', 'lakefs_core.cli', *sys.argv[3:]]\n"
        "    rc = subprocess.run(cmd, stdin=inp, stdout=out).returncode\n"
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, str(stdout), str(stdin), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        check=False,
        timeout=scaled(600),
    )
    rc, maxrss_kb = proc.stdout.split()
    assert rc == b"0", proc.stderr.decode()
    return int(maxrss_kb) / 1024


@pytest.mark.slow
def test_streaming_memory_is_bounded_for_a_200mb_object(tmp_path: Path) -> None:
    size = 200 << 20
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        chunk = bytes(range(256)) * 4096  # 1 MiB, not UTF-8: --json cat produces base64
        for _ in range(size // len(chunk)):
            f.write(chunk)
    env = user_env(tmp_path / "home")
    ns = tmp_path / "ns"
    subprocess.run(
        [sys.executable, "-m", "lakefs_core.cli", "repo", "create", "lakefs://big", f"local://{ns}"],
        env=env,
        check=True,
        capture_output=True,
    )
    baseline = _peak_rss_mb(env, tmp_path, "fs", "ls", "lakefs://big/main/", stdout=tmp_path / "ls.out")
    peaks = {
        "upload": _peak_rss_mb(
            env,
            tmp_path,
            "fs",
            "upload",
            "lakefs://big/main/big.bin",
            "--source",
            str(big),
            stdout=tmp_path / "u",
        ),
        "upload from stdin": _peak_rss_mb(
            env,
            tmp_path,
            "fs",
            "upload",
            "lakefs://big/main/stdin.bin",
            "--source",
            "-",
            stdout=tmp_path / "u2",
            stdin=big,
        ),
        "cat": _peak_rss_mb(
            env, tmp_path, "fs", "cat", "lakefs://big/main/big.bin", stdout=tmp_path / "cat.out"
        ),
        "cat --json": _peak_rss_mb(
            env, tmp_path, "--json", "fs", "cat", "lakefs://big/main/big.bin", stdout=tmp_path / "cat.json"
        ),
        "download": _peak_rss_mb(
            env, tmp_path, "fs", "download", "lakefs://big/main/big.bin", "dl.bin", stdout=tmp_path / "d"
        ),
    }
    print(json.dumps({"baseline_mb": round(baseline, 1), **{k: round(v, 1) for k, v in peaks.items()}}))
    for what, peak in peaks.items():
        # Constant memory: a few chunks over what the process needs to list a branch (a 200 MB
        # object held once would add 200 MB; the issue's --json cat added 1.4 GB; 8 MiB upload
        # chunks added 64-80 MB, 1 MiB ones add 11-14).
        assert peak - baseline < 40, f"{what}: peak RSS {peak:.0f} MB vs baseline {baseline:.0f} MB"
    assert (tmp_path / "cat.out").stat().st_size == size
    assert (tmp_path / "dl.bin").stat().st_size == size
    stats = [
        json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "lakefs_core.cli",
                    "--json",
                    "fs",
                    "stat",
                    f"lakefs://big/main/{name}",
                ],
                env=env,
                check=True,
                capture_output=True,
            ).stdout
        )
        for name in ("big.bin", "stdin.bin")
    ]
    assert stats[0]["checksum"] == stats[1]["checksum"] and stats[1]["size_bytes"] == size
    with (tmp_path / "cat.json").open("rb") as f:
        head = f.read(len(b'{"content": "'))
        assert head == b'{"content": "'
        assert f.read(8) == base64.b64encode(bytes(range(6)))
    tail = (tmp_path / "cat.json").read_bytes()[-80:]
    assert tail.endswith(b'", "encoding": "base64", "path": "big.bin", "size_bytes": 209715200}\n')


@pytest.mark.parametrize(
    ("content", "walked_size"),
    [
        (b"", 0),
        (b"abc", 3),  # as walked
        (b"abcdef" * 1000, 3),  # grew since the walk: read to the end
        (b"ab", 3),  # shrank
        (b"x" * (3 << 20), 3 << 20),
    ],
)
def test_read_small_file_returns_the_whole_current_file(
    tmp_path: Path, content: bytes, walked_size: int
) -> None:
    path = tmp_path / "f"
    path.write_bytes(content)
    assert read_small_file(str(path), walked_size) == content


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_listed_file_swapped_for_a_fifo_or_device_is_refused(tmp_path: Path, kind: str) -> None:
    """`upload -r` lists regular files only; one replaced before it is read (by a FIFO, which would
    block the read, or a link to /dev/zero, which would never end) fails with one line naming it,
    for small (read whole) and large (streamed) files alike."""
    import asyncio

    src = tmp_path / "swapped"
    if kind == "fifo":
        os.mkfifo(src)
    else:
        src.symlink_to("/dev/zero")

    async def read(size: int) -> bytes:
        [item] = fs_transfer._upload_items([(str(src), "k", size)], "", None)
        if size > fs_transfer.STREAM_THRESHOLD:
            return b"".join([c async for c in await item.body()])  # type: ignore[operator,misc]
        return await asyncio.to_thread(item.body.read)  # type: ignore[union-attr]

    for size in (3, fs_transfer.STREAM_THRESHOLD + 1):
        with pytest.raises(BadInputError, match="not a regular file"):
            asyncio.run(asyncio.wait_for(read(size), 30))


def test_import_guards_and_exit_codes(run: InProcess, repo: str, tmp_path: Path) -> None:
    """An import replaces everything under its path: without a path it would replace the whole
    branch, so that needs --whole-branch. A wrong source is an error of its own (not "no changes")."""
    src = write_tree(tmp_path / "src", {"a.txt": b"a", "d/b.txt": b"b"})
    run("fs", "upload", f"{repo}/keep.txt", "--source", str(src / "a.txt")).ok()
    run("commit", repo, "-m", "keep").ok()
    head = run.json("log", repo)["results"][0]["id"]

    run("import", "--from", str(src), "--to", repo).failed(9, "--to", "--whole-branch")
    run("import", "--from", str(src), "--to", f"{repo}/").failed(9, "--whole-branch")
    run("import", "--from", str(tmp_path / "nope"), "--to", f"{repo}/in/").failed(2, "no such directory")
    run("import", "--from", str(src / "a.txt"), "--to", f"{repo}/in/").failed(9, "not a directory")
    (tmp_path / "empty").mkdir()
    run("import", "--from", str(tmp_path / "empty"), "--to", f"{repo}/in/").failed(2, "no objects under")
    run("repo", "create", "lakefs://other", f"local://{tmp_path / 'other-ns'}").ok()
    write_tree(tmp_path / "other-ns" / "landing", {"x": b"x"})
    run("import", "--from", str(tmp_path / "other-ns" / "landing"), "--to", f"{repo}/in/").failed(
        9, "storage namespace of repository 'other'"
    )
    assert run.json("log", repo)["results"][0]["id"] == head  # nothing was committed

    run("import", "--from", str(src), "--to", f"{repo}/in/").ok()
    run("import", "--from", str(src), "--to", f"{repo}/in/").failed(13, "changes nothing")
    doc = run.json("import", "--from", str(src), "--to", repo, "--whole-branch")
    assert doc["entries"] == 2
    listed = run.json("fs", "ls", "-r", f"{repo}/")["results"]
    assert sorted(r["path"] for r in listed) == ["a.txt", "d/b.txt"]  # keep.txt and in/ replaced


def test_import_types_entries_by_extension_and_counts_skipped_links(
    run: InProcess, repo: str, tmp_path: Path
) -> None:
    """Issue 38: an imported entry's content type comes from its extension (Python's built-in
    table, the same on every machine); the symbolic links the local listing never follows are
    counted in the output, not skipped silently."""
    src = write_tree(
        tmp_path / "src", {"t/a.csv": b"a,b\n", "t/b.json": b"{}", "t/c.parquet": b"P", "t/d.csv.gz": b"z"}
    )
    outside = write_tree(tmp_path / "outside", {"secret.txt": b"s"})
    (src / "t" / "link.txt").symlink_to(outside / "secret.txt")
    (src / "linked-dir").symlink_to(outside, target_is_directory=True)
    doc = run.json("import", "--from", str(src), "--to", f"{repo}/in/")
    assert (doc["entries"], doc["skipped_symlinks"]) == (4, 2)
    types = {r["path"]: r["content_type"] for r in run.json("fs", "ls", "-r", f"{repo}/in/")["results"]}
    assert types == {
        "in/t/a.csv": "text/csv",
        "in/t/b.json": "application/json",
        "in/t/c.parquet": "application/octet-stream",
        "in/t/d.csv.gz": "application/octet-stream",  # gzip data, not CSV
    }
    (src / "t" / "e.txt").write_bytes(b"e")
    out = run("import", "--from", str(src), "--to", f"{repo}/in/").ok().out
    assert "Skipped 2 symbolic link(s): never imported" in out


def test_uris_that_are_not_utf8_are_refused_by_argument(run: InProcess, repo: str, tmp_path: Path) -> None:
    """argv bytes the OS could not decode reach the CLI as lone surrogates: exit 9 naming the
    argument and the bytes, never an unexpected UnicodeEncodeError (exit 1)."""
    src = write_tree(tmp_path / "src", {"ok.txt": b"ok"})
    bad = f"{repo}/a\udcffb"
    for args in (
        ("fs", "stat", bad),
        ("fs", "cat", bad),
        ("fs", "rm", bad),
        ("fs", "ls", bad),
        ("fs", "download", bad, str(tmp_path / "out")),
        ("fs", "upload", bad, "--source", str(src / "ok.txt")),
        ("fs", "upload", "-r", bad + "/", "--source", str(src)),
        ("import", "--from", str(src), "--to", bad + "/"),
        ("import", "--from", str(src / "a\udcffb"), "--to", f"{repo}/in/"),
        ("import", "--from", "s3://bucket/a\udcffb/", "--to", f"{repo}/in/"),
        ("import", "--from", str(src), "--to", f"{repo}/in/", "-m", "a\udcffb"),
        ("repo", "create", "lakefs://other-repo", f"local://{tmp_path}/a\udcffb"),
        ("commit", repo, "-m", "a\udcffb", "--allow-empty"),
        ("commit", repo, "-m", "m", "--meta", "k=a\udcffb", "--allow-empty"),
    ):
        run(*args).failed(9, "a\\xffb", "is not valid UTF-8")
    assert run.json("fs", "ls", "-r", f"{repo}/")["results"] == []
    assert [r["id"] for r in run.json("repo", "list")["results"]] == ["bulk"]


def test_upload_tree_refuses_unusable_names_before_uploading(
    run: InProcess, repo: str, tmp_path: Path
) -> None:
    src = write_tree(tmp_path / "src", {"ok.txt": b"ok"})
    bad = os.path.join(os.fsencode(src), b"latin1-\xff.txt")
    with open(bad, "wb") as f:
        f.write(b"x")
    run("fs", "upload", "-r", f"{repo}/t/", "--source", str(src)).failed(9, "latin1-\\xff.txt", "UTF-8")
    os.unlink(bad)
    (src / "dangling").symlink_to(tmp_path / "gone")
    run("fs", "upload", "-r", f"{repo}/t/", "--source", str(src)).failed(9, "dangling", "missing file")
    assert run.json("fs", "ls", "-r", f"{repo}/")["results"] == []  # nothing was staged


def test_a_closed_stdout_ends_quietly_with_141(run: InProcess, tmp_path: Path) -> None:
    """`lakefs-core fs ls -r ... | head -1`: the reader goes away; exit 141 as a native tool's
    SIGPIPE death reads in a shell, with nothing on stderr (no traceback, no 'unexpected')."""
    env = user_env(tmp_path / "home")  # ``run``'s user: the repository is created in-process
    cmd = [sys.executable, "-m", "lakefs_core.cli"]
    run("repo", "create", "lakefs://pipe", f"local://{tmp_path / 'ns'}").ok()
    with subprocess.Popen(
        [*cmd, "log", "lakefs://pipe/main"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # before the command writes anything: its first write fails with EPIPE
        err = proc.stderr.read()
        assert proc.wait(timeout=scaled(60)) == 141 and err == b"", err


@pytest.mark.skipif(
    not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)), reason="no /dev/full"
)
def test_a_full_stdout_is_a_storage_full_error(run: InProcess, tmp_path: Path) -> None:
    """Output redirected to a full disk (`/dev/full`): one line naming the output and exit 14, as
    any other out-of-space error, for a session's command (`fs cat`, text and --json), one
    without a session (`--version`) and the help text; never 'unexpected OSError'."""
    env = user_env(tmp_path / "home")  # ``run``'s user: the object is put in-process
    cmd = [sys.executable, "-m", "lakefs_core.cli"]
    src = write_tree(tmp_path / "src", {"f": os.urandom(300_000)})
    run("repo", "create", "lakefs://full", f"local://{tmp_path / 'ns'}").ok()
    run("fs", "upload", "lakefs://full/main/f", "--source", str(src / "f")).ok()
    for args in (
        ["fs", "cat", "lakefs://full/main/f"],
        ["--json", "fs", "cat", "lakefs://full/main/f"],
        ["fs", "ls", "lakefs://full/main/"],
        ["--version"],
        ["--help"],
    ):
        with open("/dev/full", "wb") as full:
            proc = subprocess.run([*cmd, *args], env=env, stdout=full, stderr=subprocess.PIPE, check=False)
        assert proc.returncode == 14, (args, proc.stderr)
        assert proc.stderr.decode().splitlines() == [
            "lakefs-core: cannot write the output: No space left on device"
        ]


def test_rm_recursive_in_batches(
    run: InProcess, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakefs_core.cli import fs as fs_cmds

    monkeypatch.setattr(fs_cmds, "RM_BATCH", 3)  # 8 objects: 3 batches, the last one short
    files = {f"d/f{i}.txt": b"x" for i in range(8)} | {"keep.txt": b"k"}
    write_tree(tmp_path / "src", files)
    run("fs", "upload", "-r", f"{repo}/", "--source", str(tmp_path / "src")).ok()
    run("commit", repo, "-m", "c").ok()
    run("fs", "upload", f"{repo}/d/staged.txt", "--source", str(tmp_path / "src" / "keep.txt")).ok()
    deleted = run.json("fs", "rm", "-r", f"{repo}/d/")["deleted"]
    assert sorted(deleted) == sorted([*(k for k in files if k.startswith("d/")), "d/staged.txt"])
    assert [r["path"] for r in run.json("fs", "ls", "-r", f"{repo}/")["results"]] == ["keep.txt"]
    run("commit", repo, "-m", "rm").ok()
    assert [r["path"] for r in run.json("fs", "ls", "-r", f"{repo}/")["results"]] == ["keep.txt"]


def test_upload_tree_failures_say_what_was_staged(
    run: InProcess, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakefs_core.cli import fs as fs_cmds
    from lakefs_core.errors import TransientError
    from lakefs_core.repos.objects import Objects

    files = {f"f{i}.txt": b"x" for i in range(7)}
    src = write_tree(tmp_path / "src", files)
    # An unreadable file is found by the walk, before anything is uploaded.
    real_access = os.access
    monkeypatch.setattr(
        fs_cmds.os, "access", lambda p, mode: not str(p).endswith("f4.txt") and real_access(p, mode)
    )
    run("fs", "upload", "-r", f"{repo}/t/", "--source", str(src)).failed(9, "f4.txt", "ermission denied")
    assert run.json("fs", "ls", "-r", f"{repo}/")["results"] == []
    monkeypatch.setattr(fs_cmds.os, "access", real_access)

    # A failure in a later batch: the message says how much is staged already. Batches of 3, 3 and
    # 1, all three in flight at once: the third, already running when the second failed, ran to
    # its end, so 4 objects are staged.
    monkeypatch.setattr(fs_transfer, "BATCH_FILES", 3)
    monkeypatch.setattr(fs_transfer, "UPLOAD_IN_FLIGHT", 3)
    real_upload = Objects.upload_many
    calls = 0

    async def second_batch_fails(self: Objects, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise TransientError("store answered 503 SlowDown")
        return await real_upload(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Objects, "upload_many", second_batch_fails)
    line = run("fs", "upload", "-r", f"{repo}/t/", "--source", str(src)).failed(10, "SlowDown")
    assert "(4 of 7 objects were staged before it; uploading again overwrites them)" in line
    assert len(run.json("fs", "ls", "-r", f"{repo}/")["results"]) == 4


def test_human_output_escapes_control_characters_in_keys(run: InProcess, repo: str, tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"f": b"x"})
    key = "two\nlines\x1b[31m.txt"
    run("fs", "upload", f"{repo}/{key}", "--source", str(src / "f")).ok()
    listed = run("fs", "ls", f"{repo}/").ok().out
    assert listed.count("\n") == 1 and "two\\nlines\\x1b[31m.txt" in listed and "\x1b" not in listed
    assert run.json("fs", "ls", f"{repo}/")["results"][0]["path"] == key  # JSON keeps the key exact
    diff = run("diff", repo).ok().out
    assert "two\\nlines" in diff and "\x1b" not in diff
    deleted = run("fs", "rm", f"{repo}/{key}").ok().out
    assert "\x1b" not in deleted


def test_upload_progress_bar_on_a_terminal_only(run: InProcess, tmp_path: Path) -> None:
    """With stderr on a terminal, `upload -r` draws a progress bar; with --no-progress (or without a
    terminal) it draws nothing and never loads tqdm (the startup-imports test checks that)."""
    import fcntl
    import pty
    import struct
    import termios

    from tests.cli.helpers import REPO

    src = write_tree(tmp_path / "src", {f"f{i}.txt": b"x" * 100 for i in range(3)})
    env = user_env(tmp_path / "home", PYTHONPATH=str(REPO))  # ``run``'s user, who creates the repo
    cmd = [sys.executable, "-m", "lakefs_core.cli"]
    run("repo", "create", "lakefs://bar", f"local://{tmp_path / 'ns'}").ok()

    def upload(dest: str, *flags: str) -> str:
        primary, secondary = pty.openpty()
        # a new terminal is 0 columns wide, and tqdm draws nothing into that
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        try:
            proc = subprocess.run(
                [*cmd, "fs", "upload", "-r", "-s", str(src), dest, *flags],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=secondary,
                timeout=scaled(120),
                check=True,
            )
            assert proc.returncode == 0
            os.close(secondary)
            out = b""
            with contextlib.suppress(OSError):  # EIO once the writer side is closed and drained
                while chunk := os.read(primary, 65536):
                    out += chunk
            return out.decode(errors="replace")
        finally:
            os.close(primary)

    drawn = upload("lakefs://bar/main/a/")
    # drawn at its start (bytes of the total) and erased at its end; updates in between are
    # rate-limited by tqdm, so a 3-file upload may show none of them
    assert "upload 3 objects" in drawn and "/300" in drawn, drawn
    assert upload("lakefs://bar/main/b/", "--no-progress") == ""

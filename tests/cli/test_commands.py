"""Repository commands called in-process (``lakefs_core.cli.main``): text output, options, cleanup,
bounded upload concurrency, pagination. The user's dirs point at tmp; no config means the embedded
default (SQLite under ``$XDG_DATA_HOME``)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.block.local import LocalBlockStore
from lakefs_core.cli import fs as fs_module
from lakefs_core.coreconfig import default_kv_url
from lakefs_core.errors import NoChangesError
from lakefs_core.kv import open_kv
from lakefs_core.refs.staging import StagingArea
from lakefs_core.refs.store import RefStore
from tests.cli.helpers import REPO, InProcess, user_env, write_tree
from tests.support.timing import scaled

ID = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture
def demo(run: InProcess, tmp_path: Path) -> Path:
    """Repository ``demo`` with one commit holding a.txt, dir/b.txt, dir/c.txt."""
    ns = tmp_path / "ns"
    run("repo", "create", "lakefs://demo", f"local://{ns}").ok()
    src = write_tree(tmp_path / "src", {"a.txt": b"a\n", "dir/b.txt": b"b\n", "dir/c.txt": b"c\n"})
    run("fs", "upload", "lakefs://demo/main/", "-s", str(src), "-r").ok()
    run("commit", "lakefs://demo/main", "-m", "first line\nsecond line", "--meta", "k=v").ok()
    return ns


def pending_tokens() -> list[str]:
    async def scan() -> list[str]:
        kv = await open_kv(default_kv_url())
        try:
            return [t async for t, _ in RefStore(kv).pending_cleanup()]
        finally:
            await kv.close()

    return asyncio.run(scan())


def test_text_output_looks_like_lakectl(run: InProcess, demo: Path, tmp_path: Path) -> None:
    log = run("log", "lakefs://demo/main").ok().out
    blocks = log.strip("\n").split("\n\nID:")
    assert len(blocks) == 2
    first = log.splitlines()
    assert first[0] == "" and re.match(r"^ID:            [0-9a-f]{64}$", first[1])
    assert first[2] == "Author:        tester"
    assert re.match(r"^Date:          \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC$", first[3])
    assert first[4:8] == ["", "    first line", "    second line", "        k = v"]
    assert "    Repository created" in log

    (tmp_path / "x").write_text("changed\n")
    run("fs", "upload", "lakefs://demo/main/a.txt", "-s", "x").ok()
    run("fs", "upload", "lakefs://demo/main/dir/new.txt", "-s", "x").ok()
    run("fs", "rm", "lakefs://demo/main/dir/b.txt").ok()
    diff = run("diff", "lakefs://demo/main").ok().out.splitlines()
    assert diff == [
        "Ref: lakefs://demo/main",
        "",
        "~ changed a.txt",
        "- removed dir/b.txt",
        "+ added dir/new.txt",
    ]

    ls = [line.split() for line in run("fs", "ls", "lakefs://demo/main/").ok().out.splitlines()]
    assert [(r[0], r[-1]) for r in ls] == [("object", "a.txt"), ("common_prefix", "dir/")]
    assert ls[0][3:7] == ["+0000", "UTC", "8", "B"]  # date, time, zone, size, unit
    nested = [line.split()[-1] for line in run("fs", "ls", "lakefs://demo/main/dir/n").ok().out.splitlines()]
    assert nested == ["new.txt"]  # lakectl trims the prefix up to its last '/'

    stat = run("fs", "stat", "lakefs://demo/main/a.txt").ok().out.splitlines()
    assert stat[0] == "Path: a.txt" and "Size: 8 bytes" in stat and "Human Size: 8 B" in stat
    assert any(line.startswith("Physical Address: data/") for line in stat)

    commit = run("commit", "lakefs://demo/main", "-m", "second").ok().out.splitlines()
    assert commit[:3] == ["Branch: lakefs://demo/main", 'Commit for branch "main" completed.', ""]
    assert commit[3].startswith("ID: ") and commit[4] == "Message: second"

    branches = run("branch", "list", "lakefs://demo").ok().out.splitlines()
    assert branches[0].split() == ["Branch", "Commit", "ID"] and branches[1].split()[0] == "main"
    assert (
        run("tag", "create", "lakefs://demo/v1", "lakefs://demo/main").ok().out.startswith("Created tag 'v1'")
    )
    assert run("tag", "list", "lakefs://demo").ok().out.splitlines()[1].split()[0] == "v1"
    show = run("show", "commit", "lakefs://demo/v1").ok().out
    assert "Meta Range ID: " in show and "    second" in show
    assert run("repo", "list").ok().out.splitlines()[1].split()[0] == "demo"


def test_json_global_and_per_command(run: InProcess, demo: Path) -> None:
    globally = run("--json", "log", "lakefs://demo/main").json()
    per_command = run("log", "lakefs://demo/main", "--json").json()
    assert globally == per_command
    first = globally["results"][0]
    assert ID.match(first["id"]) and first["committer"] == "tester" and first["metadata"] == {"k": "v"}
    assert isinstance(first["creation_date"], int)
    assert run("log", "lakefs://demo/main", "--amount", "1", "--json").json()["results"] == [first]
    # Every output is exactly one JSON document.
    for args in (["tag", "list", "lakefs://demo"], ["diff", "lakefs://demo/main"], ["repo", "list"]):
        json.loads(run(*args, "--json").ok().out)


def test_cat_stdin_upload_and_json_cat(run: InProcess, demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\xff\x00 from stdin"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    stat = run("fs", "upload", "lakefs://demo/main/bin", "-s", "-", "--json").json()
    assert stat["size_bytes"] == len(data) and stat["path_type"] == "object"
    assert run("fs", "cat", "lakefs://demo/main/bin", "--json").json() == {
        "path": "bin",
        "size_bytes": len(data),
        "encoding": "base64",
        "content": base64.b64encode(data).decode(),
    }
    assert run("fs", "cat", "lakefs://demo/main/a.txt", "--json").json()["content"] == "a\n"


def test_rm_recursive_reset_revert_and_delete(run: InProcess, demo: Path) -> None:
    assert run("fs", "rm", "lakefs://demo/main/dir", "-r", "--json").json() == {
        "deleted": ["dir/b.txt", "dir/c.txt"]
    }
    assert [o["path"] for o in run("fs", "ls", "lakefs://demo/main/", "-r", "--json").json()["results"]] == [
        "a.txt"
    ]
    reset = run("branch", "reset", "lakefs://demo/main", "--yes", "--json").json()
    assert reset["id"] == "main"
    assert len(run("fs", "ls", "lakefs://demo/main/", "-r", "--json").json()["results"]) == 3

    run("fs", "rm", "lakefs://demo/main/a.txt").ok()
    removed = run("commit", "lakefs://demo/main", "-m", "rm a", "--json").json()
    reverted = run("branch", "revert", "lakefs://demo/main", removed["id"], "--json").json()
    assert reverted["parents"] == [removed["id"]] and reverted["message"] == f"Revert {removed['id']}"
    assert run("fs", "cat", "lakefs://demo/main/a.txt").ok().raw == b"a\n"
    again = run("branch", "revert", "lakefs://demo/main", "lakefs://demo/main", "--json").json()
    assert again["parents"] == [reverted["id"]]
    empty = run("commit", "lakefs://demo/main", "-m", "nothing", "--allow-empty", "--json").json()
    run("branch", "revert", "lakefs://demo/main", empty["id"]).failed(NoChangesError.exit_code, "nothing")
    run("branch", "revert", "lakefs://demo/main", empty["id"], "--allow-empty").ok()

    run("branch", "create", "lakefs://demo/tmp", "-s", "lakefs://demo/main").ok()
    run("fs", "rm", "lakefs://demo/tmp/dir/b.txt").ok()
    assert run("branch", "delete", "lakefs://demo/tmp", "-y", "--json").json()["deleted"] == "tmp"
    assert [b["id"] for b in run("branch", "list", "lakefs://demo", "--json").json()["results"]] == ["main"]
    run("tag", "create", "lakefs://demo/t1", "lakefs://demo/main").ok()
    run("tag", "delete", "lakefs://demo/t1", "--yes").ok()
    assert run("tag", "list", "lakefs://demo", "--json").json() == {"results": []}
    assert run("repo", "delete", "lakefs://demo", "--yes", "--json").json() == {"deleted": "demo"}
    assert run("repo", "list", "--json").json() == {"results": []}


def test_destructive_commands_refuse_without_a_terminal_and_yes(run: InProcess, demo: Path) -> None:
    # pytest's standard input is no terminal: nothing to ask on, so every one refuses (exit 19,
    # not 130, which is Ctrl-C), naming --yes, and changes nothing
    run("tag", "create", "lakefs://demo/t1", "lakefs://demo/main").ok()
    run("branch", "create", "lakefs://demo/tmp", "-s", "lakefs://demo/main").ok()
    for args in (
        ("repo", "delete", "lakefs://demo"),
        ("branch", "delete", "lakefs://demo/tmp"),
        ("branch", "reset", "lakefs://demo/tmp"),
        ("tag", "delete", "lakefs://demo/t1"),
        ("auth", "users", "delete", "--id", "nobody"),
        ("auth", "groups", "delete", "--id", "nobody"),
        ("auth", "policies", "delete", "--id", "nobody"),
        ("auth", "credentials", "delete", "--id", "nobody", "--access-key-id", "AKIA"),
    ):
        run(*args).failed(19, "--yes", "not confirmed (no terminal to ask on)")
    assert run("tag", "list", "lakefs://demo", "--json").json()["results"][0]["id"] == "t1"
    assert len(run("branch", "list", "lakefs://demo", "--json").json()["results"]) == 2


def _on_a_terminal(tmp_path: Path, answer: bytes, *args: str) -> tuple[int, str]:
    """``lakefs-core ARGS`` in a real process whose standard input is a pseudo-terminal."""
    leader, follower = pty.openpty()
    env = user_env(tmp_path / "home", PYTHONPATH=str(REPO))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lakefs_core.cli", *args],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        os.write(leader, answer)
        _, err = proc.communicate(timeout=scaled(120))
    finally:
        os.close(leader)
        os.close(follower)
    return proc.returncode, err.decode()


def test_a_terminal_is_asked_and_no_changes_nothing(run: InProcess, demo: Path, tmp_path: Path) -> None:
    code, err = _on_a_terminal(tmp_path, b"n\n", "repo", "delete", "lakefs://demo")
    assert code == 19 and "Delete repository 'demo'? [y/N]" in err and "nothing changed" in err, err
    code, err = _on_a_terminal(tmp_path, b"y\n", "repo", "delete", "lakefs://demo")
    assert code == 0, err
    assert run("repo", "list", "--json").json() == {"results": []}


def test_cleanup_step_drops_tokens_after_grace(
    run: InProcess, demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marked = pending_tokens()
    assert marked  # the fixture's commit marked its sealed token; 30 s grace keeps it
    monkeypatch.setenv("LAKEFS_CORE__CLEANUP_GRACE_SECONDS", "0")
    run("fs", "rm", "lakefs://demo/main/a.txt").ok()
    run("commit", "lakefs://demo/main", "-m", "rm").ok()
    assert pending_tokens() == []  # earlier marks and this commit's own are dropped

    async def staged(token: str) -> bool:
        kv = await open_kv(default_kv_url())
        try:
            return not await StagingArea(kv).is_empty(token)
        finally:
            await kv.close()

    assert not any(asyncio.run(staged(t)) for t in marked)
    monkeypatch.setenv("LAKEFS_CORE__CLEANUP_LIMIT", "0")  # disabled: marks stay
    run("fs", "rm", "lakefs://demo/main/dir/b.txt").ok()
    run("branch", "reset", "lakefs://demo/main", "-y").ok()
    assert len(pending_tokens()) == 1


def test_recursive_upload_concurrency_is_bounded(
    run: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("repo", "create", "lakefs://many", f"local://{tmp_path / 'ns'}").ok()
    src = write_tree(tmp_path / "many", {f"f{i:03}": str(i).encode() for i in range(200)})
    # Uploads of a tree are batched (Objects.upload_many -> LocalBlockStore.put_batch): the bound
    # applies to the worker threads writing hops of small files.
    real_hop = LocalBlockStore._put_hop
    lock = threading.Lock()
    in_flight = peak = 0

    def tracking(self: LocalBlockStore, *args: Any, **kwargs: Any) -> None:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        try:
            time.sleep(0.02)
            real_hop(self, *args, **kwargs)
        finally:
            with lock:
                in_flight -= 1

    monkeypatch.setattr(LocalBlockStore, "_put_hop", tracking)
    monkeypatch.setenv("LAKEFS_CORE__UPLOAD_CONCURRENCY", "3")
    done = run(
        "fs", "upload", "lakefs://many/main/in", "-s", str(src), "-r", "--no-progress", "--json"
    ).json()
    assert done["count"] == 200 and peak == 3
    assert [o["path"] for o in done["results"]] == [f"in/f{i:03}" for i in range(200)]
    assert run("fs", "cat", "lakefs://many/main/in/f123").out == "123"


def test_ls_fetches_every_page(run: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run("repo", "create", "lakefs://pages", f"local://{tmp_path / 'ns'}").ok()
    names = [f"p/{i}.txt" for i in range(5)] + [f"p/d{i}/x" for i in range(3)] + ["p/e/y", "q"]
    src = write_tree(tmp_path / "tree", {n: b"." for n in names})
    run("fs", "upload", "lakefs://pages/main/", "-s", str(src), "-r").ok()
    monkeypatch.setattr(fs_module, "LIST_PAGE", 2)
    flat = run("fs", "ls", "lakefs://pages/main/p/", "--json").json()["results"]
    assert [(i["path_type"], i["path"]) for i in flat] == [("object", f"p/{i}.txt") for i in range(5)] + [
        ("common_prefix", f"p/d{i}/") for i in range(3)
    ] + [("common_prefix", "p/e/")]
    deep = run("fs", "ls", "lakefs://pages/main/", "-r", "--json").json()["results"]
    assert [i["path"] for i in deep] == sorted(names)


def test_cherry_pick(run: InProcess, demo: Path, tmp_path: Path) -> None:
    run("branch", "create", "lakefs://demo/dev", "-s", "lakefs://demo/main").ok()
    (tmp_path / "n.txt").write_bytes(b"n\n")
    run("fs", "upload", "lakefs://demo/dev/new.txt", "-s", str(tmp_path / "n.txt")).ok()
    picked = run.json("commit", "lakefs://demo/dev", "-m", "add new", "--meta", "why=test")
    made = run.json("cherry-pick", "lakefs://demo/dev", "lakefs://demo/main")
    assert made["message"] == "add new" and made["metadata"]["cherry-pick-origin"] == picked["id"]
    assert made["metadata"]["why"] == "test"
    assert run("fs", "cat", "lakefs://demo/main/new.txt").ok().out == "n\n"
    run("cherry-pick", "lakefs://demo/dev", "lakefs://other/main").failed(9, "BRANCH")
    run("cherry-pick", "lakefs://demo/dev", "lakefs://demo/main").failed(13)


def test_annotate_names_the_last_commit_that_changed_each_object(
    run: InProcess, demo: Path, tmp_path: Path
) -> None:
    # demo: one commit with a.txt, dir/b.txt, dir/c.txt; then b changes, then c is deleted
    first = run.json("log", "lakefs://demo/main")["results"][0]["id"]
    (tmp_path / "b2").write_bytes(b"b2\n")
    run("fs", "upload", "lakefs://demo/main/dir/b.txt", "-s", str(tmp_path / "b2")).ok()
    second = run.json("commit", "lakefs://demo/main", "-m", "change b")["id"]
    run("fs", "rm", "lakefs://demo/main/dir/c.txt").ok()
    run("commit", "lakefs://demo/main", "-m", "drop c").ok()
    found = run.json("annotate", "-r", "lakefs://demo/main/")["results"]
    assert {r["path"]: r["commit"]["id"] for r in found} == {"a.txt": first, "dir/b.txt": second}
    assert [r["path"] for r in run.json("annotate", "lakefs://demo/main/")["results"]] == ["a.txt"]
    lines = run("annotate", "lakefs://demo/main~1/dir/").ok().out.splitlines()
    assert [line.split()[0] for line in lines] == [second[:16], first[:16]]  # dir/b.txt, dir/c.txt


def test_branch_reset_of_one_object_or_a_prefix(run: InProcess, demo: Path, tmp_path: Path) -> None:
    # lakeFS's ResetKey / ResetPrefix: only the named changes are dropped, the others stay staged
    (tmp_path / "x").write_bytes(b"changed\n")
    run("fs", "upload", "lakefs://demo/main/a.txt", "-s", str(tmp_path / "x")).ok()
    run("fs", "upload", "lakefs://demo/main/dir/new.txt", "-s", str(tmp_path / "x")).ok()
    run("fs", "rm", "lakefs://demo/main/dir/c.txt").ok()

    def changed() -> dict[str, str]:
        return {d["path"]: d["type"] for d in run.json("diff", "lakefs://demo/main")["results"]}

    assert changed() == {"a.txt": "changed", "dir/new.txt": "added", "dir/c.txt": "removed"}
    done = run.json("branch", "reset", "lakefs://demo/main", "--object", "a.txt", "--yes")
    assert done["reset"] == ["a.txt"]
    assert run("fs", "cat", "lakefs://demo/main/a.txt").ok().out == "a\n"
    assert changed() == {"dir/new.txt": "added", "dir/c.txt": "removed"}
    assert run.json("branch", "reset", "lakefs://demo/main", "--prefix", "dir/", "-y")["reset"] == [
        "dir/c.txt",
        "dir/new.txt",
    ]
    assert changed() == {} and run("fs", "cat", "lakefs://demo/main/dir/c.txt").ok().out == "c\n"
    run("branch", "reset", "lakefs://demo/main", "--prefix", "a", "--object", "a.txt", "-y").failed(
        9, "not both"
    )
    run("branch", "reset", "lakefs://demo/main", "--prefix", "dir/").failed(19, "--yes")


def test_update_metadata_replaces_user_metadata_in_place(run: InProcess, demo: Path) -> None:
    before = run.json("fs", "stat", "lakefs://demo/main/a.txt")
    after = run.json(
        "fs", "update-metadata", "lakefs://demo/main/a.txt", "--metadata", "Owner=ann", "--metadata", "k=v"
    )
    assert after["metadata"] == {"owner": "ann", "k": "v"}
    same = ("physical_address", "checksum", "size_bytes", "mtime", "content_type")
    assert {k: after[k] for k in same} == {k: before[k] for k in same}  # the same object, new metadata
    assert [d["path"] for d in run.json("diff", "lakefs://demo/main")["results"]] == ["a.txt"]
    assert run("fs", "cat", "lakefs://demo/main/a.txt").ok().out == "a\n"
    # again, now that the live staging token holds the key (the conditional batch's path)
    again = run.json("fs", "update-metadata", "lakefs://demo/main/a.txt", "--metadata", "k=w")
    assert again["metadata"] == {"k": "w"} and again["physical_address"] == before["physical_address"]
    run("fs", "update-metadata", "lakefs://demo/main/a.txt", "--metadata", "bad").failed(9, "--metadata")
    run("fs", "update-metadata", "lakefs://demo/main/nope.txt", "--metadata", "k=v").failed(2)
    run("tag", "create", "lakefs://demo/t1", "lakefs://demo/main").ok()
    run("fs", "update-metadata", "lakefs://demo/t1/a.txt", "--metadata", "k=v").failed(
        2, "branch 't1' not found"
    )
    run("fs", "update-metadata", "lakefs://demo/main~1/a.txt", "--metadata", "k=v").failed(9, "PATH")

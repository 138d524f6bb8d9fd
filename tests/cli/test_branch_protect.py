"""``lakefs-core branch-protect add|list|delete`` and ``repo create-bare``, in-process against the
embedded default (SQLite): a protected branch refuses uploads and commits with lakeFS's message and
exit code 24, other branches do not, and merging into it works (as lakeFS)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.helpers import InProcess


def test_protected_branches_refuse_writes_with_lakefs_message(run: InProcess, tmp_path: Path) -> None:
    run("repo", "create", "lakefs://prot", f"local://{tmp_path / 'ns'}").ok()
    src = tmp_path / "f.txt"
    src.write_bytes(b"f\n")
    run("fs", "upload", "lakefs://prot/main/f.txt", "-s", str(src)).ok()
    run("commit", "lakefs://prot/main", "-m", "seed").ok()
    run("branch", "create", "lakefs://prot/dev", "-s", "lakefs://prot/main").ok()
    run("branch", "create", "lakefs://prot/release-1", "-s", "lakefs://prot/main").ok()
    run("fs", "upload", "lakefs://prot/main/staged.txt", "-s", str(src)).ok()  # staged before the rule

    assert run("branch-protect", "add", "lakefs://prot", "main").ok().out.startswith("Added")
    run("branch-protect", "add", "lakefs://prot", "release-*").ok()
    run("branch-protect", "add", "lakefs://prot", "main").failed(3, "already has a rule")
    run("branch-protect", "add", "lakefs://prot", "bad[").failed(9, "pattern")
    assert run.json("branch-protect", "list", "lakefs://prot")["results"] == [
        {"pattern": "main"},
        {"pattern": "release-*"},
    ]
    assert "release-*" in run("branch-protect", "list", "lakefs://prot").ok().out

    stored = sorted((tmp_path / "ns").rglob("*"))
    write = "cannot write to protected branch: branch 'main' of repository 'prot' matches rule 'main'"
    run("fs", "upload", "lakefs://prot/main/g.txt", "-s", str(src)).failed(24, write)
    run("fs", "upload", "lakefs://prot/release-1/g.txt", "-s", str(src)).failed(24, "rule 'release-*'")
    run("fs", "rm", "lakefs://prot/main/f.txt").failed(24, "cannot write to protected branch")
    run("commit", "lakefs://prot/main", "-m", "x").failed(24, "cannot commit to protected branch")
    assert sorted((tmp_path / "ns").rglob("*")) == stored  # refused before any byte was written

    run("fs", "upload", "lakefs://prot/dev/g.txt", "-s", str(src)).ok()  # other branches unaffected
    run("commit", "lakefs://prot/dev", "-m", "g").ok()
    run("branch", "reset", "lakefs://prot/main", "--yes").failed(24, "cannot write to protected branch")

    run("branch-protect", "delete", "lakefs://prot", "main").failed(19, "--yes")
    run("branch-protect", "delete", "lakefs://prot", "nope", "--yes").failed(2, "'nope' not found")
    run("branch-protect", "delete", "lakefs://prot", "main", "--yes").ok()
    run("commit", "lakefs://prot/main", "-m", "now allowed").ok()
    run("merge", "lakefs://prot/dev", "lakefs://prot/main").ok()
    run("branch-protect", "add", "lakefs://prot", "ma*").ok()
    run("merge", "lakefs://prot/main", "lakefs://prot/release-1").ok()  # merging into a protected branch
    assert run("fs", "cat", "lakefs://prot/release-1/g.txt").ok().out == "f\n"


def test_create_bare_makes_a_repository_without_commits(run: InProcess, tmp_path: Path) -> None:
    ns = tmp_path / "bare"
    made = run.json("repo", "create-bare", "lakefs://bare", f"local://{ns}", "-d", "trunk")
    assert made["id"] == "bare" and made["default_branch"] == "trunk"
    assert not (ns / "_lakefs").exists()  # lakeFS's plumbing call writes no marker
    assert run.json("branch", "list", "lakefs://bare")["results"] == []
    no_commits = "repository 'bare' has no commits: its default branch 'trunk' does not exist"
    run("log", "lakefs://bare/trunk").failed(2, no_commits)
    run("fs", "ls", "lakefs://bare/trunk/").failed(2, no_commits)
    run("repo", "create-bare", "lakefs://bare2", f"local://{ns}").failed(15)  # the namespace is claimed
    run("branch-protect", "add", "lakefs://bare", "trunk").ok()  # rules need no commit
    run("repo", "delete", "lakefs://bare", "--yes").ok()  # its settings go with it
    run("repo", "create-bare", "lakefs://bare", f"local://{ns}").ok()  # no marker left behind
    assert run.json("branch-protect", "list", "lakefs://bare")["results"] == []
    assert (
        "created (bare)"
        in run("repo", "create-bare", "lakefs://bare3", f"local://{tmp_path / 'b3'}").ok().out
    )

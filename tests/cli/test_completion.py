"""Shell completion (issue 38): click's machinery completes commands and options of every CLI, and
``lakefs-core`` completes ``lakefs://`` repositories, refs and paths from its KV store, in bash,
zsh and fish, as the shell calls it (a real process with ``_LAKEFS_CORE_COMPLETE`` set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import REPO, InProcess, user_env, write_tree
from tests.support.timing import scaled


@pytest.fixture
def tree(run: InProcess, tmp_path: Path) -> Path:
    run("repo", "create", "lakefs://comp", f"local://{tmp_path / 'ns'}").ok()
    run("repo", "create", "lakefs://other", f"local://{tmp_path / 'ns2'}").ok()
    src = write_tree(
        tmp_path / "src", {"d/part-1.csv": b"1", "d/part-2.csv": b"2", "d/sub/x": b"x", "top": b"t"}
    )
    run("fs", "upload", "-r", "-s", str(src), "lakefs://comp/main/").ok()
    run("commit", "lakefs://comp/main", "-m", "c").ok()
    run("tag", "create", "lakefs://comp/v1", "lakefs://comp/main").ok()
    return tmp_path


def complete(home: Path, shell: str, words: str, *, prog: str = "lakefs-core") -> list[str]:
    """What the shell's completion function receives for the last of ``words``."""
    var = f"_{prog.upper().replace('-', '_')}_COMPLETE"
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    env = user_env(home / "home", PYTHONPATH=str(REPO), COMP_WORDS=words, COMP_CWORD=cword)
    env[var] = f"{shell}_complete"
    if shell == "fish":  # fish passes the command line and the current token instead
        env["COMP_WORDS"], env["COMP_CWORD"] = (
            words,
            "" if words.endswith(" ") else words.rsplit(maxsplit=1)[-1],
        )
    module = {"lakefs-core": "lakefs_core.cli", "lakefs-gc": "lakefs_gc.cli"}[prog]
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; from {module} import main; sys.exit(main())"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line]
    if shell == "bash":
        return [line.split(",", 1)[1] for line in lines]
    if shell == "zsh":  # type, value, help: three lines each
        lines = proc.stdout.splitlines()
        return [lines[i + 1] for i in range(0, len(lines) - 2, 3)]
    return [line.split(",", 1)[1].split("\t")[0] for line in lines]


def test_commands_and_options_complete(tmp_path: Path) -> None:
    assert complete(tmp_path, "bash", "lakefs-core br") == ["branch", "branch-protect"]
    assert "--recursive" in complete(tmp_path, "zsh", "lakefs-core fs ls --")


def test_lakefs_uris_complete_from_the_kv_store(tree: Path) -> None:
    # each shell once (their protocols differ), then the kinds of value through bash
    for shell in ("bash", "zsh", "fish"):
        assert complete(tree, shell, "lakefs-core fs ls lakefs://comp/") == [
            "lakefs://comp/main/",
            "lakefs://comp/v1/",
        ]
    assert complete(tree, "bash", "lakefs-core fs ls lakefs://comp/main/d/") == [
        "lakefs://comp/main/d/part-1.csv",
        "lakefs://comp/main/d/part-2.csv",
        "lakefs://comp/main/d/sub/",
    ]
    # a repository argument: repositories only; a branch argument: branches only, without a path
    assert complete(tree, "bash", "lakefs-core branch list lakefs://") == ["lakefs://comp", "lakefs://other"]
    assert complete(tree, "bash", "lakefs-core branch delete lakefs://comp/") == ["lakefs://comp/main"]
    # an unknown repository completes nothing, and fails nothing
    assert complete(tree, "bash", "lakefs-core fs ls lakefs://nosuch/") == []

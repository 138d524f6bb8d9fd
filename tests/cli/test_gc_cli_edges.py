"""``lakefs-gc``'s rough edges a newcomer hit (issue 38), in-process on the embedded default.

- ``sweep --mark-id`` of a mark the repository never had says there is no such mark (exit 2), and
  an id that cannot be a run id is refused naming ``--mark-id`` (exit 9), never "has no summary";
- ``sweep --dry-run`` of a swept mark says it was swept and when (exit 0), deleting nothing;
- ``lakefs-gc run`` and ``lakefs-mirror run`` without ``--config`` say so first (exit 9).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakefs_gc.cli import main as gc_main
from lakefs_mirror.cli import main as mirror_main
from tests.cli.helpers import InProcess, write_tree


@pytest.fixture
def repo(run: InProcess, tmp_path: Path) -> str:
    run("repo", "create", "lakefs://edges", f"local://{tmp_path / 'ns'}").ok()
    src = write_tree(tmp_path / "src", {"a.txt": b"a\n"})
    run("fs", "upload", "lakefs://edges/main/", "-s", str(src), "-r").ok()
    run("commit", "lakefs://edges/main", "-m", "one").ok()
    return "lakefs://edges"


def gc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = gc_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_sweep_of_an_unknown_mark_says_no_such_mark(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gc(capsys, "sweep", repo, "--mark-id", "20260101T000000000Z-0123456789abcdef")
    assert code == 2 and "no such mark '20260101T000000000Z-0123456789abcdef'" in err, err
    assert "summary" not in err and err.count("\n") == 1
    code, _, err = gc(capsys, "sweep", repo, "--mark-id", "../x")
    assert code == 9 and err.startswith("lakefs-gc: --mark-id: '../x' is not a GC run id"), err


def test_dry_run_of_a_swept_mark_says_when(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = gc(capsys, "mark", repo, "--lite", "--sweep", "--min-age", "0s")
    assert code == 0, err
    done = json.loads(out)
    mark_id, swept_at = done["mark"]["run_id"], done["sweep"]["end_time"]
    code, out, err = gc(capsys, "sweep", repo, "--mark-id", mark_id, "--dry-run")
    assert code == 0, err
    assert f"mark {mark_id} of 'edges' was swept at {swept_at}" in err, err
    shown = json.loads(out)
    assert shown["swept"] is True and shown["sweep"]["end_time"] == swept_at and not shown["sweep"]["dry_run"]


def test_run_without_config_says_so(run: InProcess, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = gc(capsys, "run")
    assert code == 9 and err.startswith("lakefs-gc: --config: no configuration file given (--config FILE"), (
        err
    )
    capsys.readouterr()
    assert mirror_main(["run"]) == 9
    assert (
        "--config: no configuration file given (--config FILE or LAKEFS_MIRROR_CONFIG)"
        in capsys.readouterr().err
    )

"""``lakefs-gc purge`` (dry run by default, then with --yes) and ``lakefs-core fs cat`` of the purged
object: exit 17, the message naming the audit record."""

from __future__ import annotations

import json
from pathlib import Path

from lakefs_gc.cli import main as gc_main
from tests.cli.helpers import InProcess


def test_cli_purge_and_cat_exit_17(tmp_path: Path, run: InProcess) -> None:
    run("repo", "create", "lakefs://rp2", f"local://{tmp_path / 'ns2'}").ok()
    src = tmp_path / "f.txt"
    src.write_bytes(b"secret")
    run("fs", "upload", "lakefs://rp2/main/f.txt", "--source", str(src)).ok()
    run("commit", "lakefs://rp2/main", "-m", "one").ok()
    capsys = run.capsys
    capsys.readouterr()
    assert gc_main(["purge", "lakefs://rp2/main/f.txt", "--reason", "erase"]) == 0  # a dry run
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] is True and len(dry["addresses"]) == 1
    assert run("fs", "cat", "lakefs://rp2/main/f.txt").ok().raw == b"secret"
    assert gc_main(["purge", "lakefs://rp2/main/f.txt", "--reason", "erase", "--yes"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["audit_id"] and done["deleted"] == 1
    cat = run("fs", "cat", "lakefs://rp2/main/f.txt")
    assert cat.returncode == 17 and done["audit_id"] in cat.err and "purged" in cat.err

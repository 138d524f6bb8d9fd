"""``lakefs-core doctor`` (one verdict per check, the first failure's exit code) and ``lakefs-core
config`` (writes the file owner-only after validating it; ``--show`` masks secrets), in-process on
the embedded default (issue 38)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.cli.helpers import InProcess


def verdicts(out: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in out.splitlines()}


def test_doctor_on_a_working_setup(run: InProcess, tmp_path: Path) -> None:
    assert verdicts(run("doctor").ok().out) == {
        "configuration": "ok",
        "kv": "ok",
        "store": "skipped",  # no repository yet
        "credentials": "skipped",  # no s3:// namespace to try them on
    }
    run("repo", "create", "lakefs://doc", f"local://{tmp_path / 'ns'}").ok()
    checks = {c["check"]: c for c in run("--json", "doctor").json()["checks"]}
    assert checks["store"]["status"] == "ok" and checks["kv"]["detail"].endswith(": 1 repository")


def test_doctor_fails_an_unreadable_namespace(run: InProcess, tmp_path: Path) -> None:
    run("repo", "create", "lakefs://doc", f"local://{tmp_path / 'ns'}").ok()
    marker = tmp_path / "ns" / "_lakefs" / "dummy"
    marker.unlink()
    marker.symlink_to(tmp_path)  # the store never reads through a link: the store check fails
    result = run("doctor")
    assert result.returncode == 9, result.out
    assert verdicts(result.out)["store"] == "FAIL" and "repository 'doc'" in result.out


def test_doctor_stops_at_the_kv_or_the_configuration(
    run: InProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAKEFS_CORE__KV_URL", f"sqlite:///{tmp_path}/missing/kv.sqlite3")
    result = run("doctor")
    assert result.returncode == 16 and verdicts(result.out) == {
        "configuration": "ok",
        "kv": "FAIL",
        "store": "skipped",
        "credentials": "skipped",
    }
    monkeypatch.setenv("LAKEFS_CORE__UPLOAD_CONCURRENCY", "0")
    result = run("doctor")
    assert result.returncode == 9 and verdicts(result.out)["configuration"] == "FAIL"


def test_config_writes_validates_and_shows(run: InProcess, tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "core.yaml"
    run(
        "--config", str(path), "config", "--committer", "alice", "--kv-url", f"sqlite:///{tmp_path}/kv.db"
    ).ok()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    shown = json.loads(run("--config", str(path), "config", "--show").ok().out)
    assert shown["config_file"] == str(path) and shown["config"]["committer"] == "alice"
    assert shown["config"]["kv_url"] == f"sqlite:///{tmp_path}/kv.db"
    run("--config", str(path), "config", "--committer", "").ok()  # '' removes the key
    assert "committer" not in path.read_text()
    # a value the schema refuses: nothing written
    before = path.read_bytes()
    run("--config", str(path), "config", "--s3-endpoint-url", "not a url").failed(9, "s3.endpoint_url")
    assert path.read_bytes() == before
    # no terminal and no option: there is nothing to ask on
    result = run("--config", str(path), "config")
    assert result.returncode == 64 and "no terminal to ask on" in result.err

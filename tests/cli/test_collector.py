"""A ``lakefs-core`` process starts up without cyclic collections (:mod:`lakefs_core.service.collector`).

Each probe runs a command in a fresh interpreter, as the process entry point does or as ``main()``
in-process does, and reports the collections that ran before its session was open (start-up ones;
a command without a session: during the whole command) and the collector's state after it.
Counts of collections, never timings.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.service import collector
from tests.cli.helpers import InProcess, run_probe

_PROBE = """
import gc, json, sys
from lakefs_core import cli
from lakefs_core.cli import context
opened = []  # a session was opened: start-up is over
context.Session.__post_init__ = lambda self: opened.append(True)
startup = []
def seen(phase, info):
    if phase == "start" and not opened:
        startup.append(info["generation"])
gc.callbacks.append(seen)  # from the entry point on (importing the package itself collects a little)
report, entry, args = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv[1:] = args
code = cli.process_main() if entry == "process" else cli.main(args)
with open(report, "w") as out:
    json.dump({
        "code": code,
        "startup_collections": startup,
        "enabled": gc.isenabled(),
        "threshold": gc.get_threshold(),
        "frozen": gc.get_freeze_count(),
    }, out)
"""


def probe(tmp_path: Path, entry: str, *args: str, **env: str) -> dict[str, Any]:
    return run_probe(tmp_path, _PROBE, entry, *args, **env)


@pytest.fixture
def repo_uri(tmp_path: Path) -> str:
    uri = "lakefs://collector"
    created = probe(tmp_path, "main", "repo", "create", uri, f"local://{tmp_path / 'ns'}")
    assert created["code"] == 0
    return uri


def test_the_process_entry_point_starts_up_without_collections(tmp_path: Path, repo_uri: str) -> None:
    (tmp_path / "f").write_bytes(b"data")
    upload = ("fs", "upload", "-s", str(tmp_path / "f"), f"{repo_uri}/main/f")
    # the control: the same command through main() collects during its start-up
    control = probe(tmp_path, "main", *upload)
    assert control["code"] == 0 and control["frozen"] == 0
    assert len(control["startup_collections"]) > 10, control
    assert control["threshold"][0] == 700 and control["enabled"]

    result = probe(tmp_path, "process", *upload)
    assert result["code"] == 0
    assert result["startup_collections"] == []
    # start-up's objects are frozen (the command's modules alone make tens of thousands), and the
    # collector runs again, with a larger first generation
    assert result["frozen"] > 20_000
    assert result["enabled"] and result["threshold"][0] == collector.FIRST_GENERATION


def test_a_command_without_a_session_collects_once_it_is_loaded(tmp_path: Path) -> None:
    result = probe(tmp_path, "process", "check-config")
    assert result["code"] == 0
    assert result["startup_collections"] == []
    assert result["enabled"] and result["frozen"] > 0


def test_a_session_that_fails_to_open_leaves_the_collector_on(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "kv.sqlite3"
    result = probe(tmp_path, "process", "repo", "list", LAKEFS_CORE__KV_URL=f"sqlite:///{missing}")
    assert result["code"] != 0  # the directory does not exist: a StartupError
    assert result["enabled"] and result["threshold"][0] == collector.FIRST_GENERATION


def test_main_in_process_leaves_the_collector_alone(run: InProcess, tmp_path: Path) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    run("repo", "create", "lakefs://inproc", f"local://{tmp_path / 'ns'}").ok()
    run("repo", "list").ok()
    assert gc.isenabled()
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


@pytest.fixture
def command_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This test process as a command process, its collector restored afterwards."""
    threshold = gc.get_threshold()
    monkeypatch.setattr(collector._State, "command_process", False)
    try:
        collector.command_process()
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        gc.enable()


def test_start_up_resumes_collecting_when_its_block_raises(command_process: None) -> None:
    assert not gc.isenabled()
    collector.started()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector.start_up():
        assert not gc.isenabled()
        raise RuntimeError("opening failed")
    assert gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == collector.FIRST_GENERATION

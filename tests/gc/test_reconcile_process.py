"""Issue 32, items 5 and 6 at the CLI: real ``lakefs-core fs upload`` processes stalled between their
PUT and their staging write (the ``upload:before-stage:stop`` fault point: the process SIGSTOPs
itself there and goes on when the test sends SIGCONT: a stall of any length, with no sleep) while a
real ``lakefs-gc run --once`` reconciles with ``hard_delete: {grace_seconds: 10}``; the daemon's
clock is moved by ``clock_offset_seconds`` to stand for the stall. On SQLite + local and on
PostgreSQL + S3 (moto).

- A stall longer than the grace but within the pending timeout (the issue's 25 s): on c5cbe05 the
  upload exited 0 with its entry staged and its object gone ("data missing"). Now the intent is
  settled only with the staging write, so the reconciler leaves it: the upload exits 0 and its data
  reads back.
- A stall past the pending timeout: the reconciler claims and deletes; the upload (single, or
  ``upload -r``) then fails with one line (ConflictError, exit 3) and stages nothing.
- ``pending_timeout_seconds: 30`` (accepted on c5cbe05) is refused by ``check-config`` and ``run``,
  naming both numbers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakefs_core.repos.graveler import StorageNamespace
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from tests.block.conftest import create_bucket
from tests.cli.helpers import Result, user_env
from tests.gc.daemon_support import gc_config, write_config
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.pg import PgDatabase
from tests.support.timing import scaled

GC = [sys.executable, "-m", "lakefs_gc.cli"]
CORE = [sys.executable, "-m", "lakefs_core.cli"]
GRACE = 10.0
PENDING = 3600.0  # the journal's minimum
STOP = "upload:before-stage:stop"


@dataclass
class Setup:
    """One core (KV + namespace) reached by both CLIs."""

    tmp: Path
    core: dict[str, Any]  # the ``core`` section of both configurations
    namespace: str
    env: dict[str, str]  # lakefs-core's environment

    def gc_config(self, repo: str, offset: float, **overrides: Any) -> Path:
        """A daemon for ``repo`` alone (the session's PostgreSQL database holds other tests'),
        its clock ``offset`` seconds ahead (the stall)."""
        config = gc_config("unused", self.tmp / "work", repositories={"include": [repo]}, **overrides)
        config["core"], config["clock_offset_seconds"] = self.core, offset
        return write_config(self.tmp / "gc.yaml", config)

    async def objects(self) -> set[str]:
        """Every ``data/`` object of the namespace."""
        async with await open_core(CoreSettings.model_validate(self.core)) as core:
            ns = StorageNamespace(self.namespace)
            store = await core.graveler.namespace_store(ns)
            return {k.key async for k in store.list_keys(ns.data_prefix())}


async def _run(cmd: list[str], env: dict[str, str], *args: str) -> Result:
    proc = await asyncio.to_thread(
        subprocess.run, [*cmd, *args], capture_output=True, env=env, timeout=scaled(300), check=False
    )
    result = Result(tuple(args), proc.returncode, proc.stdout, proc.stderr.decode(errors="replace"))
    assert "Traceback" not in result.err, result.err
    return result


def _gc_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")}


async def _stopped(proc: asyncio.subprocess.Process) -> None:
    """Until ``proc`` stopped itself at the fault point (or ended: then the test fails on it)."""
    stat = Path(f"/proc/{proc.pid}/stat")
    async with asyncio.timeout(scaled(120)):
        while proc.returncode is None:
            if (await asyncio.to_thread(stat.read_text)).rsplit(")", 1)[1].split()[0] == "T":
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the upload ended (exit {proc.returncode}) instead of stalling at {STOP}")


async def _stalled(s: Setup, daemon_config: Path, *args: str) -> tuple[Result, Result]:
    """``lakefs-core fs upload ARGS`` stalled at the fault point while ``lakefs-gc run --once``
    runs with ``daemon_config``; the upload's and the daemon's results."""
    env = {**s.env, "LAKEFS_CORE_FAULT": STOP}
    proc = await asyncio.create_subprocess_exec(
        *CORE, "fs", "upload", *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        await _stopped(proc)
        daemon = await _run(GC, _gc_env(), "run", "--config", str(daemon_config), "--once")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    upload = Result(("fs", "upload", *args), proc.returncode or 0, out, err.decode(errors="replace"))
    assert "Traceback" not in upload.err, upload.err
    return upload, daemon


def _reconciling(s: Setup, repo: str, offset: float) -> Path:
    """The daemon reconciling ``repo`` only, grace 10 s, its clock ``offset`` s ahead."""
    hd = {"enabled": True, "interval_seconds": 1, "grace_seconds": GRACE, "pending_timeout_seconds": PENDING}
    return s.gc_config(repo, offset, hard_delete=hd, schedule={"enabled": False})


async def _repo(s: Setup, name: str) -> str:
    name = f"{name}-{os.urandom(3).hex()}"  # the session's PostgreSQL database is shared
    (await _run(CORE, s.env, "repo", "create", f"lakefs://{name}", s.namespace)).ok()
    return name


@pytest.fixture(params=["sqlite-local", "postgres-s3"])
def backend(request: pytest.FixtureRequest) -> tuple[str, MotoServer] | None:
    """None: SQLite + local; else the session's PostgreSQL URL and a moto server (resolved here,
    synchronously: the fixtures that start them run their own event loops)."""
    if request.param == "sqlite-local":
        return None
    pg: PgDatabase = request.getfixturevalue("pg_database")
    moto: Callable[[str], MotoServer] = request.getfixturevalue("moto")
    return pg.url, moto("us-east-1")


@pytest.fixture
async def setup(backend: tuple[str, MotoServer] | None, tmp_path: Path) -> Setup:
    core: dict[str, Any] = {"kv_url": f"sqlite:///{tmp_path / 'kv.sqlite3'}"}
    namespace = f"local://{tmp_path / 'ns'}"
    if backend is not None:
        pg_url, server = backend
        bucket = f"stall-{os.urandom(4).hex()}"
        await create_bucket(server, bucket)
        credentials = {"source": "static", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
        s3 = {"endpoint_url": server.endpoint, "region": "us-east-1", "credentials": credentials}
        core, namespace = {"kv_url": pg_url, "s3": s3}, f"s3://{bucket}/repo"
    config = tmp_path / "core.yaml"
    config.write_text(yaml.safe_dump({k: v for k, v in core.items() if k != "kv_url"}))
    env = user_env(tmp_path / "home", LAKEFS_CORE__KV_URL=core["kv_url"], LAKEFS_CORE_CONFIG=str(config))
    return Setup(tmp_path, core, namespace, env)


async def test_a_stall_longer_than_the_grace_no_longer_loses_the_upload(setup: Setup) -> None:
    """The issue's reproduction: grace 10 s, a 25 s stall between PUT and staging."""
    s = setup
    repo = await _repo(s, "stall1")
    src = s.tmp / "f.txt"
    src.write_bytes(b"slow but fine")
    target = f"lakefs://{repo}/main/f.txt"
    upload, daemon = await _stalled(s, _reconciling(s, repo, 25), target, "--source", str(src))
    daemon.ok()
    upload.ok()
    assert (await _run(CORE, s.env, "fs", "cat", target)).ok().raw == b"slow but fine"


async def test_a_stall_past_the_pending_timeout_fails_the_upload_with_nothing_staged(setup: Setup) -> None:
    s = setup
    repo = await _repo(s, "stall2")
    src = s.tmp / "g.txt"
    src.write_bytes(b"too slow")
    target = f"lakefs://{repo}/main/g.txt"
    upload, daemon = await _stalled(s, _reconciling(s, repo, PENDING + 60), target, "--source", str(src))
    daemon.ok()
    upload.failed(
        3, "upload of 'g.txt' to branch 'main' lost to the hard-delete reconciler", "nothing was staged"
    )
    cat = await _run(CORE, s.env, "fs", "cat", target)
    cat.failed(2, "g.txt")  # not found: no entry, rather than an entry whose data is missing
    assert await s.objects() == set()  # the reconciler deleted the object it claimed


async def test_a_recursive_upload_stalled_past_the_pending_timeout_stages_nothing(setup: Setup) -> None:
    s = setup
    repo = await _repo(s, "stall3")
    tree = s.tmp / "tree"
    for i in range(5):
        (tree / f"d{i % 2}").mkdir(parents=True, exist_ok=True)
        (tree / f"d{i % 2}" / f"f{i}").write_bytes(b"%d" % i)
    args = ("-r", "--source", str(tree), "--no-progress", f"lakefs://{repo}/main/t/")
    upload, daemon = await _stalled(s, _reconciling(s, repo, PENDING + 60), *args)
    daemon.ok()
    upload.failed(3, "batch upload of 5 objects", "lost to the hard-delete reconciler")
    ls = await _run(CORE, s.env, "fs", "ls", "--recursive", f"lakefs://{repo}/main/")
    assert ls.ok().out.strip() == ""
    assert await s.objects() == set()


async def test_a_pending_timeout_below_the_journal_minimum_is_refused(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "gc.yaml",
        gc_config(
            f"sqlite:///{tmp_path / 'kv.sqlite3'}",
            tmp_path / "work",
            hard_delete={"enabled": True, "grace_seconds": GRACE, "pending_timeout_seconds": 30},
        ),
    )
    for args in (("check-config",), ("run", "--once")):
        out = await _run(GC, _gc_env(), *args, "--config", str(config))
        assert out.returncode == 9, (args, out.returncode, out.err)
        for needle in ("hard_delete.pending_timeout_seconds", "30 s", "3600 s"):
            assert needle in out.err, (needle, out.err)


async def test_the_mark_never_takes_a_stalled_upload_with_min_age_zero(setup: Setup) -> None:
    """Item 6: a full retention run with ``min_age_seconds: 0`` while an upload is stalled between
    its PUT and its staging write: its object is not marked (its intent is undecided), and the
    upload then completes with its data readable."""
    s = setup
    repo = await _repo(s, "stall4")
    src = s.tmp / "h.txt"
    src.write_bytes(b"in flight")
    target = f"lakefs://{repo}/main/h.txt"
    schedule = {"enabled": True, "min_age_seconds": 0, "jitter_fraction": 0}
    config = s.gc_config(repo, 60, hard_delete={"enabled": False}, schedule=schedule)
    upload, daemon = await _stalled(s, config, target, "--source", str(src))
    daemon.ok()
    assert "0 marked, 0 deleted" in daemon.err, daemon.err[-2000:]
    upload.ok()
    assert (await _run(CORE, s.env, "fs", "cat", target)).ok().raw == b"in flight"

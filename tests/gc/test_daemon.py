"""The GC daemon in-process (``GCService``) over real sockets: lakeFS's rules routes, runs through
the API, the schedule, resumption of a killed sweep, leases between two daemons, metrics."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lakefs_core.errors import ConflictError
from lakefs_core.repos.graveler import Graveler
from lakefs_core.service.lease import kv_lease
from lakefs_gc.config import GCConfig
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.record import RunRecords
from lakefs_gc.runs.runs import RunExecutor, RunProgress, RunRequest, RunResult, run_id_time
from lakefs_gc.service import GCService
from tests.gc.daemon_support import AUTH, SqliteRepo, gc_config, sqlite_repo
from tests.gc.test_mark import deleted_set

RULES = "/api/v1/repositories/repo1/settings/gc_rules"
RUNS = "/service/gc/v1/repositories/repo1/runs"


@pytest.fixture
async def repo(tmp_path: Path) -> AsyncIterator[SqliteRepo]:
    r = await sqlite_repo(tmp_path)
    try:
        yield r
    finally:
        await r.close()


async def _open(
    repo: SqliteRepo, tmp_path: Path, *, executor: RunExecutor | None = None, **overrides: Any
) -> GCService:
    config = GCConfig.model_validate(gc_config(repo.kv_url, tmp_path / "work", **overrides))
    return await GCService.open(config, executor=executor)


async def _call(
    svc: GCService, method: str, path: str, *, auth: tuple[str, str] | None = AUTH, **kw: Any
) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{svc.bound_port}{path}"
    headers = {"Authorization": "Basic " + base64.b64encode(":".join(auth).encode()).decode()} if auth else {}
    async with aiohttp.ClientSession() as s, s.request(method, url, headers=headers, **kw) as resp:
        body = await resp.read()
        if resp.content_type == "application/json" and body:
            return resp.status, await resp.json()
        return resp.status, body.decode()


def _sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")


async def test_rules_routes_are_lakefs_compatible(repo: SqliteRepo, tmp_path: Path) -> None:
    svc = await _open(repo, tmp_path)
    try:
        assert (await _call(svc, "GET", RULES, auth=None))[0] == 401
        rules = {"default_retention_days": 21, "branches": [{"branch_id": "main", "retention_days": 5}]}
        assert (await _call(svc, "PUT", RULES, json=rules))[0] == 204
        assert await _call(svc, "GET", RULES) == (200, rules)
        status, err = await _call(svc, "PUT", RULES, json={"default_retention_days": -1, "branches": []})
        assert status == 400 and err["field"] == "default_retention_days"
        assert (await _call(svc, "DELETE", RULES))[0] == 204
        assert (await _call(svc, "GET", RULES))[0] == 404
        assert (await _call(svc, "GET", "/api/v1/repositories/nope/settings/gc_rules"))[0] == 404
        assert (await _call(svc, "GET", "/api/v1/repositories/Bad_Name/settings/gc_rules"))[0] == 400
        assert await _call(svc, "GET", "/api/v1/config/garbage-collection") == (200, {"grace_period": 86400})
        status, doc = await _call(svc, "GET", "/openapi.json", auth=None)
        assert status == 200 and RUNS.replace("repo1", "{repository}") in doc["paths"]
    finally:
        await svc.close()


async def test_runs_through_the_api(repo: SqliteRepo, tmp_path: Path) -> None:
    live, garbage = await repo.live_and_garbage()
    svc = await _open(repo, tmp_path)
    try:
        status, run = await _call(svc, "POST", RUNS, json={"mode": "dry-run"})
        assert status == 202 and run["state"] in ("queued", "running")
        await svc.drain()
        status, done = await _call(svc, "GET", f"{RUNS}/{run['run_id']}")
        assert status == 200 and done["state"] == "marked" and done["mode"] == "dry-run"
        assert done["summary"]["num_deleted_objects"] == len(garbage)
        assert await repo.stored() >= garbage  # a dry run deletes nothing
        # A dry-run mark is never swept; an unknown one is 404; read-only mirrors are refused.
        status, err = await _call(svc, "POST", RUNS, json={"mode": "sweep", "mark_id": run["run_id"]})
        assert status == 409 and "dry run" in err["message"]
        assert (await _call(svc, "POST", RUNS, json={"mode": "sweep", "mark_id": "nope"}))[0] == 404
        assert (await _call(svc, "POST", RUNS, json={"mode": "sweep"}))[0] == 400
        assert (await _call(svc, "POST", RUNS, json={"mode": "bogus"}))[0] == 400
        # A mark whose candidate list was edited in the namespace: its sweep is refused and counted.
        status, run = await _call(svc, "POST", RUNS, json={"mode": "mark"})
        await svc.drain()
        store = await repo.g.namespace_store(repo.built.ns)
        part = f"{RunLayout(repo.built.ns, run['run_id']).deleted_text}/part-00000"
        await store.put(part, await store.get(part) + b"data/planted/object\n")
        await _call(svc, "POST", RUNS, json={"mode": "sweep", "mark_id": run["run_id"]})
        await svc.drain()
        assert await repo.stored() >= garbage  # refused: nothing deleted
        text = (await _call(svc, "GET", "/metrics", auth=None))[1]
        assert _sample(text, "lakefs_gc_sweep_refusals_total", repo="repo1", reason="digest") == 1

        status, run = await _call(svc, "POST", RUNS, json={"mode": "full"})
        assert status == 202
        await svc.drain()
        status, done = await _call(svc, "GET", f"{RUNS}/{run['run_id']}")
        assert done["state"] == "swept", done
        assert done["sweep"]["deleted"] == len(garbage)
        assert await deleted_set(repo.g, repo.built, run["run_id"]) == garbage
        remaining = await repo.stored()
        assert not remaining & garbage and not live - remaining
        status, listing = await _call(svc, "GET", RUNS)
        ids = [r["run_id"] for r in listing["results"]]
        assert status == 200 and ids[0] == run["run_id"] and len(ids) == 3  # newest first
        assert (await _call(svc, "GET", f"{RUNS}?amount=1"))[1]["results"][0]["run_id"] == run["run_id"]
        assert (await _call(svc, "GET", f"{RUNS}/not-a-run"))[0] == 404
        status, text = await _call(svc, "GET", "/metrics", auth=None)
        assert _sample(text, "lakefs_gc_objects_deleted_total", repo="repo1") == len(garbage)
        assert _sample(text, "lakefs_gc_runs_total", repo="repo1", phase="sweep", outcome="success") == 1
        # One clock (issue 38): every time of the run carries the daemon's 2-day clock offset.
        wall = datetime.now(UTC)
        times = [done[k] for k in ("requested_at", "started_at", "finished_at")]
        times += [done["summary"]["start_time"], done["sweep"]["start_time"], done["sweep"]["end_time"]]
        ahead = [datetime.fromisoformat(t.replace("Z", "+00:00")) - wall for t in times]
        assert all(timedelta(days=1) < d < timedelta(days=3) for d in ahead), (times, wall)
        at = run_id_time(run["run_id"])
        assert at is not None and at - wall > timedelta(days=1)
        last = _sample(text, "lakefs_gc_last_success_timestamp_seconds", repo="repo1", region="default")
        assert last > (wall + timedelta(days=1)).timestamp()
    finally:
        await svc.close()


async def test_the_api_and_the_schedule_believe_the_kv_not_the_files(
    repo: SqliteRepo, tmp_path: Path
) -> None:
    """Anyone with access to the bucket can write a run's files; the state the API answers and the
    schedule acts on comes from the run's KV record, the files are detail shown only when the record
    vouches for them."""
    _, garbage = await repo.live_and_garbage()
    svc = await _open(repo, tmp_path)
    store = await repo.g.namespace_store(repo.built.ns)
    try:
        swept = (await _call(svc, "POST", RUNS, json={"mode": "full"}))[1]["run_id"]
        await svc.drain()
        marked = (await _call(svc, "POST", RUNS, json={"mode": "mark"}))[1]["run_id"]
        await svc.drain()
        # The swept run's report edited: still swept (the record says so), the report left out.
        report = RunLayout(repo.built.ns, swept).sweep_report
        await store.put(report, (await store.get(report)).replace(b'"deleted":', b'"deleted":1000,"x":'))
        status, done = await _call(svc, "GET", f"{RUNS}/{swept}")
        assert status == 200 and (done["state"], done["record"], done["sweep"]) == ("swept", "swept", None)
        assert any("sweep.json" in e and "KV record" in e for e in done["file_errors"]), done
        # A sweep report planted beside a mark: still marked, never swept by a file.
        planted = json.dumps({"mark_id": marked, "deleted": len(garbage)}).encode()
        await store.put(RunLayout(repo.built.ns, marked).sweep_report, planted)
        done = (await _call(svc, "GET", f"{RUNS}/{marked}"))[1]
        assert (done["state"], done["record"], done["sweep"]) == ("marked", "complete", None)
        # A whole run forged, newer than both: a full mark that "succeeded" and a sweep report. It
        # has no record: incomplete, never resumed by the schedule, never taken as the last run.
        forged = svc.clock.new_run_id()
        layout = RunLayout(repo.built.ns, forged)
        manifest = json.loads(await store.get(RunLayout(repo.built.ns, marked).manifest))
        await store.put(layout.manifest, json.dumps({**manifest, "run_id": forged, "mode": "full"}).encode())
        summary = json.loads(await store.get(RunLayout(repo.built.ns, marked).summary))
        await store.put(layout.summary, json.dumps({**summary, "run_id": forged}).encode())
        done = (await _call(svc, "GET", f"{RUNS}/{forged}"))[1]
        assert (done["state"], done["record"]) == ("incomplete", None)
        assert (await _call(svc, "POST", RUNS, json={"mode": "sweep", "mark_id": forged}))[0] == 409
        listing = (await _call(svc, "GET", RUNS))[1]["results"]
        assert [(r["run_id"], r["state"]) for r in listing] == [
            (forged, "incomplete"),
            (marked, "marked"),
            (swept, "swept"),
        ]
        # Twenty more forged directories, newer than every real run, cannot push the real runs out
        # of what the schedule looks at (it lists the runs the KV has records of).
        for _ in range(20):
            fake = svc.clock.new_run_id()
            body = json.dumps({**manifest, "run_id": fake, "mode": "full"}).encode()
            await store.put(RunLayout(repo.built.ns, fake).manifest, body)
        svc.state("repo1").next_run = None  # due by memory: the schedule reads the runs again
        assert (await svc.step()).started_runs == []  # the last real run is recent; nothing resumed
        assert svc.failed_runs == 0
    finally:
        await svc.close()


async def test_a_namespace_refused_is_counted_as_a_refusal(repo: SqliteRepo, tmp_path: Path) -> None:
    """The namespace check's refusal (exit 15) is a refusal GC alerts on, like a tampered run."""
    _, garbage = await repo.live_and_garbage()
    assert garbage
    root = Path(repo.built.ns.uri.removeprefix("local://"))
    elsewhere = tmp_path / "elsewhere"

    def swap() -> None:
        root.rename(tmp_path / "moved-away")
        shutil.copytree(tmp_path / "moved-away", elsewhere, symlinks=True)
        os.symlink(elsewhere, root)  # the namespace now leads elsewhere than recorded

    def files() -> list[str]:
        return sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*") if p.is_file())

    await asyncio.to_thread(swap)
    before = await asyncio.to_thread(files)
    svc = await _open(repo, tmp_path)
    try:
        await _call(svc, "POST", RUNS, json={"mode": "full"})
        await svc.drain()
        assert svc.failed_runs == 1 and await asyncio.to_thread(files) == before  # nothing written or deleted
        text = (await _call(svc, "GET", "/metrics", auth=None))[1]
        assert _sample(text, "lakefs_gc_sweep_refusals_total", repo="repo1", reason="namespace") == 1
    finally:
        await svc.close()


async def test_schedule_runs_once_per_interval(repo: SqliteRepo, tmp_path: Path) -> None:
    live, garbage = await repo.live_and_garbage()
    svc = await _open(repo, tmp_path)
    try:
        report = await svc.step()
        assert len(report.started_runs) == 1
        await svc.drain()
        assert not (await repo.stored()) & garbage
        assert not live - await repo.stored()
        # The run is recorded in the namespace: neither this daemon nor a new one starts another.
        assert (await svc.step()).started_runs == []
    finally:
        await svc.close()
    other = await _open(repo, tmp_path)
    try:
        assert (await other.step()).started_runs == []
    finally:
        await other.close()


async def test_a_second_daemon_is_kept_out_by_the_lease(repo: SqliteRepo, tmp_path: Path) -> None:
    lease = kv_lease(repo.kv, "gc/repo1", "another-daemon", 60)
    assert await lease.try_acquire()
    svc = await _open(repo, tmp_path)
    try:
        await svc.step()
        await svc.drain()
        assert svc.failed_runs == 0
        _, garbage = await repo.live_and_garbage()
        assert garbage and await repo.stored() >= garbage  # nothing ran while the lease was held
        await lease.release()
        await svc.step()
        await svc.drain()
        assert not (await repo.stored()) & garbage
    finally:
        await svc.close()


async def test_a_lease_lost_mid_run_fails_the_run(repo: SqliteRepo, tmp_path: Path) -> None:
    """A scheduled run whose lease another process takes over while it works is stopped and counted
    as FAILED: ``--once`` (``step_and_wait``) must not report success for a run that did not do its
    job. (Finding the lease held BEFORE the run starts is a skip: the holder runs it, see above.)"""
    _, garbage = await repo.live_and_garbage()

    async def taken_over(graveler: Graveler, request: RunRequest, progress: RunProgress) -> RunResult:
        # Another daemon takes the lease once it has expired (a 'now' past its TTL: this daemon
        # stalled), then this run keeps working until its renewer finds the lease gone.
        other = kv_lease(repo.kv, "gc/repo1", "another-daemon", 60)
        assert await other.try_acquire(time.time() + 3600)
        await asyncio.Event().wait()
        raise AssertionError("the run outlived the loss of its lease")

    svc = await _open(repo, tmp_path, lease_ttl_seconds=0.3, executor=taken_over)
    try:
        with pytest.raises(ConflictError, match="1 run"):
            await svc.step_and_wait()
        assert svc.failed_runs == 1
        (run,) = svc.registry.of_repository("repo1")
        assert run.state == "failed" and "lost the GC lease" in (run.error or "")
        text = (await _call(svc, "GET", "/metrics", auth=None))[1]
        assert _sample(text, "lakefs_gc_runs_total", repo="repo1", phase="run", outcome="failure") == 1
        assert await repo.stored() >= garbage  # stopped before any delete
    finally:
        await svc.close()


async def test_read_only_repository_is_never_collected(repo: SqliteRepo, tmp_path: Path) -> None:
    await repo.g.set_read_only("repo1", True)
    svc = await _open(repo, tmp_path)
    try:
        assert (await svc.step()).repositories == 0
        status, err = await _call(svc, "POST", RUNS, json={"mode": "full"})
        assert status == 409 and "read-only" in err["message"]
    finally:
        await svc.close()


async def test_a_killed_sweep_is_resumed_by_the_next_scheduled_run(
    repo: SqliteRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live, garbage = await repo.live_and_garbage()
    svc = await _open(repo, tmp_path, schedule={"interval_seconds": 0.001})
    try:
        monkeypatch.setenv("LAKEFS_GC_FAULT", "sweep:batch:1")  # raised after the first batch
        svc_report = await svc.step()
        assert len(svc_report.started_runs) == 1
        await svc.drain()
        assert svc.failed_runs == 1
        first = svc_report.started_runs[0]
        _, run = await _call(svc, "GET", f"{RUNS}/{first}")
        # This daemon saw the run fail in its sweep; its files say: marked, sweep unfinished.
        assert run["state"] == "failed" and run["summary"]["success"] is True and run["sweep"] is None
        monkeypatch.delenv("LAKEFS_GC_FAULT")
        await asyncio.sleep(0.01)
        await svc.step()
        await svc.drain()
        _, run = await _call(svc, "GET", f"{RUNS}/{first}")
        assert run["state"] == "swept", run
        assert not (await repo.stored()) & garbage and not live - await repo.stored()
    finally:
        await svc.close()


async def test_a_mark_stopped_before_its_record_is_abandoned_not_counted_as_a_run(
    repo: SqliteRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped between ``summary.json`` (success) and its KV run record, a mark can never be swept;
    the next pass must start a new run at once, not wait ``interval_seconds`` (3600) as if a run
    had happened, which left the garbage in place while ``--once`` exited 0."""
    live, garbage = await repo.live_and_garbage()
    svc = await _open(repo, tmp_path)
    try:
        monkeypatch.setenv("LAKEFS_GC_FAULT", "mark:before-record")
        first = (await svc.step()).started_runs
        await svc.drain()
        assert len(first) == 1 and svc.failed_runs == 1
        store = await repo.g.namespace_store(repo.built.ns)
        assert await store.exists(RunLayout(repo.built.ns, first[0]).summary)  # the window was hit
        monkeypatch.delenv("LAKEFS_GC_FAULT")
        await asyncio.sleep(0.01)  # a new run id
        second = (await svc.step()).started_runs
        assert len(second) == 1 and second[0] != first[0], second
        await svc.drain()
        text = (await _call(svc, "GET", "/metrics", auth=None))[1]
        assert _sample(text, "lakefs_gc_runs_total", repo="repo1", phase="mark", outcome="abandoned") == 1
        assert not (await repo.stored()) & garbage and not live - await repo.stored()
    finally:
        await svc.close()


async def test_a_refused_sweep_is_not_resumed_and_a_new_run_follows(
    repo: SqliteRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live, garbage = await repo.live_and_garbage()
    svc = await _open(repo, tmp_path, schedule={"interval_seconds": 0.001})
    try:
        monkeypatch.setenv("LAKEFS_GC_FAULT", "sweep:batch:1")  # killed after the first batch
        first = (await svc.step()).started_runs[0]
        await svc.drain()
        monkeypatch.delenv("LAKEFS_GC_FAULT")
        store = await repo.g.namespace_store(repo.built.ns)
        part = f"{RunLayout(repo.built.ns, first).deleted_text}/part-00000"
        await store.put(part, await store.get(part) + b"data/planted/object\n")
        before = await repo.stored()
        await asyncio.sleep(0.01)
        assert (await svc.step()).started_runs == [first]  # resumed: its record is still complete
        await svc.drain()
        assert svc.failed_runs == 2 and await repo.stored() == before  # refused, nothing deleted
        await asyncio.sleep(0.01)
        second = (await svc.step()).started_runs  # never resumed again: a new run instead
        assert len(second) == 1 and second[0] != first
        await svc.drain()
        assert not (await repo.stored()) & garbage and not live - await repo.stored()
    finally:
        await svc.close()


async def test_reconciler_removes_uncommitted_garbage(repo: SqliteRepo, tmp_path: Path) -> None:
    from lakefs_core.repos.objects import Objects

    g = repo.g
    await g.create_repository("hd1", f"local://{tmp_path / 'hd1'}", hard_delete_journal=True)
    objects = Objects(g)
    first = (await objects.upload("hd1", "main", "a", b"a v1")).physical_address
    await objects.upload("hd1", "main", "a", b"a v2")  # the first address is garbage now
    dropped = (await objects.upload("hd1", "main", "b", b"b")).physical_address
    await objects.delete("hd1", "main", "b")  # deleted before any commit: garbage
    await objects.upload("hd1", "main", "c", b"c")
    await g.commit("hd1", "main", committer="t", message="a v2 and c")
    await objects.upload("hd1", "main", "d", b"d staged")
    store_root = tmp_path / "hd1"
    assert (store_root / first).is_file() and (store_root / dropped).is_file()
    svc = await _open(
        repo, tmp_path, hard_delete={"enabled": True, "grace_seconds": 0}, schedule={"enabled": False}
    )
    try:
        report = await svc.step()
        assert "hd1" in report.started_reconciles
        await svc.drain()
        assert not (store_root / first).exists() and not (store_root / dropped).exists()
        for path, body in (("a", b"a v2"), ("c", b"c"), ("d", b"d staged")):
            assert await objects.read_all("hd1", "main", path) == body
        status, doc = await _call(svc, "GET", "/service/gc/v1/repositories/hd1/hard-delete")
        assert status == 200 and doc["journal_enabled"] is True
        assert doc["last_pass"]["deleted"] == 2 and doc["last_error"] is None
        _, text = await _call(svc, "GET", "/metrics", auth=None)
        assert _sample(text, "lakefs_gc_hd_deleted_total", repo="hd1") == 2
        assert _sample(text, "lakefs_gc_hd_passes_total", repo="hd1", outcome="success") == 1
    finally:
        await svc.close()


async def test_a_staged_object_overwritten_after_its_check_waits_out_the_staged_backoff(
    repo: SqliteRepo, tmp_path: Path
) -> None:
    """``hard_delete.staged_backoff_seconds`` reaches the reconciler: an intent found staged is looked at
    again that long after (0 here: the next pass), so its object, overwritten since, goes then; at the
    default 600 s it stayed (a writers test whose uploads stayed staged past the grace on a loaded
    machine waited minutes for it)."""
    from lakefs_core.repos.objects import Objects

    g = repo.g
    await g.create_repository("hd2", f"local://{tmp_path / 'hd2'}", hard_delete_journal=True)
    objects = Objects(g)
    first = (await objects.upload("hd2", "main", "a", b"a v1")).physical_address
    hd = {"enabled": True, "grace_seconds": 0, "staged_backoff_seconds": 0}
    svc = await _open(repo, tmp_path, hard_delete=hd, schedule={"enabled": False})
    try:
        assert (await svc.reconcile_once("hd2")).staged == 1
        await objects.upload("hd2", "main", "a", b"a v2")  # the first address is garbage now
        assert (await svc.reconcile_once("hd2")).deleted == 1
        assert not (tmp_path / "hd2" / first).exists()
        assert await objects.read_all("hd2", "main", "a") == b"a v2"
    finally:
        await svc.close()


async def test_purge_routes(repo: SqliteRepo, tmp_path: Path) -> None:
    from lakefs_core.errors import PurgedError
    from lakefs_core.repos.objects import Objects

    svc = await _open(repo, tmp_path, schedule={"enabled": False})
    purges = "/service/gc/v1/repositories/repo1/purges"
    try:
        body = {"ref": "main", "path": "a3", "reason": "erasure", "all_history": True}
        status, dry = await _call(svc, "POST", purges, json=body)
        assert status == 200 and dry["dry_run"] and dry["addresses"] == [repo.built.addr["a3"]]
        assert (await _call(svc, "POST", purges, json={**body, "reason": ""}))[0] == 400
        assert (await _call(svc, "POST", purges, json={**body, "ref": "nope"}))[0] == 404
        status, done = await _call(svc, "POST", purges, json={**body, "yes": True})
        assert status == 201 and done["deleted"] == 1
        status, record = await _call(svc, "GET", f"{purges}/{done['audit_id']}")
        assert (
            status == 200 and record["actor"] == f"{AUTH[0]}@lakefs-gc-api" and record["reason"] == "erasure"
        )
        assert (await _call(svc, "GET", f"{purges}/purge-nope"))[0] == 404
        with pytest.raises(PurgedError):
            await Objects(repo.g).read_all("repo1", "v1", "a3")
        _, text = await _call(svc, "GET", "/metrics", auth=None)
        assert _sample(text, "lakefs_gc_purges_total", repo="repo1") == 1
        assert _sample(text, "lakefs_gc_purged_objects_total", repo="repo1") == 1
    finally:
        await svc.close()


async def test_the_daemon_keeps_run_records_kept_runs_in_the_kv(repo: SqliteRepo, tmp_path: Path) -> None:
    svc = await _open(repo, tmp_path, run_records_kept=2)
    records = RunRecords(svc.graveler, "repo1")
    try:
        ran = []
        for _ in range(3):
            request = RunRequest(repository="repo1", mode="dry-run", run_id=svc.clock.new_run_id())
            svc.request_run(request)
            await svc.drain()
            ran.append(request.run_id)
        # The oldest retired after the third run (under its lease); its record waits for the grace.
        assert await records.run_ids() == ran[:0:-1]
        assert await records.read(ran[0]) is None
        assert len(await records.tombstones()) == 1
    finally:
        await svc.close()

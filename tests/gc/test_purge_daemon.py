"""The GC daemon completes, on its own, an audited purge whose process died mid-way (issue 32, item
8): no re-run of the purge, the same audit record settled, every object it names deleted; a purge
younger than ``hard_delete.grace_seconds`` is left to its own process. A real ``GCService`` (its own
core, opened from its configuration) on SQLite + local and on PostgreSQL + S3 (moto)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.errors import InjectedFaultError, PurgedError
from lakefs_core.faults import ENV as FAULT_ENV
from lakefs_gc.config import GCConfig
from lakefs_gc.service import GCService
from tests.gc.daemon_support import gc_config
from tests.repos.purge_support import BACKENDS, Backend, Spec, open_backend, spec_for
from tests.support.moto import ACCESS_KEY, SECRET_KEY


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    return spec_for(str(request.param), tmp_path, request)


@pytest.fixture
async def b(spec: Spec) -> AsyncIterator[Backend]:
    backend = await open_backend(spec)
    try:
        yield backend
    finally:
        await backend.close()


async def _daemon(spec: Spec, tmp_path: Path, grace: float) -> GCService:
    core: dict[str, Any] = {"kv_url": spec.kv_url}
    if spec.s3 is not None:
        core["s3"] = {
            "region": "us-east-1",
            "endpoint_url": spec.s3.endpoint,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        }
    raw = gc_config(
        spec.kv_url,
        tmp_path / "work",
        core=core,
        schedule={"enabled": False},
        hard_delete={"enabled": False, "grace_seconds": grace},  # the purge check runs either way
        clock_offset_seconds=0.0,
    )
    return await GCService.open(GCConfig.model_validate(raw), serve_api=False)


async def test_the_daemon_completes_a_crashed_purge(
    spec: Spec, b: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    addresses = []
    for n in range(3):
        addresses.append((await b.objects.upload(b.repo, "main", "s.csv", f"v{n}".encode())).physical_address)
        await b.g.commit(b.repo, "main", committer="t", message=f"v{n}")
    monkeypatch.setenv(FAULT_ENV, "purge:delete:2")
    with pytest.raises(InjectedFaultError):
        await b.g.purge_path(b.repo, "main", "s.csv", all_history=True, reason="r", actor="a", yes=True)
    monkeypatch.delenv(FAULT_ENV)
    [stuck] = await b.g.list_purges(b.repo)
    assert sum([await b.stored(a) for a in addresses]) == 2

    svc = await _daemon(spec, tmp_path, grace=3600.0)  # the purge is younger than the grace
    try:
        await svc.step()
        await svc.drain()
    finally:
        await svc.close()
    assert (await b.g.purge_record(b.repo, stuck.audit_id)).state == "deleting"
    assert sum([await b.stored(a) for a in addresses]) == 2

    svc = await _daemon(spec, tmp_path, grace=0.0)
    try:
        await svc.step()
        await svc.drain()
        assert svc.metrics.purged.labels(b.repo)._value.get() == 3
    finally:
        await svc.close()
    [done] = await b.g.list_purges(b.repo)
    assert (done.audit_id, done.state, done.deleted) == (stuck.audit_id, "done", 3)
    assert not any([await b.stored(a) for a in addresses])
    with pytest.raises(PurgedError, match=stuck.audit_id):
        await b.objects.read_all(b.repo, "main~1", "s.csv")

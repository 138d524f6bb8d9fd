"""Purge's dry run names every other ref and path sharing an object it would destroy (issue 32): the
same path on other branches and tags and in other commits, other paths in the same or other commits
(a lakeFS shallow copy names one object twice), staged entries; a branch whose staging hides its
head's value is not listed. The search is bounded and says so when it stops. A dry run writes
nothing. On SQLite + local and PostgreSQL + S3 (moto)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.refs import kvkeys
from lakefs_core.repos import purge_shared
from lakefs_core.repos.purge import PurgeReport
from tests.repos.purge_support import BACKENDS, Backend, Spec, open_backend, spec_for


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


async def _copy(b: Backend, branch: str, path: str, address: str) -> None:
    """A shallow copy (lakeFS's same-repository CopyObject): another path naming the same object."""
    identity, data = make_entry(address, 2, "0" * 32)
    await b.g.set_entry(b.repo, branch, ValueRecord(path.encode(), identity, data))


async def _history(b: Backend) -> dict[str, str]:
    """main: c1 {secret=A, other}, tag t1 and branch old at c1; c2 {secret=B}; feature from c2 with
    copy.csv -> B committed (c3); dev from c2 with secret=C and copy2.csv -> B staged."""
    g, o, repo = b.g, b.objects, b.repo
    ids = {"A": (await o.upload(repo, "main", "secret.csv", b"vA")).physical_address}
    await o.upload(repo, "main", "other.csv", b"keep")
    ids["c1"] = (await g.commit(repo, "main", committer="t", message="one")).id
    await g.create_tag(repo, "t1", "main")
    await g.create_branch(repo, "old", "t1")
    ids["B"] = (await o.upload(repo, "main", "secret.csv", b"vB")).physical_address
    ids["c2"] = (await g.commit(repo, "main", committer="t", message="two")).id
    await g.create_branch(repo, "feature", "main")
    await _copy(b, "feature", "copy.csv", ids["B"])
    ids["c3"] = (await g.commit(repo, "feature", committer="t", message="copy")).id
    await g.create_branch(repo, "dev", "main")
    ids["C"] = (await o.upload(repo, "dev", "secret.csv", b"vC")).physical_address
    await _copy(b, "dev", "copy2.csv", ids["B"])
    return ids


async def _dry(b: Backend, ref: str, *, all_history: bool = False) -> PurgeReport:
    return await b.g.purge_path(
        b.repo, ref, "secret.csv", all_history=all_history, reason="r", actor="a", yes=False
    )


def _rows(report: PurgeReport) -> list[dict[str, Any]]:
    return [u.model_dump() for u in report.shared]


def _row(address: str, path: str, **where: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"branches": [], "staged": [], "tags": [], "commits": [], "commits_total": 0}
    return {"address": address, "path": path, **base, **where}


async def test_the_dry_run_names_every_other_ref_and_path(b: Backend) -> None:
    ids = await _history(b)
    at_main = await _dry(b, "main")  # B: main's head value
    assert at_main.addresses == [ids["B"]] and not at_main.shared_truncated
    assert _rows(at_main) == [
        _row(ids["B"], "copy.csv", branches=["feature"], commits=[ids["c3"]], commits_total=1),
        _row(ids["B"], "copy2.csv", branches=["dev"], staged=["dev"]),
        # feature's head still has main's secret.csv; dev's staging hides it, so dev is not listed
        _row(ids["B"], "secret.csv", branches=["feature"], commits=[ids["c3"]], commits_total=1),
    ]
    at_tag = await _dry(b, "t1")  # A: the tag's (and branch old's, and main~1's) value
    assert _rows(at_tag) == [_row(ids["A"], "secret.csv", branches=["old"])]
    everywhere = await _dry(b, "main", all_history=True)  # A, B, C: only the other paths remain
    assert everywhere.addresses == sorted([ids["A"], ids["B"], ids["C"]])
    assert _rows(everywhere) == [
        _row(ids["B"], "copy.csv", branches=["feature"], commits=[ids["c3"]], commits_total=1),
        _row(ids["B"], "copy2.csv", branches=["dev"], staged=["dev"]),
    ]
    repo = await b.g.repository(b.repo)
    for prefix in (kvkeys.PURGES_PREFIX, kvkeys.PURGED_PREFIX, kvkeys.PURGING_PREFIX):
        async for item in b.kv.scan(repo.partition, prefix):
            assert not item.key.startswith(prefix), item.key  # a dry run writes nothing
            break
    assert await b.objects.read_all(b.repo, "feature", "copy.csv") == b"vB"


async def test_a_bounded_search_says_it_stopped(b: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = await _history(b)
    monkeypatch.setattr(purge_shared, "MAX_USES", 1)
    capped = await _dry(b, "main")
    assert capped.shared_truncated and len(capped.shared) == 1
    assert capped.shared_note is not None and "more than 1 other uses" in capped.shared_note
    monkeypatch.setattr(purge_shared, "MAX_USES", 1000)
    monkeypatch.setattr(purge_shared, "MAX_ENTRIES", 1)
    stopped = await _dry(b, "main")
    assert stopped.shared_truncated and stopped.shared_note is not None
    assert "limit 1)" in stopped.shared_note
    monkeypatch.setattr(purge_shared, "MAX_ENTRIES", 5_000_000)
    monkeypatch.setattr(purge_shared, "MAX_COMMITS", 1)
    few = await _dry(b, "main", all_history=True)
    assert few.shared_truncated and few.shared_note is not None and "first 1 commits" in few.shared_note
    assert ids["B"] in few.addresses  # the purge's own walk is not bounded by the collateral search

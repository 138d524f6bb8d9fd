"""GC run files: lakeFS's exact shapes (commits.csv, summary.json), run.json, hostile files."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.errors import BadInputError, CorruptDataError, PreconditionFailedError
from lakefs_gc.rules import GCRules
from lakefs_gc.runs.reports import (
    MAX_SUMMARY_BYTES,
    RunManifest,
    Summary,
    iso_instant,
    parse_instant,
    parse_manifest,
    parse_summary,
    read_commits_csv,
    read_manifest,
    read_summary,
    write_commits_csv,
    write_manifest,
    write_summary,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)


def h(tag: str, i: int) -> str:
    return hashlib.sha256(f"{tag}{i}".encode()).hexdigest()


@pytest.fixture
async def store() -> AsyncIterator[MemoryBlockStore]:
    s = MemoryBlockStore(f"rep{uuid.uuid4().hex[:10]}")
    try:
        yield s
    finally:
        await s.close()


async def rows(pairs: list[tuple[str, str]]) -> AsyncIterator[tuple[str, str]]:
    for p in pairs:
        yield p


# -- commits.csv ------------------------------------------------------------------------------------


async def test_commits_csv_is_lakefs_shape(store: MemoryBlockStore) -> None:
    key = "ns/_lakefs/retention/gc/commits/run_id=r1/commits.csv"
    pairs = [(h("c", 1), h("m", 1)), (h("c", 2), "")]
    await write_commits_csv(store, key, rows(pairs))
    # What Go's csv.Writer produces for lakeFS's headers and rows: "\n" line ends, no quoting.
    expected = f"commit_id,expired,metarange_id\n{h('c', 1)},false,{h('m', 1)}\n{h('c', 2)},false,\n"
    assert await store.get(key) == expected.encode()
    assert [r async for r in read_commits_csv(store, key)] == [(c, False, m) for c, m in pairs]
    with pytest.raises(PreconditionFailedError):
        await write_commits_csv(store, key, rows([]))
    assert await store.get(key) == expected.encode()


async def test_commits_csv_streams_across_chunks(store: MemoryBlockStore) -> None:
    pairs = [(h("c", i), h("m", i % 7)) for i in range(12_000)]  # ~1.6 MB: several chunks both ways
    await write_commits_csv(store, "big.csv", rows(pairs))
    assert [(c, m) async for c, e, m in read_commits_csv(store, "big.csv") if not e] == pairs


async def test_commits_csv_reads_old_lakefs_rows(store: MemoryBlockStore) -> None:
    body = (
        f"commit_id,expired,metarange_id\r\n{h('c', 1)},true,{h('m', 1)}\r\n{h('c', 2)},false,{h('m', 2)}\n"
    )
    await store.put("old.csv", body.encode())
    assert [r async for r in read_commits_csv(store, "old.csv")] == [
        (h("c", 1), True, h("m", 1)),
        (h("c", 2), False, h("m", 2)),
    ]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"", "empty file"),
        (b"commit_id,expired\n", "header"),
        (b"commit_id,expired,metarange_id\n" + b"abc,false,\n", "not a commit id"),
        (f"commit_id,expired,metarange_id\n{h('c', 1)},FALSE,\n".encode(), "true/false"),
        (f"commit_id,expired,metarange_id\n{h('c', 1)},false\n".encode(), "3 columns"),
        (f"commit_id,expired,metarange_id\n{h('c', 1)},false,../../x\n".encode(), "metarange"),
        (f"commit_id,expired,metarange_id\n{h('c', 1)},false,".encode(), "truncated"),
        (b"commit_id,expired,metarange_id\n" + b"a" * 5000, "longer than"),
        ("commit_id,expired,metarange_id\n\u00e9,false,\n".encode(), "not a commit id"),
    ],
)
async def test_commits_csv_hostile(store: MemoryBlockStore, body: bytes, match: str) -> None:
    await store.put("bad.csv", body)
    with pytest.raises(CorruptDataError, match=match) as info:
        _ = [r async for r in read_commits_csv(store, "bad.csv")]
    assert info.value.file is not None and info.value.file.endswith("/bad.csv")


async def test_commits_csv_refuses_bad_rows(store: MemoryBlockStore) -> None:
    with pytest.raises(BadInputError, match="commit id"):
        await write_commits_csv(store, "x.csv", rows([("main", "")]))
    with pytest.raises(BadInputError, match="metarange"):
        await write_commits_csv(store, "x.csv", rows([(h("c", 1), "a,b")]))
    assert not await store.exists("x.csv")  # a failed stream leaves nothing behind


# -- summary.json -----------------------------------------------------------------------------------


def test_iso_instant_like_java() -> None:
    assert iso_instant(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    assert iso_instant(T0) == "2026-01-02T03:04:05.123Z"
    assert iso_instant(T0.replace(microsecond=123400)) == "2026-01-02T03:04:05.123400Z"
    assert iso_instant(T0.astimezone(timezone(timedelta(hours=2)))) == "2026-01-02T03:04:05.123Z"
    assert parse_instant("2026-01-02T03:04:05.123456789Z") == T0.replace(microsecond=123456)
    assert parse_instant("2026-01-02T03:04:05Z") == T0.replace(microsecond=0)
    for bad in ("2026-01-02 03:04:05Z", "2026-01-02T03:04:05+00:00", "2026-13-02T03:04:05Z", 5):
        with pytest.raises(ValueError):
            parse_instant(bad)


async def test_summary_exact_bytes_and_create_only(store: MemoryBlockStore) -> None:
    lakefs = Summary(
        run_id="r1",
        success=True,
        first_slice="g0slice",
        start_time=T0,
        cutoff_time=T0 - timedelta(days=1),
        num_deleted_objects=12,
    )
    # json4s compact(render(JObject(...))) in GarbageCollection.writeJsonSummary's field order.
    expected = (
        b'{"run_id":"r1","success":true,"first_slice":"g0slice","start_time":"2026-01-02T03:04:05.123Z",'
        b'"cutoff_time":"2026-01-01T03:04:05.123Z","num_deleted_objects":12}'
    )
    assert lakefs.to_bytes() == expected
    ours = lakefs.model_copy(update={"active_commits": 3, "ranges_read": 7, "listed": 40})
    assert ours.to_bytes() == expected[:-1] + b',"active_commits":3,"ranges_read":7,"listed":40}'
    assert parse_summary(ours.to_bytes(), file="f") == ours

    key = "ns/_lakefs/retention/gc/unified/r1/summary.json"
    assert await read_summary(store, key) is None
    await write_summary(store, key, ours)
    with pytest.raises(PreconditionFailedError):
        await write_summary(store, key, lakefs.model_copy(update={"success": False}))
    assert await read_summary(store, key) == ours


def test_summary_reads_lakefs_written_file() -> None:
    raw = (
        b'{"run_id":"cn4gs6q5ri1s73fe0dq0","success":false,"first_slice":"","start_time":'
        b'"2024-05-06T07:08:09.123456789Z","cutoff_time":"2024-05-05T07:08:09.1Z","num_deleted_objects":0,'
        b'"future_field":{"x":1}}'
    )
    s = parse_summary(raw, file="f")
    assert (s.success, s.first_slice, s.num_deleted_objects, s.active_commits) == (False, "", 0, None)
    assert s.start_time == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert s.cutoff_time == datetime(2024, 5, 5, 7, 8, 9, 100000, tzinfo=UTC)


GOOD = {
    "run_id": "r",
    "success": True,
    "first_slice": "",
    "start_time": "2026-01-01T00:00:00Z",
    "cutoff_time": "2026-01-01T00:00:00Z",
    "num_deleted_objects": 1,
}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"success": "true"}, "success"),
        ({"num_deleted_objects": -1}, "num_deleted_objects"),
        ({"num_deleted_objects": 1.0}, "num_deleted_objects"),
        ({"start_time": "2026-01-01T00:00:00"}, "start_time"),
        ({"cutoff_time": None}, "cutoff_time"),
        ({"run_id": None}, "run_id"),
        ({"listed": -5}, "listed"),
    ],
)
def test_summary_hostile_fields(change: dict[str, object], match: str) -> None:
    with pytest.raises(CorruptDataError, match=match) as info:
        parse_summary(json.dumps({**GOOD, **change}).encode(), file="s3://b/summary.json")
    assert info.value.file == "s3://b/summary.json"
    missing = dict(GOOD)
    del missing["first_slice"]
    with pytest.raises(CorruptDataError, match="first_slice"):
        parse_summary(json.dumps(missing).encode(), file="f")


@pytest.mark.parametrize(
    "raw", [b"", b"{", b"\xff\xfe", b"[]", b"null", b"[" * 100_000, b" " * (MAX_SUMMARY_BYTES + 1)]
)
def test_summary_hostile_bytes(raw: bytes) -> None:
    with pytest.raises(CorruptDataError):
        parse_summary(raw, file="f")


async def test_summary_oversized_in_store(store: MemoryBlockStore) -> None:
    await store.put("s.json", json.dumps({**GOOD, "pad": "x" * MAX_SUMMARY_BYTES}).encode())
    with pytest.raises(CorruptDataError, match="larger than"):
        await read_summary(store, "s.json")


# -- run.json ---------------------------------------------------------------------------------------


def manifest(**kw: object) -> RunManifest:
    base: dict[str, object] = {
        "run_id": "r1",
        "repository": "repo1",
        "mode": "full",
        "start_time": T0,
        "now": T0,
        "cutoff_time": T0 - timedelta(hours=24),
        "min_age_seconds": 86400,
        "rules": GCRules.of(14, {"main": 21}),
        "tags_policy": "pin",
        "pins": (h("c", 2), h("c", 1), h("c", 2)),
    }
    base.update(kw)
    return RunManifest.model_validate(base)


async def test_manifest_round_trip_and_create_only(store: MemoryBlockStore) -> None:
    m = manifest()
    assert m.pins == tuple(sorted({h("c", 1), h("c", 2)}))
    data = json.loads(m.to_bytes())
    assert data["rules"] == {
        "default_retention_days": 14,
        "branches": [{"branch_id": "main", "retention_days": 21}],
    }
    assert data["cutoff_time"] == "2026-01-01T03:04:05.123Z"
    await write_manifest(store, "run.json", m)
    with pytest.raises(PreconditionFailedError):
        await write_manifest(store, "run.json", manifest(mode="mark"))
    assert await read_manifest(store, "run.json") == m
    no_rules = manifest(rules=None, tags_policy="ignore", pins=(), mode="sweep", mark_id="r0")
    assert parse_manifest(no_rules.to_bytes(), file="f") == no_rules


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"pins": ["HEAD"]}, "pins"),
        ({"mode": "nuke"}, "mode"),
        ({"run_id": "../x"}, "run_id"),
        ({"rules": {"default_retention_days": -1, "branches": []}}, "rules"),
        ({"version": 2}, "version"),
        ({"extra": 1}, "extra"),
        ({"now": "yesterday"}, "now"),
    ],
)
def test_manifest_hostile(change: dict[str, object], match: str) -> None:
    body = json.loads(manifest().to_bytes())
    body.update(change)
    with pytest.raises(CorruptDataError, match=match):
        parse_manifest(json.dumps(body).encode(), file="run.json")

"""GC additions to lakefs_core.keys: slice hours, object-id times, run ids, GC paths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.keys import (
    SLICE_MAX_SEQ,
    check_run_id,
    new_object_id,
    new_run_id,
    new_slice_id,
    object_id_time,
    slice_hour,
)
from lakefs_core.namespace import StorageNamespace

WHEN = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(3999, 12, 31, 22), timezones=st.just(UTC)
)


@given(when=WHEN, seq=st.integers(0, SLICE_MAX_SEQ))
def test_slice_hour_is_the_hour_the_slice_id_encodes(when: datetime, seq: int) -> None:
    hour = slice_hour(new_slice_id(when, seq=seq))
    assert hour == when.replace(minute=0, second=0, microsecond=0)
    assert hour.tzinfo is not None


def test_slice_hour_refuses_foreign_names() -> None:
    for bad in ["", "0" * 9, "0" * 11, "0000000w00", "ABCDEFGHIJ", "0000000000", "../../x", 7]:
        with pytest.raises(BadInputError):
            slice_hour(bad)  # type: ignore[arg-type]


def test_object_id_time() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    t = object_id_time(new_object_id())
    after = datetime.now(UTC) + timedelta(milliseconds=1)
    assert t is not None and before <= t <= after
    for foreign in ["", "x" * 26, "0" * 25, "0" * 27, "0123456789ABCDEFGHIJKLMNOP", "part-0001.parquet", 3]:
        assert object_id_time(foreign) is None  # type: ignore[arg-type]


def test_run_ids_sort_by_time_and_are_unique() -> None:
    ids = [new_run_id() for _ in range(500)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    early = new_run_id(datetime(2030, 1, 1, tzinfo=UTC))
    later = new_run_id(datetime(2031, 6, 1, 8, 9, 10, 11000, tzinfo=UTC))
    assert early < later and later.startswith("20310601T080910011Z-")
    assert new_run_id(datetime(2000, 1, 1, tzinfo=UTC)) > later  # never goes back in one process
    for rid in [*ids, early, later]:
        assert check_run_id(rid) == rid
    with pytest.raises(BadInputError):
        new_run_id(datetime(2030, 1, 1))  # naive


def test_gc_paths() -> None:
    ns = StorageNamespace.parse("s3://bucket/repos/r1")
    rid = "20260101T000000000Z-0123456789abcdef"
    assert ns.gc_path(rid) == f"repos/r1/_lakefs/retention/gc/unified/{rid}"
    assert (
        ns.gc_path(rid, "sweep", "failed.text")
        == f"repos/r1/_lakefs/retention/gc/unified/{rid}/sweep/failed.text"
    )
    assert ns.gc_commits_path(rid) == f"repos/r1/_lakefs/retention/gc/commits/run_id={rid}/commits.csv"
    assert ns.gc_rules_key() == "repos/r1/_lakefs/retention/gc/rules/config.json"
    local = StorageNamespace.parse("local:///data/r2")
    assert local.gc_path("a1b2-c3d4", "summary.json") == "_lakefs/retention/gc/unified/a1b2-c3d4/summary.json"
    uuid_run = "6d1e0f3c-1b2a-4c5d-8e9f-0a1b2c3d4e5f"  # lakeFS's run ids are UUIDs
    assert local.gc_commits_path(uuid_run).endswith(f"run_id={uuid_run}/commits.csv")


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "-x", "x" * 129, "a b", "a\n", "../x", 5, None])
def test_gc_paths_refuse_hostile_run_ids(bad: object) -> None:
    ns = StorageNamespace.parse("s3://bucket/r")
    with pytest.raises(BadInputError):
        ns.gc_path(bad)  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        ns.gc_commits_path(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "x\0"])
def test_gc_path_parts_are_single_segments(bad: str) -> None:
    ns = StorageNamespace.parse("s3://bucket/r")
    with pytest.raises(BadInputError):
        ns.gc_path("run1", "sweep", bad)

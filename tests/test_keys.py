"""lakefs_core.keys: namespace parsing, the object layout of spec section 1, addresses and ids."""

from __future__ import annotations

import base64
import dataclasses
import re
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.keys import (
    SLICE_FIRST_SEQS,
    SLICE_MAX_SEQ,
    AddressType,
    SliceAllocator,
    encode_object_ids,
    new_object_id,
    new_object_ids,
    new_relative_address,
    new_slice_id,
    random_first_seq,
    relative_address,
)
from lakefs_core.namespace import StorageNamespace
from tests.support.profiles import examples

TABLE_ID = "a" * 64
B32HEX = re.compile(r"^[0-9a-v]+$")


# -- namespaces ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "normal", "store_uri", "prefix"),
    [
        ("s3://bucket/some/prefix", "s3://bucket/some/prefix", "s3://bucket", "some/prefix"),
        ("s3://bucket/some/prefix/", "s3://bucket/some/prefix", "s3://bucket", "some/prefix"),
        ("s3://bucket", "s3://bucket", "s3://bucket", ""),
        ("s3://bucket/", "s3://bucket", "s3://bucket", ""),
        ("mem://name/repo", "mem://name/repo", "mem://name", "repo"),
        ("mem://name", "mem://name", "mem://name", ""),
        ("local:///data/repo1", "local:///data/repo1", "local:///data/repo1", ""),
        ("local:///data/repo1/", "local:///data/repo1", "local:///data/repo1", ""),
    ],
)
def test_parse(uri: str, normal: str, store_uri: str, prefix: str) -> None:
    ns = StorageNamespace.parse(uri)
    assert (ns.uri, ns.store_uri, ns.prefix) == (normal, store_uri, prefix)
    assert ns == StorageNamespace(uri)
    assert str(ns) == normal
    assert ns.scheme == uri.split(":", 1)[0]


@pytest.mark.parametrize(
    "uri",
    [
        "bucket/prefix",
        "gs://bucket/prefix",
        "s3://b",
        "s3://bucket/a//b",
        "s3://bucket/../x",
        "s3://bucket/./x",
        "mem:///x",
        "local://relative",
        "local:///a/../b",
        "",
    ],
)
def test_parse_rejects(uri: str) -> None:
    with pytest.raises(BadInputError) as info:
        StorageNamespace.parse(uri)
    assert info.value.field == "storage_namespace"


def test_namespace_is_frozen() -> None:
    ns = StorageNamespace.parse("s3://bucket/p")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ns.prefix = "other"  # type: ignore[misc]


# -- layout (spec section 1) ---------------------------------------------------------------------------


def test_layout_with_prefix() -> None:
    ns = StorageNamespace.parse("s3://bucket/some/prefix")
    assert ns.table_key(TABLE_ID) == f"some/prefix/_lakefs/{TABLE_ID}"
    assert ns.dummy_key() == "some/prefix/_lakefs/dummy"
    assert ns.tables_prefix() == "some/prefix/_lakefs/"
    assert ns.data_prefix() == "some/prefix/data/"
    assert ns.data_key("slice1", "obj1") == "some/prefix/data/slice1/obj1"
    assert relative_address("slice1", "obj1") == "data/slice1/obj1"
    assert ns.relative_address("slice1", "obj1") == "data/slice1/obj1"
    assert ns.key(relative_address("slice1", "obj1")) == ns.data_key("slice1", "obj1")
    assert ns.full_address("data/slice1/obj1") == "s3://bucket/some/prefix/data/slice1/obj1"
    assert ns.table_key(TABLE_ID).startswith(ns.tables_prefix())
    assert ns.data_key("s", "o").startswith(ns.data_prefix())


def test_layout_without_prefix() -> None:
    for uri in ("s3://bucket", "local:///data/repo1", "mem://x"):
        ns = StorageNamespace.parse(uri)
        assert ns.table_key(TABLE_ID) == f"_lakefs/{TABLE_ID}"
        assert ns.dummy_key() == "_lakefs/dummy"
        assert ns.data_key("s", "o") == "data/s/o"
        assert ns.tables_prefix() == "_lakefs/"
        assert ns.data_prefix() == "data/"
    assert (
        StorageNamespace.parse("local:///data/repo1").full_address("data/s/o")
        == "local:///data/repo1/data/s/o"
    )


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "x\0y"])
def test_ids_must_be_single_segments(bad: str) -> None:
    ns = StorageNamespace.parse("s3://bucket/p")
    with pytest.raises(BadInputError):
        ns.table_key(bad)
    with pytest.raises(BadInputError):
        ns.data_key(bad, "o")
    with pytest.raises(BadInputError):
        relative_address("s", bad)


# -- addresses -----------------------------------------------------------------------------------------


def test_address_types_match_the_protobuf_enum() -> None:
    for kind in AddressType:
        assert catalog_pb2.Entry.AddressType.Value(kind.name) == kind.value


def test_relative_addresses_resolve_in_the_namespace() -> None:
    ns = StorageNamespace.parse("s3://bucket/repo")
    assert ns.address_key("data/s/o", AddressType.RELATIVE) == ("s3://bucket", "repo/data/s/o")
    # Opaque: a presigned-upload suffix stays part of the key.
    assert ns.address_key("data/s/o,c2lnbmF0dXJl", catalog_pb2.Entry.RELATIVE) == (
        "s3://bucket",
        "repo/data/s/o,c2lnbmF0dXJl",
    )
    local = StorageNamespace.parse("local:///srv/lakefs/repo")
    assert local.address_key("data/s/o") == ("local:///srv/lakefs/repo", "data/s/o")


def test_full_addresses_resolve_to_their_own_store() -> None:
    ns = StorageNamespace.parse("s3://bucket/repo")
    assert ns.address_key("s3://other-bucket/imports/a.csv", AddressType.FULL) == (
        "s3://other-bucket",
        "imports/a.csv",
    )
    assert ns.address_key("s3://bucket/repo/data/s/o", AddressType.FULL) == ("s3://bucket", "repo/data/s/o")
    assert ns.address_key("s3://bucket/k?v=1#x", AddressType.FULL) == ("s3://bucket", "k?v=1#x")
    assert ns.address_key("mem://m/k", AddressType.FULL) == ("mem://m", "k")
    assert ns.address_key("local:///mnt/in/f.parquet", AddressType.FULL) == ("local:///mnt/in", "f.parquet")
    assert ns.address_key("local:///f", AddressType.FULL) == ("local:///", "f")
    local = StorageNamespace.parse("local:///srv/repo")
    assert local.address_key("local:///srv/repo/data/s/o", AddressType.FULL) == (
        "local:///srv/repo",
        "data/s/o",
    )
    assert local.address_key("local:///srv/repository/x", AddressType.FULL) == (
        "local:///srv/repository",
        "x",
    )


def test_deprecated_by_prefix_addresses() -> None:
    ns = StorageNamespace.parse("s3://bucket/repo")
    assert ns.address_key("s3://b2b/k", AddressType.BY_PREFIX_DEPRECATED) == ("s3://b2b", "k")
    assert ns.address_key("data/s/o", 0) == ("s3://bucket", "repo/data/s/o")


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("", AddressType.RELATIVE),
        ("/data/s/o", AddressType.RELATIVE),
        ("data/../../escape", AddressType.RELATIVE),
        ("s3://bucket/k", AddressType.RELATIVE),
        ("data/s/o", AddressType.FULL),
        ("s3://bucket", AddressType.FULL),
        ("s3://bucket/", AddressType.FULL),
        ("gs://bucket/k", AddressType.FULL),
        ("local://host/k", AddressType.FULL),
        ("local:///dir/", AddressType.FULL),
        ("data/s/o", 7),
    ],
)
def test_bad_addresses(address: str, kind: int) -> None:
    ns = StorageNamespace.parse("s3://bucket/repo")
    with pytest.raises(BadInputError):
        ns.address_key(address, kind)


# -- ids -----------------------------------------------------------------------------------------------


def test_newer_slices_sort_first() -> None:
    t0 = datetime(2024, 5, 17, 10, 30, tzinfo=UTC)
    times = [t0 + timedelta(hours=h) for h in (0, 1, 2, 24, 24 * 365 * 50)]
    ids = [new_slice_id(t) for t in times]
    assert sorted(ids) == list(reversed(ids))
    assert len(set(ids)) == len(ids)
    for slice_id in ids:
        assert len(slice_id) == 10
        assert B32HEX.match(slice_id)


def test_slice_rolls_every_hour() -> None:
    t0 = datetime(2024, 5, 17, 10, 0, tzinfo=UTC)
    assert new_slice_id(t0) == new_slice_id(t0 + timedelta(minutes=59, seconds=59))
    assert new_slice_id(t0) != new_slice_id(t0 + timedelta(hours=1))
    # The same instant in another time zone is the same slice.
    assert new_slice_id(t0) == new_slice_id(t0.astimezone(timezone(timedelta(hours=5, minutes=30))))
    # Later rolls within an hour sort first too, and before any older hour.
    rolls = [new_slice_id(t0, seq=s) for s in range(4)]
    assert sorted(rolls) == list(reversed(rolls))
    assert new_slice_id(t0, seq=SLICE_MAX_SEQ) > new_slice_id(t0 + timedelta(hours=1))


def test_slice_rejects_naive_and_bad_seq() -> None:
    with pytest.raises(BadInputError):
        new_slice_id(datetime(2024, 1, 1))
    with pytest.raises(BadInputError):
        new_slice_id(datetime(2024, 1, 1, tzinfo=UTC), seq=SLICE_MAX_SEQ + 1)


def test_slice_allocator_rolls_by_hour_and_count() -> None:
    now = [datetime(2024, 5, 17, 10, 0, tzinfo=UTC)]
    alloc = SliceAllocator(max_objects=3, clock=lambda: now[0], first_seq=lambda: 0)
    first = [alloc.next_slice() for _ in range(3)]
    assert len(set(first)) == 1
    second = alloc.next_slice()
    assert second < first[0]  # rolled after 3 objects: the new slice sorts first
    now[0] += timedelta(hours=1)
    third = alloc.next_slice()
    assert third < second
    assert third == new_slice_id(now[0])
    address = alloc.new_relative_address()
    assert re.match(r"^data/[0-9a-v]{10}/[0-9a-v]{26}$", address)
    # a batch counts against the slice like single calls: 1 more in this slice, then 3 per slice
    batch = alloc.new_relative_addresses(8)
    slices = [a.split("/")[1] for a in batch]
    assert slices[0] == third and len(set(slices)) == 4 and slices == sorted(slices, reverse=True)
    assert [slices.count(s) for s in dict.fromkeys(slices)] == [1, 3, 3, 1]
    assert len({a.split("/")[2] for a in batch}) == 8
    assert all(re.match(r"^data/[0-9a-v]{10}/[0-9a-v]{26}$", a) for a in batch)


@settings(max_examples=examples(2), deadline=None)
@given(
    millis=st.binary(min_size=6, max_size=6), noise=st.lists(st.binary(min_size=10, max_size=10), max_size=8)
)
def test_batched_id_encoding_is_the_per_id_encoding(millis: bytes, noise: list[bytes]) -> None:
    """The batch encoder (one base32 call for every id's first 15 bytes, the last byte by table)
    gives each id exactly what encoding its 16 bytes alone gives."""
    expected = [base64.b32hexencode(millis + n).decode().rstrip("=").lower() for n in noise]
    assert encode_object_ids(millis, b"".join(noise)) == expected
    with pytest.raises(BadInputError):
        encode_object_ids(millis, b"x" * 11)


def test_writers_in_one_hour_use_slices_of_their_own() -> None:
    """Every allocator (a process's uploads) starts an hour at a random sequence number: 64 of them
    in the same hour do not all share a slice (they would with probability 2**-14**63), each keeps
    rolling from its start, and each new hour draws again."""
    now = [datetime(2024, 5, 17, 10, 0, tzinfo=UTC)]
    writers = [SliceAllocator(max_objects=2, clock=lambda: now[0]) for _ in range(64)]
    firsts = [w.next_slices(3) for w in writers]
    assert len({f[0] for f in firsts}) > 1
    hour = new_slice_id(now[0])[:7]
    assert all(s[:7] == hour for f in firsts for s in f)  # the hour, which GC reads, is kept
    for w, f in zip(writers, firsts, strict=True):
        assert f[0] == f[1] != f[2] and f[2] < f[1]  # rolled after 2 objects: the new one sorts first
        assert f[0] == new_slice_id(now[0], seq=w._seq - 1)
        assert 0 <= w._seq - 1 < SLICE_FIRST_SEQS
    drawn: list[int] = []
    one = SliceAllocator(clock=lambda: now[0], first_seq=lambda: drawn.append(7) or 7)
    one.next_slice()
    now[0] += timedelta(hours=1)
    assert one.next_slice() == new_slice_id(now[0], seq=7) and drawn == [7, 7]
    assert {random_first_seq() for _ in range(200)} <= set(range(SLICE_FIRST_SEQS))


def _one_by_one(alloc: SliceAllocator, now: datetime) -> str:
    """The per-object allocation ``next_slices`` must equal (the allocator's logic before batches)."""
    hour = int(now.timestamp() // 3600)
    if hour != alloc._hour:
        alloc._hour, alloc._seq, alloc._count = hour, 0, 0
    elif alloc._count >= alloc._max and alloc._seq < SLICE_MAX_SEQ:
        alloc._seq, alloc._count = alloc._seq + 1, 0
    alloc._count += 1
    return new_slice_id(now, seq=alloc._seq)


@settings(max_examples=examples(2), deadline=None)
@given(
    max_objects=st.integers(1, 5),
    near_last=st.booleans(),
    steps=st.lists(st.tuples(st.integers(0, 12), st.booleans()), min_size=1, max_size=12),
)
def test_batched_slices_are_the_one_by_one_slices(
    max_objects: int, near_last: bool, steps: list[tuple[int, bool]]
) -> None:
    """``next_slices(n)`` gives what ``n`` single allocations give at one instant: rolling to the
    next slice every ``max_objects`` objects, to a new hour's first slice, and staying on the last
    sequence number once it is reached."""
    now = [datetime(2024, 5, 17, 10, 0, tzinfo=UTC)]
    batched = SliceAllocator(max_objects=max_objects, clock=lambda: now[0], first_seq=lambda: 0)
    model = SliceAllocator(max_objects=max_objects, clock=lambda: now[0], first_seq=lambda: 0)
    assert batched.next_slices(1) == [_one_by_one(model, now[0])]
    if near_last:  # reaching the last sequence number takes 2**15 slices otherwise
        batched._seq = model._seq = SLICE_MAX_SEQ - 1
    for n, next_hour in steps:
        if next_hour:
            now[0] += timedelta(hours=1)
        assert batched.next_slices(n) == [_one_by_one(model, now[0]) for _ in range(n)]
        assert (batched._seq, batched._count) == (model._seq, model._count)


def test_object_ids_are_unique_and_path_safe() -> None:
    ids: list[str] = []

    def make() -> None:
        ids.extend(new_object_id() for _ in range(2500))
        ids.extend(new_object_ids(2500))  # one clock read and one urandom for all

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == len(ids) == 20000
    for object_id in ids[:100]:
        assert len(object_id) == 26
        assert B32HEX.match(object_id)


def test_new_relative_address_is_fresh() -> None:
    now = datetime(2024, 5, 17, 10, 0, tzinfo=UTC)
    a, b = new_relative_address(now), new_relative_address(now)
    assert a != b
    assert a.split("/")[:2] == b.split("/")[:2] == ["data", new_slice_id(now)]

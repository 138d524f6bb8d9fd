"""One address classification (StorageNamespace.relative_of) and one range-address reader
(lakefs_core.committed.addresses), shared by mirror validation and GC.

Property tests (hypothesis) over namespaces of every scheme and relative paths: a relative address
and the full address of the same object classify alike; objects of other stores, of sibling or
enclosing prefixes are outside; what is inside maps back to the very store key ``address_key``
resolves. Then the reader over real range and metarange tables built by the writer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.block.local import LocalBlockStore
from lakefs_core.committed import iter_range_addresses, metarange_ranges, read_table
from lakefs_core.committed.addresses import iter_range_entries
from lakefs_core.committed.writer import METARANGES, RANGES, RangeBuilder, build_metarange
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.format.records import (
    ADDRESS_FULL,
    ADDRESS_RELATIVE,
    RangeInfo,
    entry_to_value,
    make_entry,
    metarange_record,
)
from lakefs_core.format.sstable.reader import TableReader
from lakefs_core.keys import AddressType, table_name
from lakefs_core.namespace import StorageNamespace

SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)
RELATIVE = st.lists(SEGMENT, min_size=1, max_size=5).map("/".join)
PREFIX = st.lists(SEGMENT, min_size=0, max_size=3).map("/".join)
BUCKET = st.sampled_from(["bucket-a", "bucket-b", "data.lake"])


@st.composite
def namespaces(draw: st.DrawFn) -> StorageNamespace:
    scheme = draw(st.sampled_from(["s3", "mem", "local"]))
    prefix = draw(PREFIX)
    if scheme == "local":
        return StorageNamespace(f"local:///srv/{draw(SEGMENT)}/{prefix}".rstrip("/"))
    return StorageNamespace(f"{scheme}://{draw(BUCKET)}/{prefix}".rstrip("/"))


# -- inside: relative and full forms agree --------------------------------------------------------------


@given(ns=namespaces(), rel=RELATIVE)
def test_relative_and_full_forms_of_one_object_classify_alike(ns: StorageNamespace, rel: str) -> None:
    full = ns.full_address(rel)
    for address, kind in (
        (rel, AddressType.RELATIVE),
        (rel, AddressType.BY_PREFIX_DEPRECATED),
        (full, AddressType.FULL),
        (full, AddressType.BY_PREFIX_DEPRECATED),
    ):
        assert ns.relative_of(address, kind) == rel, (address, kind)
        assert ns.relative_of(address, int(kind)) == rel  # the raw protobuf number too
        # ...and it is the very key the entry resolves to, in this namespace's store
        assert ns.address_key(address, kind) == (ns.store_uri, ns.key(rel))


@given(ns=namespaces(), rel=RELATIVE)
def test_a_namespace_reparsed_from_its_canonical_form_classifies_the_same(
    ns: StorageNamespace, rel: str
) -> None:
    again = StorageNamespace(ns.canonical)
    assert again.relative_of(ns.full_address(rel), AddressType.FULL) == rel


# -- outside: other stores, siblings, enclosing prefixes ---------------------------------------------------


@given(ns=namespaces(), rel=RELATIVE, other=SEGMENT)
def test_objects_outside_the_namespace_are_external(ns: StorageNamespace, rel: str, other: str) -> None:
    scheme = ns.scheme
    if scheme == "local":
        root = ns.store_uri
        outside = [f"{root}-{other}/{rel}", f"local:///elsewhere/{other}/{rel}"]
    else:
        location = ns.store_uri.split("://", 1)[1]
        outside = [f"{scheme}://zz-{location}/{ns.key(rel)}"]  # another bucket, same key
        if ns.prefix:
            outside.append(
                f"{ns.store_uri}/{ns.prefix}x/{rel}"
            )  # a sibling prefix (s3://bkt/ab vs s3://bkt/a)
            parent = ns.prefix.rpartition("/")[0]
            outside.append(f"{ns.store_uri}/{parent + '/' if parent else ''}{other}-sibling/{rel}")
        other_scheme = "mem" if scheme == "s3" else "s3"
        outside.append(f"{other_scheme}://{location}/{ns.key(rel)}")  # same names, other scheme
    for address in outside:
        assert ns.relative_of(address, AddressType.FULL) is None, address
        assert ns.relative_of(address, AddressType.BY_PREFIX_DEPRECATED) is None, address


def test_examples() -> None:
    ns = StorageNamespace("s3://bkt/repos/one")
    assert ns.relative_of("data/g1/o1", AddressType.RELATIVE) == "data/g1/o1"
    assert ns.relative_of("s3://bkt/repos/one/data/g1/o1", AddressType.FULL) == "data/g1/o1"
    assert ns.relative_of("s3://bkt/repos/one/_lakefs/abc", AddressType.FULL) == "_lakefs/abc"
    assert ns.relative_of("s3://bkt/repos/oneX/data/g1/o1", AddressType.FULL) is None
    assert ns.relative_of("s3://bkt/repos/data/g1/o1", AddressType.FULL) is None
    assert ns.relative_of("s3://imported/tables/part-0", AddressType.FULL) is None
    whole_bucket = StorageNamespace("s3://bkt")
    assert whole_bucket.relative_of("s3://bkt/anything/at/all", AddressType.FULL) == "anything/at/all"
    local = StorageNamespace("local:///srv/lake/repo")
    assert local.relative_of("local:///srv/lake/repo/data/g/o", AddressType.FULL) == "data/g/o"
    assert local.relative_of("local:///srv/lake/repo2/data/g/o", AddressType.FULL) is None
    assert local.relative_of("local:///srv/lake/data/g/o", AddressType.FULL) is None


# -- hostile addresses: refused, never guessed -------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        (
            "s3://bkt/repos/one/data/../../two/data/x",
            AddressType.FULL,
        ),  # a literal S3 key
        ("s3://bkt/repos/one/data//x", AddressType.FULL),
        ("s3://bkt/repos/one/./data/x", AddressType.FULL),
        ("s3://bkt/repos/one/", AddressType.FULL),
        ("local:///srv/lake/../x", AddressType.FULL),
        ("../data/x", AddressType.RELATIVE),
        ("/data/x", AddressType.RELATIVE),
        ("s3://bkt/repos/one/data/x", AddressType.RELATIVE),  # absolute but typed RELATIVE
        ("data/x", AddressType.FULL),  # relative but typed FULL
        ("", AddressType.RELATIVE),
        ("gs://b/x", AddressType.FULL),
        ("data/x", 7),
    ],
)
def test_unusable_addresses_raise(address: str, kind: int) -> None:
    ns = StorageNamespace("s3://bkt/repos/one")
    with pytest.raises(BadInputError, match="address"):
        ns.relative_of(address, kind)


# -- reading the addresses of a range ---------------------------------------------------------------------


def _range(entries: list[tuple[bytes, str, int, int]]) -> tuple[str, bytes]:
    builder = RangeBuilder(RANGES)
    for path, address, kind, size in entries:
        identity, data = make_entry(address, size, "etag", address_type=kind)  # type: ignore[arg-type]
        builder.add(path, entry_to_value(identity, data))
    built = builder.finish()
    return built.id, built.data


ENTRIES = [
    (b"a/one", "data/g1/o1", ADDRESS_RELATIVE, 1),
    (b"a/two", "s3://imported/x/part-0", ADDRESS_FULL, 22),
    (b"b/three", "s3://bkt/repos/one/data/g1/o3", ADDRESS_FULL, 333),
]


def test_iter_range_addresses_from_bytes_and_from_a_reader() -> None:
    table_id, data = _range(ENTRIES)
    name = table_name(table_id)
    want = [(path, address, int(kind)) for path, address, kind, _ in ENTRIES]
    assert list(iter_range_addresses(data, name=name)) == want
    assert list(iter_range_addresses(TableReader(data, name=name), name=name)) == want
    assert [e.size for e in iter_range_entries(data, name=name)] == [1, 22, 333]
    ns = StorageNamespace("s3://bkt/repos/one")
    classified = [ns.relative_of(address, kind) for _, address, kind in iter_range_addresses(data, name=name)]
    assert classified == ["data/g1/o1", None, "data/g1/o3"]


def test_a_corrupt_range_raises_naming_the_table() -> None:
    table_id, data = _range(ENTRIES)
    name = table_name(table_id)
    broken = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
    with pytest.raises(CorruptDataError) as info:
        list(iter_range_addresses(broken, name=name))
    assert table_id in str(info.value)
    with pytest.raises(CorruptDataError):
        list(iter_range_addresses(b"not a table", name=name))


def test_a_metarange_is_not_a_range() -> None:
    info = RangeInfo("a" * 64, b"a", b"b", 10, 2)
    built = build_metarange([info])
    with pytest.raises(CorruptDataError):
        list(iter_range_addresses(built.data, name=table_name(built.id)))


def test_metarange_ranges_in_order_and_checked() -> None:
    infos = [RangeInfo("a" * 64, b"a", b"b", 10, 2), RangeInfo("b" * 64, b"c", b"d", 20, 3)]
    built = build_metarange(infos)
    assert list(metarange_ranges(built.data, name=table_name(built.id))) == infos
    # overlapping spans are corrupt, whatever order the writer accepted them in
    builder = RangeBuilder(METARANGES)
    for info in (RangeInfo("a" * 64, b"a", b"c", 1, 1), RangeInfo("b" * 64, b"b", b"d", 1, 1)):
        builder.add(*metarange_record(info))
    bad = builder.finish()
    with pytest.raises(CorruptDataError):
        list(metarange_ranges(bad.data, name=table_name(bad.id)))


async def test_read_table_is_one_uncached_get(tmp_path: Path) -> None:
    table_id, data = _range(ENTRIES)
    ns = StorageNamespace(f"local://{tmp_path}/ns")
    store = LocalBlockStore(ns.store_uri[len("local://") :])
    try:
        await store.put(ns.table_key(table_id), data)
        assert await read_table(store, ns, table_id) == data
        with pytest.raises(NotFoundError, match="b" * 64):
            await read_table(store, ns, "b" * 64)
        with pytest.raises(BadInputError):
            await read_table(store, ns, "../escape")
    finally:
        await store.close()

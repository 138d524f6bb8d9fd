"""GC rules: lakeFS's JSON shape, lakeFS's protobuf bytes, storage, and hostile inputs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.block.base import BlockStore
from lakefs_core.block.local import LocalBlockStore
from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.namespace import StorageNamespace
from lakefs_gc.rules import (
    INT32_MAX,
    MAX_BRANCH_RULES,
    MAX_RULES_BYTES,
    GCRules,
    decode_rules,
    delete_rules,
    load_rules,
    parse_rules_json,
    save_rules,
    widest_rules,
)
from tests.support.profiles import examples


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32 is sign-extended to 10 bytes on the wire
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def map_entry(key: str, value: int) -> bytes:
    body = b"\x0a" + varint(len(key.encode())) + key.encode() + b"\x10" + varint(value)
    return b"\x12" + varint(len(body)) + body


def test_bytes_match_lakefs_schema() -> None:
    """Hand-encoded per lakeFS's graveler.proto: field 1 int32 varint, field 2 map entries
    (key = field 1 string, value = field 2 int32), entries sorted by key when deterministic."""
    rules = parse_rules_json(
        {
            "default_retention_days": 14,
            "branches": [
                {"branch_id": "main", "retention_days": 21},
                {"branch_id": "dev", "retention_days": 300},
            ],
        }
    )
    expected = b"\x08\x0e" + map_entry("dev", 300) + map_entry("main", 21)
    assert expected == b"\x08\x0e\x12\x08\x0a\x03dev\x10\xac\x02\x12\x08\x0a\x04main\x10\x15"
    assert rules.to_proto_bytes() == expected
    # And the generated lakeFS message reads them back with the same values.
    msg = graveler_pb2.GarbageCollectionRules.FromString(expected)
    assert msg.default_retention_days == 14 and dict(msg.branch_retention_days) == {"main": 21, "dev": 300}
    assert decode_rules(expected, file="f") == rules
    # Go writes map entries in random order: any order decodes to the same rules.
    assert decode_rules(b"\x08\x0e" + map_entry("main", 21) + map_entry("dev", 300), file="f") == rules


def test_json_shape_round_trip() -> None:
    body = {"default_retention_days": 14, "branches": [{"branch_id": "main", "retention_days": 21}]}
    rules = parse_rules_json(body)
    assert rules.to_json() == body
    assert rules.retention_days("main") == 21 and rules.retention_days("other") == 14
    assert parse_rules_json(rules.to_json()) == rules


def test_zero_default_and_no_branches_is_empty_file() -> None:
    """proto3 omits defaults: lakeFS writes zero bytes and then reads "no rules". Kept as is."""
    rules = GCRules.of(0)
    assert rules.to_proto_bytes() == b""
    assert decode_rules(b"", file="f") is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"branches": []}, "default_retention_days"),
        ({"default_retention_days": 1}, "branches"),
        ({"default_retention_days": -1, "branches": []}, "default_retention_days"),
        ({"default_retention_days": INT32_MAX + 1, "branches": []}, "default_retention_days"),
        ({"default_retention_days": 1.5, "branches": []}, "default_retention_days"),
        ({"default_retention_days": "1", "branches": []}, "default_retention_days"),
        ({"default_retention_days": True, "branches": []}, "default_retention_days"),
        (
            {"default_retention_days": 1, "branches": [{"branch_id": "a/b", "retention_days": 1}]},
            "branches.0.branch_id",
        ),
        (
            {"default_retention_days": 1, "branches": [{"branch_id": "", "retention_days": 1}]},
            "branches.0.branch_id",
        ),
        (
            {"default_retention_days": 1, "branches": [{"branch_id": "m", "retention_days": -3}]},
            "branches.0.retention_days",
        ),
        ({"default_retention_days": 1, "branches": [{"branch_id": "m"}]}, "branches.0.retention_days"),
        (
            {"default_retention_days": 1, "branches": [{"branch_id": "m", "retention_days": 1, "x": 1}]},
            "branches.0.x",
        ),
        ({"default_retention_days": 1, "branches": [], "extra": 1}, "extra"),
        (
            {
                "default_retention_days": 1,
                "branches": [
                    {"branch_id": "m", "retention_days": 1},
                    {"branch_id": "m", "retention_days": 2},
                ],
            },
            "branches",
        ),
        ([], "gc_rules"),
    ],
)
def test_hostile_json(body: object, field: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_rules_json(body)
    assert info.value.field == field


def test_too_many_branches() -> None:
    many = [{"branch_id": f"b{i}", "retention_days": 1} for i in range(MAX_BRANCH_RULES + 1)]
    with pytest.raises(BadInputError, match="branches"):
        parse_rules_json({"default_retention_days": 1, "branches": many})
    raw = b"".join(map_entry(f"b{i}", 1) for i in range(MAX_BRANCH_RULES + 1))
    with pytest.raises(CorruptDataError, match="more than"):
        decode_rules(raw, file="cfg")


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"\x08", "undecodable"),  # truncated varint
        (b"\x12\x05\x0a\x03ab", "undecodable"),  # entry longer than the buffer
        (b"\x12\x04\x0a\x02\xff\xfe", "undecodable"),  # map key not UTF-8
        (b"\x08" + varint(-5), "default_retention_days"),  # negative default (lakeFS would accept)
        (map_entry("main", -1), "retention_days"),
        (map_entry("feature/x", 3), "branch_id"),
        (map_entry("", 3), "branch_id"),
        (b"\xff" * 10, "undecodable"),
    ],
)
def test_hostile_bytes(raw: bytes, match: str) -> None:
    with pytest.raises(CorruptDataError, match=match) as info:
        decode_rules(raw, file="s3://bkt/ns/_lakefs/retention/gc/rules/config.json")
    assert info.value.file == "s3://bkt/ns/_lakefs/retention/gc/rules/config.json"


def test_unknown_fields_are_ignored() -> None:
    """A newer lakeFS may add fields; protobuf skips unknown ones (field 3 varint here)."""
    assert decode_rules(b"\x08\x02\x18\x01", file="f") == GCRules.of(2)


@settings(max_examples=examples(2), deadline=None)
@given(
    default=st.integers(0, INT32_MAX),
    branches=st.dictionaries(
        st.from_regex(r"[A-Za-z0-9_][-A-Za-z0-9_]{0,20}", fullmatch=True),
        st.integers(0, INT32_MAX),
        max_size=20,
    ),
)
def test_round_trip(default: int, branches: dict[str, int]) -> None:
    branches = {b: d for b, d in branches.items() if len(b) != 64}  # 64 hex chars would be a commit id
    rules = GCRules.of(default, branches)
    raw = rules.to_proto_bytes()
    msg = graveler_pb2.GarbageCollectionRules.FromString(raw)
    assert (msg.default_retention_days, dict(msg.branch_retention_days)) == (default, branches)
    assert decode_rules(raw, file="f") == (rules if raw else None)


# -- storage -----------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "local"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[BlockStore, StorageNamespace]]:
    if request.param == "memory":
        name = f"gc{uuid.uuid4().hex[:10]}"
        mem = MemoryBlockStore(name)
        try:
            yield mem, StorageNamespace(f"mem://{name}/repo")
        finally:
            await mem.close()
    else:
        async with LocalBlockStore(tmp_path) as local:
            yield local, StorageNamespace(f"local://{tmp_path}")


async def test_store_round_trip(store: tuple[BlockStore, StorageNamespace]) -> None:
    blocks, ns = store
    assert ns.gc_rules_key().endswith("_lakefs/retention/gc/rules/config.json")
    assert await load_rules(blocks, ns) is None  # missing file: no rules
    rules = GCRules.of(14, {"main": 21})
    await save_rules(blocks, ns, rules)
    assert await blocks.get(ns.gc_rules_key()) == rules.to_proto_bytes()
    assert await load_rules(blocks, ns) == rules
    await save_rules(blocks, ns, GCRules.of(3))  # overwrite
    assert await load_rules(blocks, ns) == GCRules.of(3)
    await delete_rules(blocks, ns)  # lakeFS writes an empty file
    assert await blocks.get(ns.gc_rules_key()) == b""
    assert await load_rules(blocks, ns) is None
    await delete_rules(blocks, ns)  # idempotent


async def test_store_corrupt_and_oversized(store: tuple[BlockStore, StorageNamespace]) -> None:
    blocks, ns = store
    await blocks.put(ns.gc_rules_key(), b"PAR1 not protobuf")
    with pytest.raises(CorruptDataError) as info:
        await load_rules(blocks, ns)
    assert info.value.file is not None and info.value.file.endswith("_lakefs/retention/gc/rules/config.json")
    await blocks.put(ns.gc_rules_key(), b"\x00" * (MAX_RULES_BYTES + 10))
    with pytest.raises(CorruptDataError, match="larger than"):
        await load_rules(blocks, ns)


@settings(max_examples=examples(2), deadline=None)
@given(
    st.integers(0, 30),
    st.dictionaries(st.sampled_from(("main", "dev", "x")), st.integers(0, 30), max_size=3),
    st.integers(0, 30),
    st.dictionaries(st.sampled_from(("main", "dev", "y")), st.integers(0, 30), max_size=3),
)
def test_widest_rules_retains_what_either_retains(
    d1: int, b1: dict[str, int], d2: int, b2: dict[str, int]
) -> None:
    a, b = GCRules.of(d1, b1), GCRules.of(d2, b2)
    w = widest_rules(a, b)
    assert w is not None and w == widest_rules(b, a)
    for branch in ("main", "dev", "x", "y", "other"):
        assert w.retention_days(branch) == max(a.retention_days(branch), b.retention_days(branch))
    assert widest_rules(a, None) is None and widest_rules(None, b) is None

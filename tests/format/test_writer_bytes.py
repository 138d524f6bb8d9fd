"""The table writers produce exactly the bytes they produced before the speed-up (issue 12).

Faster table writing must not change one byte of output: lakeFS reads our ranges, range ids are
hashes of the records, and the ``estimated_size_bytes`` property and the range split points both
come from the writer's running size estimate. :func:`corpus` builds a varied set of tables — the
benchmark's records, the lakeFS fixtures' records, the empty table, one record, huge and
incompressible values, keys sharing long prefixes (multi-byte varint headers), keys around every
restart-interval and block-size boundary, separator edge cases (``0xff`` runs, keys that prefix each
other), two-level indexes, both compression modes, and whole metaranges cut by the split policy —
and digests each case: SHA-256 over every table's bytes, its id where it has one, and the writer's
estimate after every record.

:data:`EXPECTED` holds the digests the writer produced *before* it was optimised (commit bd63dfa,
whose writer files are those of the checkout at /tmp/orig), computed once by running this module
as a script there::

    cp tests/format/test_writer_bytes.py /tmp/orig/tests/format/
    cd /tmp/orig && PYTHONPATH=/tmp/orig /work/main/.venv/bin/python -m tests.format.test_writer_bytes
    rm /tmp/orig/tests/format/test_writer_bytes.py

The corpus generator is deterministic (seeded ``random``, fixed timestamps), so the digests are
constants; a writer change that alters any byte, id or estimate fails the matching case. The
fixture-derived case needs ``../shared/fixtures`` (the ``shared_fixtures`` fixture of
tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.committed.model import ValueRecord
from lakefs_core.committed.writer import RANGES, MetaRangeWriter, RangeBuilder, build_metarange
from lakefs_core.format.envelope import encode_envelope
from lakefs_core.format.records import RangeInfo, make_entry
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.format.sstable import TableReader, TableWriter

Records = list[tuple[bytes, bytes]]
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
OPTION_GRID: list[dict[str, Any]] = [
    {"compression": c, "block_size": b, "block_restart_interval": r, "index_partition_size": p}
    for c in ("snappy", "none")
    for b, r, p in ((4096, 16, 4096), (256, 3, 256), (32, 1, 48), (1000, 16, 100))
]


class Digest:
    """SHA-256 over a case's tables, ids and running estimates, in order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def table(self, records: Records, *, props: dict[str, bytes] | None = None, **options: Any) -> None:
        writer = TableWriter(**options)
        estimates = [writer.estimated_size()]
        for key, value in records:
            returned = writer.add(key, value)
            estimates.append(writer.estimated_size())
            assert returned is None or returned == estimates[-1]
        self.blob(writer.finish(props or {}))
        self.blob(b",".join(b"%d" % e for e in estimates))

    def blob(self, data: bytes) -> None:
        self._h.update(b"%d:" % len(data))
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def object_key(i: int) -> bytes:
    """The benchmark's data-lake paths (bench/common.py, copied so the corpus never drifts)."""
    month, day = (i // 1000) % 12 + 1, (i // 40) % 28 + 1
    return f"warehouse/table{i % 37:02d}/date=2026-{month:02d}-{day:02d}/part-{i:08d}.parquet".encode()


def bench_records(n: int, seed: int = 0) -> list[ValueRecord]:
    """The benchmark's records: sorted keys, each with a real serialised Entry."""
    rng = random.Random(seed)
    out = []
    for key in sorted(object_key(i) for i in range(n)):
        identity, data = make_entry(
            f"data/gabc{rng.getrandbits(40):010x}/{rng.getrandbits(96):024x}",
            rng.randrange(1, 1 << 30),
            f"{rng.getrandbits(128):032x}",
            last_modified=WHEN,
            content_type="application/octet-stream",
        )
        out.append(ValueRecord(key, identity, data))
    return out


def as_pairs(records: list[ValueRecord]) -> Records:
    return [(r.key, encode_envelope(r.identity, r.data)) for r in records]


def lakefs_props(kind: str, records: Records) -> dict[str, bytes]:
    return {
        "type": kind.encode(),
        "min_key": records[0][0] if records else b"",
        "max_key": records[-1][0] if records else b"",
        "count": str(len(records)).encode(),
    }


# -- cases ------------------------------------------------------------------------------------------


def case_bench_records(d: Digest) -> None:
    records = as_pairs(bench_records(20_000))
    for compression in ("snappy", "none"):
        d.table(records, props=lakefs_props(RANGES, records), compression=compression)
    d.table(records[:3000], block_size=1000, index_partition_size=100)


def case_empty(d: Digest) -> None:
    for options in OPTION_GRID:
        d.table([], **options)
    d.table([], props={"type": b"ranges", "x": b""})


def case_one_record(d: Digest) -> None:
    for options in OPTION_GRID:
        for value in (b"", b"v", b"x" * 200, bytes(range(256)) * 40):
            d.table([(b"only", value)], **options)
    d.table([(b"", b"empty key")])
    d.table([(b"\xff" * 10, b"all ff")])


def case_huge_values(d: Digest) -> None:
    rng = random.Random(3)
    sizes = [0, 1, 127, 128, 16383, 16384, 5000, 1 << 20, 300_000, 2_097_153]
    records = []
    for i, size in enumerate(sizes):
        # Odd ones incompressible: stored raw even with Snappy.
        value = rng.randbytes(size) if i % 2 else bytes([i % 251]) * size
        records.append((b"huge/%04d" % i, value))
    for compression in ("snappy", "none"):
        d.table(records, compression=compression)
        d.table(records, compression=compression, block_size=100_000, block_restart_interval=2)


def case_long_shared_prefixes(d: Digest) -> None:
    rng = random.Random(5)
    prefixes = [b"p" * 130, b"q/" * 600, b"data/" + b"\x00" * 200, b"\xff" * 140]
    keys: set[bytes] = set()
    for prefix in prefixes:
        for _ in range(300):
            keys.add(prefix + rng.randbytes(rng.randrange(0, 200)))
        keys.add(prefix)
        keys.add(prefix[:-1])  # keys that prefix each other
    records = [(k, rng.randbytes(rng.randrange(0, 300))) for k in sorted(keys)]
    for options in OPTION_GRID:
        d.table(records, **options)


def case_restart_boundaries(d: Digest) -> None:
    for n in (1, 2, 3, 4, 15, 16, 17, 31, 32, 33, 47, 48, 49, 64, 65):
        records = [(b"key/%06d" % (i * 7), b"value-%d" % i) for i in range(n)]
        for interval in (1, 2, 3, 16, 17):
            for compression in ("snappy", "none"):
                d.table(records, compression=compression, block_restart_interval=interval)
                d.table(records, compression=compression, block_restart_interval=interval, block_size=64)


def case_block_boundaries(d: Digest) -> None:
    # Value sizes sweep every size class around the 90% threshold and the block target, so blocks
    # are cut at, just before and just after each of pebble's flush conditions.
    for block_size in (4096, 256, 100):
        for vlen in range(block_size // 8 - 12, block_size // 8 + 12):
            records = [(b"k%05d" % i, bytes([65 + i % 26]) * vlen) for i in range(40)]
            d.table(records, block_size=block_size)
        for vlen in range(block_size - 40, block_size + 10, 3):
            records = [(b"big%03d" % i, bytes([i]) * vlen) for i in range(6)]
            d.table(records, block_size=block_size, compression="none")
            d.table(records, block_size=block_size)


def case_separators(d: Digest) -> None:
    rng = random.Random(11)
    alphabet = b"\x00\x01afgz\xfe\xff"
    keys = {bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 9))) for _ in range(3000)}
    records = [(k, rng.randbytes(rng.randrange(0, 40))) for k in sorted(keys)]
    for options in OPTION_GRID:
        d.table(records, **options)
    # Adjacent blocks whose last/first keys differ by one at the last byte, or only in length.
    pairs = [b"ab", b"ac", b"ad\xff\xff", b"ae", b"ae\x00", b"af\xff", b"ag", b"b", b"b\xff\xff\x01", b"c"]
    d.table([(k, b"v" * 40) for k in pairs], block_size=32, block_restart_interval=1)


def case_random_grid(d: Digest) -> None:
    rng = random.Random(17)
    for round_ in range(6):
        keys = {rng.randbytes(rng.randrange(1, 60)) for _ in range(rng.randrange(50, 2500))}
        records = []
        for k in sorted(keys):
            kind = rng.randrange(4)
            if kind == 0:
                value = rng.randbytes(rng.randrange(0, 150))
            elif kind == 1:
                value = bytes([rng.randrange(4)]) * rng.randrange(0, 3000)
            elif kind == 2:
                value = b"%d" % rng.randrange(10**12)
            else:
                value = b""
            records.append((k, value))
        options = OPTION_GRID[round_ % len(OPTION_GRID)]
        d.table(records, props={"round": b"%d" % round_}, **options)


def case_graveler(d: Digest) -> None:
    records = bench_records(20_000, seed=1)
    policies = [
        SplitPolicy(range_raggedness_entries=700),
        SplitPolicy(min_range_size_bytes=50_000, max_range_size_bytes=300_000, range_raggedness_entries=3),
        SplitPolicy(max_range_size_bytes=1),
    ]
    for policy in policies[:2]:
        for compression in ("snappy", "none"):
            _metarange(d, records, policy, compression)
    _metarange(d, records[:400], policies[2], "snappy")
    builder = RangeBuilder(RANGES)
    for key, value in as_pairs(records[:5000]):
        builder.add(key, value)
        d.blob(b"%d" % builder.estimated_size())
    built = builder.finish()
    d.blob(built.id.encode() + built.data + b"%d/%d" % (built.count, built.estimated_size))
    infos = [RangeInfo(f"{i:064x}", b"a%06d" % i, b"a%06dz" % i, i + 1, i * 1000) for i in range(3000)]
    meta = build_metarange(infos)
    d.blob(meta.id.encode() + meta.data)
    empty = build_metarange([])
    d.blob(empty.id.encode() + empty.data)


class _DictSink:
    def __init__(self) -> None:
        self.tables: dict[str, bytes] = {}

    async def write(self, table_id: str, data: bytes) -> bool:
        fresh = table_id not in self.tables
        self.tables[table_id] = data
        return fresh


def _metarange(d: Digest, records: list[ValueRecord], policy: SplitPolicy, compression: str) -> None:
    async def run() -> tuple[str, list[RangeInfo], _DictSink]:
        sink = _DictSink()
        writer = MetaRangeWriter(sink, policy, compression=compression)
        half = len(records) // 2
        for record in records[:half]:
            await writer.add(record)
        # A reused range between two records closes the partial range before it.
        gap = records[half - 1].key
        await writer.add_range(RangeInfo(f"{7:064x}", gap + b"\x00", gap + b"\x01", 1, 1))
        for record in records[half:]:
            await writer.add(record)
        metarange_id, ranges = await writer.close()
        return metarange_id, ranges, sink

    metarange_id, ranges, sink = asyncio.run(run())
    d.blob(metarange_id.encode())
    for info in ranges:
        d.blob(
            b"%s %s %s %d %d"
            % (info.id.encode(), info.min_key, info.max_key, info.count, info.estimated_size)
        )
    for table_id in sorted(sink.tables):
        d.blob(table_id.encode() + sink.tables[table_id])


def fixture_case(fixtures: Path) -> Callable[[Digest], None]:
    def case(d: Digest) -> None:
        for name in ("range.sst", "metarange.sst"):
            reader = TableReader((fixtures / "lakefs" / name).read_bytes(), name)
            records = list(reader)
            props = dict(reader.user_properties)
            for compression in ("snappy", "none"):
                d.table(records, props=props, compression=compression)
            doubled = sorted(dict(records + [(k + b"~", v) for k, v in records]).items())
            d.table(doubled, props=props, block_size=1024, index_partition_size=256)

    return case


CASES: dict[str, Callable[[Digest], None]] = {
    "bench_records": case_bench_records,
    "empty": case_empty,
    "one_record": case_one_record,
    "huge_values": case_huge_values,
    "long_shared_prefixes": case_long_shared_prefixes,
    "restart_boundaries": case_restart_boundaries,
    "block_boundaries": case_block_boundaries,
    "separators": case_separators,
    "random_grid": case_random_grid,
    "graveler": case_graveler,
}


def digest_of(case: Callable[[Digest], None]) -> str:
    d = Digest()
    case(d)
    return d.hexdigest()


EXPECTED: dict[str, str] = {
    "bench_records": "58203f3ce9e528e7f6ceef97e1f930c14bd7cba3f1251cb00cb4b378fe7da65b",
    "block_boundaries": "3e02724de6d07a7a36ff8c7201b6c05b231f318010f3c76e49607ee90509597c",
    "empty": "c50cdf1bcb49e46a15eedd000caed093886c97ed85a7b15bd7df0392d2a93477",
    "graveler": "0108415d7086976508fa9cd1e885db3cf2c2ff5580be88e34bc843d36269588d",
    "huge_values": "7354f3b2f777d87c8f4a6440cef922623d32119e93c18e4d841da9e5d21954d1",
    "long_shared_prefixes": "4e48a8dfa9470d75fd10973374e700a80da1a47275f8a3152dd0a862169cdcbd",
    "one_record": "3f04da5b879d3c9bf6d9992066e03cc3b95a61a6d3f38cdad714ddb73c207ba6",
    "random_grid": "b57efadf5d696cb666ba98c26dab24de2c5a7977c02d9b50f976f1fd362f05ec",
    "restart_boundaries": "8d45c4adc6223b0ebfaa191e1fd848e2ae5660043b7f7585c2c02fcb0cbee826",
    "separators": "074c65d6efb7ad4236e75367d70a8bb1f15d5b1a306b9d594ef0be64a1f43baf",
    "fixtures": "c76a07fba64f4414c732419f8ed0e18e5cb81247989e612e9ec5b69dcda5d0a6",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_writer_output_unchanged(name: str) -> None:
    assert digest_of(CASES[name]) == EXPECTED[name]


def test_fixture_records_output_unchanged(shared_fixtures: Path) -> None:
    assert digest_of(fixture_case(shared_fixtures)) == EXPECTED["fixtures"]


def test_digest_sees_one_byte() -> None:
    """The digest is not vacuous: one changed value byte, or one more record, changes it."""
    records = [(b"k%03d" % i, b"v%03d" % i) for i in range(100)]
    seen = set()
    for variant in (records, [*records[:50], (records[50][0], b"v05X"), *records[51:]], records[:99]):
        d = Digest()
        d.table(variant)
        seen.add(d.hexdigest())
    assert len(seen) == 3


def _all_digests(fixtures: Path) -> Iterator[tuple[str, str]]:
    for name in sorted(CASES):
        yield name, digest_of(CASES[name])
    yield "fixtures", digest_of(fixture_case(fixtures))


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/shared/fixtures")
    for name, digest in _all_digests(root):
        print(f'    "{name}": "{digest}",')

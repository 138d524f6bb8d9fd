"""The compiled warm point lookup and its pure-Python twin give the same answers and errors.

Where the ``_fastpath`` extension is built, ``committed.metarange.MetaRange`` takes ``get_cached``
from the compiled ``MetaRangeCore`` and ``committed.metarange.record_from_sst`` is compiled;
``PureMetaRange`` and ``records.pure_record_from_sst`` are the reference. Both are held to the same
outcome (the record and the types of its parts, or the exception's type, message, file and offset)
and the same side effects (tables attached, ``ranges_opened``) on metaranges whose ranges hold
valid and hostile envelopes, with some tables in RAM and some not, some closed, for keys inside,
between and outside the ranges and for keys that are not ``bytes``. With ``LAKEFS_PURE_PYTHON=1``
the pure classes are the ones in use.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.committed.metarange import MetaRange, PureMetaRange, record_from_sst
from lakefs_core.committed.tables import TableStore
from lakefs_core.format.accel import FASTPATH
from lakefs_core.format.envelope import encode_envelope
from lakefs_core.format.records import RangeInfo, pure_record_from_sst
from lakefs_core.format.sstable.writer import TableWriter
from tests.committed.support import memory_tables, rec, written
from tests.support.profiles import examples
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]
needs_extension = pytest.mark.skipif(FASTPATH is None, reason="the _fastpath extension is not in use here")

# Envelopes the fast paths take, ones only the general decoder takes (3-byte length prefixes,
# trailing bytes) and hostile ones: odd (negative) lengths, overruns, truncations, empty values.
_envelopes = st.one_of(
    st.builds(encode_envelope, st.binary(max_size=40), st.binary(max_size=300)),
    st.builds(
        lambda i, d, t: encode_envelope(i, d) + t,
        st.binary(max_size=40),
        st.binary(max_size=40),
        st.binary(min_size=1, max_size=5),
    ),
    st.just(encode_envelope(b"i" * 32, b"x" * 9000)),
    st.binary(max_size=12),
    st.sampled_from([b"", b"\x41", b"\x80", b"\x80\x80\x01", b"\x40" + bytes(31), b"\x00\x81", b"\x02a\x01"]),
)


def outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    try:
        result = fn(*args)
    except Exception as e:
        return ("raised", type(e), str(e), getattr(e, "file", None), getattr(e, "offset", None))
    if isinstance(result, tuple):
        return ("returned", type(result), tuple(result), tuple(type(part) for part in result))
    return ("returned", type(result), result)


@given(
    st.one_of(_envelopes, st.binary(max_size=80)),
    st.sampled_from([None, "_lakefs/r"]),
    st.sampled_from([0, 4096]),
)
def test_record_from_sst_is_the_pure_one(value: bytes, file: str | None, base: int) -> None:
    assert outcome(record_from_sst, b"k", value, file, base) == outcome(
        pure_record_from_sst, b"k", value, file, base
    )
    # Values that are not bytes go to the pure path whole.
    for other in (bytearray(value), memoryview(value), value.decode("latin-1")):
        assert outcome(record_from_sst, b"k", other, file, base) == outcome(
            pure_record_from_sst, b"k", other, file, base
        )


def _table(items: list[tuple[bytes, bytes]]) -> bytes:
    writer = TableWriter(block_size=64)  # small blocks: lookups also take the block-decoding path
    for key, value in items:
        writer.add(key, value)
    return writer.finish({"type": b"ranges"})


async def _ranges(tables: TableStore, spans: list[list[tuple[bytes, bytes]]]) -> list[RangeInfo]:
    ranges = []
    for items in spans:
        data = _table(items)
        table_id = hashlib.sha256(data).hexdigest()
        await tables.write(table_id, data)
        ranges.append(RangeInfo(table_id, items[0][0], items[-1][0], len(items), len(data)))
    return ranges


def _state(mr: PureMetaRange) -> tuple[int, list[bool]]:
    return mr.ranges_opened, [reader is not None for reader in mr._readers]


_metaranges = st.lists(st.binary(min_size=1, max_size=10), min_size=1, max_size=40, unique=True).flatmap(
    lambda keys: st.tuples(
        st.just(sorted(keys)),
        st.lists(_envelopes, min_size=len(keys), max_size=len(keys)),
        st.sets(st.integers(1, len(keys) - 1), max_size=4) if len(keys) > 1 else st.just(set()),
    )
)


@needs_extension
@settings(max_examples=examples(1.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _metaranges,
    st.lists(st.sampled_from(["open", "closed", "absent"]), min_size=5, max_size=5),
    st.lists(st.binary(max_size=10), max_size=10),
)
def test_compiled_lookup_is_the_pure_one(
    metarange: tuple[list[bytes], list[bytes], set[int]], tables_state: list[str], extra: list[bytes]
) -> None:
    keys, values, cuts = metarange
    bounds = [0, *sorted(cuts), len(keys)]
    spans = [list(zip(keys[a:b], values[a:b], strict=True)) for a, b in itertools.pairwise(bounds)]

    async def build() -> tuple[PureMetaRange, PureMetaRange]:
        tables = memory_tables()
        ranges = await _ranges(tables, spans)
        for info, state in zip(ranges, tables_state, strict=False):
            if state != "absent":  # in RAM: get_cached answers; absent: it returns False
                reader = await tables.open(info.id)
                if state == "closed":
                    reader.close()
        return PureMetaRange(tables, "m", ranges), MetaRange(tables, "m", ranges)

    pure, fast = asyncio.run(build())
    assert type(fast) is not PureMetaRange
    probes: list[Any] = [*keys, *extra, b"", b"\xff" * 11]
    probes += [k + b"\x00" for k in keys] + [k[:-1] for k in keys]
    probes += [keys[0].decode("latin-1"), bytearray(keys[0]), memoryview(keys[-1]), None, 7]
    for key in probes:
        assert outcome(fast.get_cached, key) == outcome(pure.get_cached, key), key
        assert _state(fast) == _state(pure), key
    # Once every table is attached (or refused), the answers stay the same.
    for key in probes:
        assert outcome(fast.get_cached, key) == outcome(pure.get_cached, key), key


@needs_extension
@pytest.mark.parametrize(
    "tamper",
    ["max key not bytes", "min key not bytes", "readers cleared", "names shortened", "lists dropped"],
)
async def test_compiled_lookup_with_its_lists_changed_is_the_pure_one(tamper: str) -> None:
    """The compiled path reads the lists ``__init__`` builds; changed ones are the pure path's."""
    tables = memory_tables()
    base = await written(tables, [rec(f"k{i:03d}") for i in range(50)])
    results = []
    for cls in (PureMetaRange, MetaRange):
        mr = cls(tables, base.id, base.ranges)
        assert await mr.get(b"k010") is not None  # attach the table
        if tamper == "max key not bytes":
            mr._max_keys[0] = "k999"
        elif tamper == "min key not bytes":
            mr._min_keys[0] = bytearray(b"k000")
        elif tamper == "readers cleared":
            mr._readers.clear()
        elif tamper == "names shortened":
            mr._names = []
        else:
            mr._max_keys = None  # type: ignore[assignment]
        results.append([outcome(mr.get_cached, key) for key in (b"k005", b"k100", b"a", "k005")])
    assert results[0] == results[1]


async def test_get_takes_the_warm_path_and_counts_what_it_attaches() -> None:
    tables = memory_tables()
    records = [rec(f"k{i:04d}") for i in range(300)]
    ranges = await _ranges(
        tables, [[(r.key, r.to_value()) for r in records[i : i + 100]] for i in (0, 100, 200)]
    )
    mr = MetaRange(tables, "m", ranges)
    assert mr.get_cached(records[0].key) is False  # no table in RAM yet
    assert await mr.get(records[0].key) == records[0]
    assert mr.ranges_opened == 1
    for r in records:
        assert await mr.get(r.key) == r
        assert mr.get_cached(r.key) == r
    assert mr.ranges_opened == 3
    # Another metarange finds the tables in RAM: get_cached attaches them and counts them too.
    other = MetaRange(tables, "m", ranges)
    assert all(other.get_cached(r.key) == r for r in records)
    assert other.ranges_opened == 3
    assert await other.get(b"k0100\x00") is None and other.get_cached(b"k9") is None


def test_pure_python_switch_selects_the_twins() -> None:
    """With ``LAKEFS_PURE_PYTHON=1`` the pure lookup and record builder are the ones in use."""
    code = (
        "from lakefs_core.committed.metarange import MetaRange, PureMetaRange, record_from_sst\n"
        "from lakefs_core.format.records import pure_record_from_sst\n"
        "assert MetaRange is PureMetaRange\n"
        "assert record_from_sst is pure_record_from_sst\n"
    )
    env = {**os.environ, "LAKEFS_PURE_PYTHON": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

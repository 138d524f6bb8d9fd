"""Hypothesis-driven mutations of valid tables, checksums recomputed, for the memory-limited child.

:func:`run_fuzz` is called inside the subprocess test_hostile_tables.py starts (under ``RLIMIT_AS``
and a timeout). Each case flips, overwrites or splices bytes inside one to three blocks (or the
footer) of one of three base files, then rewrites every touched block's trailer so the CRC32C
matches again. The reader must then either raise CorruptDataError (naming the file and an offset)
or return exactly what :func:`~tests.format.crafted_tables.reference_records` says a correct
reader returns, with ``get``/``seek_ge``/``max_key`` agreeing with the scan. Any other exception,
disagreement, hang or blow-up fails. Derandomised, so CI runs the same cases every time.
"""

from __future__ import annotations

import struct
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.sstable.footer import FOOTER_SIZE, BlockHandle, block_trailer
from tests.format.crafted_tables import (
    Crafter,
    Records,
    Unjudged,
    block_of,
    block_regions,
    ikey,
    lots,
    read_everything,
    reference_records,
    sep,
    write_table,
)


def multi_version_table() -> bytes:
    """A generic RocksDB-style file: versions of ``b`` straddle two blocks, ``c`` is deleted."""
    c = Crafter()
    b0 = c.block(block_of([(ikey(b"a", 5), b"a5"), (ikey(b"b", 9), b"b9"), (ikey(b"b", 7), b"b7")]))
    b1 = c.block(
        block_of(
            [
                (ikey(b"b", 3), b"b3"),
                (ikey(b"c", 4, kind=0), b""),
                (ikey(b"c", 2), b"c2"),
                (ikey(b"d", 1), b"d1"),
            ]
        )
    )
    b2 = c.block(block_of([(ikey(b"e", 1), b"e1")]))
    index = c.index([(ikey(b"b", 7), b0), (sep(b"d\x00"), b1), (sep(b"f"), b2)])
    return c.finish(index, entries=8, blocks=3)


MULTI_VERSION_RECORDS = [(b"a", b"a5"), (b"b", b"b9"), (b"d", b"d1"), (b"e", b"e1")]


@cache
def bases() -> list[tuple[bytes, list[BlockHandle]]]:
    files = [
        write_table(lots(150), compression="none", block_size=256, index_partition_size=96),
        write_table(lots(150, value_size=60), compression="snappy", block_size=512),
        multi_version_table(),
    ]
    return [(data, block_regions(data)) for data in files]


_SPECIAL = (0x00, 0x01, 0x07, 0x08, 0x09, 0x7F, 0x80, 0xFF)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data, regions = draw(st.sampled_from(bases()))
    buf = bytearray(data)
    touched: set[BlockHandle] = set()
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 19)) == 0:  # the footer: no checksum to fix
            lo, hi, region = len(data) - FOOTER_SIZE, len(data), None
        else:
            region = draw(st.sampled_from(regions))
            lo, hi = region.offset, region.offset + region.size + 1  # + the compression type byte
            touched.add(region)
        pos = draw(st.integers(lo, hi - 1))
        op = draw(st.sampled_from(["xor", "special", "u32", "copy"]))
        if op == "xor":
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "special":
            buf[pos] = draw(st.sampled_from(_SPECIAL))
        elif op == "u32" and hi - lo >= 4:
            at = min(pos, hi - 4)
            buf[at : at + 4] = struct.pack("<I", draw(st.integers(0, 0xFFFFFFFF)))
        elif op == "copy":  # splice a run of bytes from elsewhere in the same region
            src = draw(st.integers(lo, hi - 1))
            n = min(draw(st.integers(1, 16)), hi - pos, hi - src)
            buf[pos : pos + n] = buf[src : src + n]
    for off, size in touched:
        end = off + size
        buf[end : end + 5] = block_trailer(bytes(buf[off:end]), buf[end])
    return bytes(buf)


def check_case(data: bytes) -> str:
    try:
        records = read_everything(data, "fuzz")
    except CorruptDataError as e:
        assert e.file == "fuzz" and e.offset is not None, f"CorruptDataError without file/offset: {e}"
        return "corrupt"
    try:
        expected: Records = reference_records(data)
    except Unjudged:
        return "unjudged"
    except CorruptDataError as e:
        raise AssertionError(f"the reader returned {len(records)} records from a corrupt file: {e}") from e
    assert records == expected, "the reader returned records a correct parse does not produce"
    return "ok"


def run_fuzz(examples: int) -> None:
    for data, _ in bases():  # the unmutated files read exactly
        assert read_everything(data, "base") == reference_records(data)
    assert read_everything(bases()[2][0], "mv") == MULTI_VERSION_RECORDS
    seen: dict[str, int] = {}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutated())
    def case(data: bytes) -> None:
        result = check_case(data)
        seen[result] = seen.get(result, 0) + 1

    case()
    print("outcomes", " ".join(f"{k}={v}" for k, v in sorted(seen.items())), flush=True)

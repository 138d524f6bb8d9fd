"""Crafted and mutated RocksDB tables WITH VALID CHECKSUMS, and a memory-limited runner for them.

Used by test_hostile_tables.py. A checksum only proves the bytes are what the writer wrote, so
every file here carries correct block trailers (recomputed after each mutation) and the reader must
still refuse what is wrong:

- :class:`Crafter` lays out hand-made blocks (data, index, partitions) and finishes the file with
  a properties block, a metaindex and a footer, exactly as the project's writer does;
- :func:`bombs` builds the files that made the old reader allocate gigabytes or run for minutes;
- :func:`reference_records` is an independent, deliberately naive parse (every block decoded in
  full, every order rule checked by materialising all keys) that says what a correct reader must
  return for a file, or that the file is corrupt;
- :func:`run_limited` runs :func:`child_main` in a subprocess under ``RLIMIT_AS`` and a wall-clock
  timeout, so a blow-up fails the test instead of killing pytest. The child reports one line per
  case: ``ok``, ``corrupt`` (CorruptDataError with file and offset) or ``error`` (anything else).
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import cramjam

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.sstable import TableReader, TableWriter
from lakefs_core.format.sstable.block import BlockBuilder, decode_block
from lakefs_core.format.sstable.footer import (
    BLOCK_TRAILER_SIZE,
    CHECKSUM_CRC32C,
    FOOTER_SIZE,
    WRITE_FORMAT_VERSION,
    BlockHandle,
    Footer,
    block_trailer,
    decode_footer,
    decode_handle,
    encode_handle,
    read_block,
)
from lakefs_core.format.sstable.properties import (
    INDEX_KEY_IS_USER_KEY,
    INDEX_TYPE,
    INDEX_VALUE_IS_DELTA_ENCODED,
    NUM_ENTRIES,
    NUM_RANGE_DELETIONS,
    PROPERTIES_BLOCK,
    TableStats,
    decode_properties,
    encode_properties,
    fixed32_prop,
    standard_properties,
    uvarint_prop,
)
from lakefs_core.format.sstable.writer import SEPARATOR_TRAILER
from lakefs_core.format.varint import encode_uvarint

REPO = Path(__file__).resolve().parents[2]
Records = list[tuple[bytes, bytes]]


def ikey(user_key: bytes, seq: int = 0, kind: int = 1) -> bytes:
    """An internal key: user key || uint64 LE ``(seq << 8) | kind`` (kind 1 = SET, 0 = deletion)."""
    return user_key + struct.pack("<Q", (seq << 8) | kind)


def sep(user_key: bytes) -> bytes:
    """An index separator as pebble writes shortened ones (seqnum 2^56-1, kind 17)."""
    return user_key + SEPARATOR_TRAILER


def block_of(entries: list[tuple[bytes, bytes]], restart_interval: int = 16) -> bytes:
    """A block of ``entries`` exactly as given (BlockBuilder does not check their order)."""
    builder = BlockBuilder(restart_interval)
    for key, value in entries:
        builder.add(key, value)
    return builder.finish()


def data_block(records: list[tuple[bytes, bytes]]) -> bytes:
    return block_of([(ikey(k), v) for k, v in records])


@dataclass
class Crafter:
    """Appends blocks with valid trailers; :meth:`finish` adds properties, metaindex and footer."""

    out: bytearray = field(default_factory=bytearray)

    def block(self, payload: bytes, ctype: int = 0) -> BlockHandle:
        handle = BlockHandle(len(self.out), len(payload))
        self.out += payload + block_trailer(payload, ctype)
        return handle

    def index(self, entries: list[tuple[bytes, BlockHandle]]) -> BlockHandle:
        return self.block(block_of([(k, encode_handle(h)) for k, h in entries], restart_interval=1))

    def finish(
        self,
        index: BlockHandle,
        *,
        entries: int | None,
        two_level: bool = False,
        blocks: int = 1,
        index_type: int | None = None,
    ) -> bytes:
        """Close the file; ``entries=None`` leaves ``rocksdb.num.entries`` out; ``index_type``
        overrides the index type property."""
        stats = TableStats(
            num_entries=entries or 0,
            raw_key_size=0,
            raw_value_size=0,
            data_size=0,
            index_size=0,
            num_data_blocks=blocks,
            compression_name="NoCompression",
            index_partitions=1 if two_level else 0,
        )
        props = standard_properties(stats)
        if entries is None:
            del props[NUM_ENTRIES]
        if index_type is not None:
            props[INDEX_TYPE] = struct.pack("<I", index_type)
        props_handle = self.block(encode_properties(props))
        meta = BlockBuilder(1)
        meta.add(PROPERTIES_BLOCK.encode(), encode_handle(props_handle))
        metaindex = self.block(meta.finish())
        return bytes(self.out) + Footer(CHECKSUM_CRC32C, metaindex, index, WRITE_FORMAT_VERSION).encode()


def one_level(
    blocks: list[bytes], seps: list[bytes], *, entries: int | None, order: list[int] | None = None
) -> bytes:
    """Data blocks in file order, then an index of ``seps[i] -> block order[i]``."""
    c = Crafter()
    handles = [c.block(b) for b in blocks]
    targets = order if order is not None else list(range(len(blocks)))
    index = c.index([(s, handles[t]) for s, t in zip(seps, targets, strict=True)])
    return c.finish(index, entries=entries, blocks=len(blocks))


def write_table(records: Records, **options: object) -> bytes:
    writer = TableWriter(**options)  # type: ignore[arg-type]
    for key, value in records:
        writer.add(key, value)
    return writer.finish({})


def lots(n: int, value_size: int = 24) -> Records:
    return [(b"dir/%06d/file" % i, (b"v%d-" % i * value_size)[:value_size]) for i in range(n)]


# -- memory and time bombs (valid checksums) ------------------------------------------------------


def zstd_size_bomb() -> bytes:
    """A ~200-byte file whose zstd block claims just under 1 GiB: the old reader allocated it all."""
    raw = data_block([(b"a", b"1")])
    payload = encode_uvarint((1 << 30) - 1) + bytes(cramjam.zstd.compress(raw))
    c = Crafter()
    handle = c.block(payload, 7)
    return c.finish(c.index([(sep(b"b"), handle)]), entries=1)


def partition_reuse_bomb(partition_entries: int = 2000, references: int = 20000) -> bytes:
    """A two-level index whose top level names one partition ``references`` times (old reader:
    partitions x entries separators, gigabytes and minutes, from a file well under 1 MB)."""
    c = Crafter()
    data = c.block(data_block([(b"k", b"v")]))
    partition = c.index([(ikey(b"k"), data)] * partition_entries)
    top = c.index([(ikey(b"k"), partition)] * references)
    return c.finish(top, entries=1, two_level=True)


def key_growth_bomb(block_bytes: int = 200_000) -> bytes:
    """One data block whose every entry shares the whole previous internal key and adds one byte
    and a trailer: keys ascend, but decoding materialises ~block_bytes^2/32 bytes of keys."""
    entries = bytearray()
    prev_len = 0
    n = 0
    while len(entries) < block_bytes:
        unshared = bytes((0x61,)) + struct.pack("<Q", 1)  # "a" then a SET trailer, seq 0
        entries += encode_uvarint(prev_len) + encode_uvarint(len(unshared)) + b"\x00" + unshared
        prev_len += len(unshared)
        n += 1
    block = bytes(entries) + struct.pack("<II", 0, 1)
    c = Crafter()
    handle = c.block(block)
    return c.finish(c.index([(sep(b"b"), handle)]), entries=n)


def index_key_growth_bomb(block_bytes: int = 200_000) -> bytes:
    """The same growth in the index block, which the reader decodes when it opens the file."""
    c = Crafter()
    data = c.block(data_block([(b"a", b"1")]))
    handle_bytes = encode_handle(data)
    entries = bytearray()
    prev_len = 0
    while len(entries) < block_bytes:
        unshared = b"a" + SEPARATOR_TRAILER
        header = encode_uvarint(prev_len) + encode_uvarint(len(unshared)) + encode_uvarint(len(handle_bytes))
        entries += header + unshared + handle_bytes
        prev_len += len(unshared)
    index = c.block(bytes(entries) + struct.pack("<II", 0, 1))
    return c.finish(index, entries=1)


def bombs() -> dict[str, bytes]:
    return {
        "zstd-size": zstd_size_bomb(),
        "partition-reuse": partition_reuse_bomb(),
        "data-key-growth": key_growth_bomb(),
        "index-key-growth": index_key_growth_bomb(),
    }


# -- the naive reference parse ---------------------------------------------------------------------


class Unjudged(Exception):
    """The file uses a variant the reference does not model (it cannot say what is correct)."""


def _ikey_lt(a: bytes, b: bytes) -> bool:
    """Internal-key order: user key ascending, then trailer descending."""
    ua, ub = a[:-8], b[:-8]
    if ua != ub:
        return ua < ub
    return int.from_bytes(a[-8:], "little") > int.from_bytes(b[-8:], "little")


def _index_entries(view: memoryview, handle: BlockHandle, name: str) -> list[tuple[bytes, BlockHandle]]:
    keys, vals = decode_block(read_block(view, handle, name), name, handle.offset)
    out = []
    for key, val in zip(keys, vals, strict=True):
        if len(key) < 8:
            raise CorruptDataError("short index key", file=name, offset=handle.offset)
        out.append((key, decode_handle(val, 0, file=name)[0]))
    return out


def reference_records(data: bytes, name: str = "ref") -> Records:
    """What a correct reader returns for ``data``; CorruptDataError if it is not a valid table."""
    view = memoryview(data)
    footer = decode_footer(view, name)
    if footer.checksum_type != CHECKSUM_CRC32C:
        raise Unjudged("checksum type")
    mk, mv = decode_block(read_block(view, footer.metaindex, name), name, 0)
    meta = {k: decode_handle(v, 0, file=name)[0] for k, v in zip(mk, mv, strict=True)}
    ph = meta.get(PROPERTIES_BLOCK.encode())
    props = decode_properties(read_block(view, ph, name), name, 0) if ph is not None else {}
    if uvarint_prop(props, INDEX_KEY_IS_USER_KEY, name) or uvarint_prop(
        props, INDEX_VALUE_IS_DELTA_ENCODED, name
    ):
        raise Unjudged("index variant")
    index_type = fixed32_prop(props, INDEX_TYPE, name)
    if index_type not in (0, 1, 2):
        raise CorruptDataError("index type", file=name)
    index = _index_entries(view, footer.index, name)
    if index_type == 2:
        top = index
        index = []
        for top_key, part in top:
            entries = _index_entries(view, part, name)
            if not entries or _ikey_lt(top_key, entries[-1][0]):
                raise CorruptDataError("partition above its top-level key", file=name)
            index += entries
        _strictly_ascending([k for k, _ in top], name)
    _strictly_ascending([k for k, _ in index], name)
    all_entries: list[tuple[bytes, bytes]] = []
    prev_sep: bytes | None = None
    for sep_key, handle in index:
        keys, vals = decode_block(read_block(view, handle, name), name, handle.offset)
        if not keys or any(len(k) < 8 for k in keys):
            raise CorruptDataError("empty block or short key", file=name)
        # Lookups route a user key to the first block whose separator is >= it, so a block must
        # lie between its separators; it may start AT the previous one only to continue the
        # previous block's last key with older versions (which that block resolves).
        first, last = keys[0][:-8], keys[-1][:-8]
        if last > sep_key[:-8]:
            raise CorruptDataError("block above its separator", file=name)
        below = prev_sep is not None and first <= prev_sep[:-8]
        if below and not first == prev_sep[:-8] == all_entries[-1][0][:-8]:  # type: ignore[index]
            raise CorruptDataError("block below the previous separator", file=name)
        all_entries += zip(keys, vals, strict=True)
        prev_sep = sep_key
    _strictly_ascending([k for k, _ in all_entries], name)
    if NUM_ENTRIES in props:
        stated = uvarint_prop(props, NUM_ENTRIES, name) - uvarint_prop(props, NUM_RANGE_DELETIONS, name)
        if stated != len(all_entries):
            raise CorruptDataError("entry count", file=name)
    records: Records = []
    last_user_key: bytes | None = None
    for key, value in all_entries:
        if key[:-8] == last_user_key:
            continue  # an older version
        last_user_key = key[:-8]
        if key[-8] == 1:
            records.append((key[:-8], value))
    return records


def _strictly_ascending(keys: list[bytes], name: str) -> None:
    for a, b in pairwise(keys):
        if not _ikey_lt(a, b):
            raise CorruptDataError("keys not strictly ascending", file=name)


# -- reading a file the way callers do ------------------------------------------------------------


def read_everything(data: bytes, name: str) -> Records:
    """Open, scan, look every key up and seek: every path a hostile file could steer. Raises
    AssertionError when the paths disagree (e.g. a key a scan returns but ``get`` misses)."""
    reader = TableReader(data, name)
    records = list(reader)
    for key, value in records:
        got = reader.get(key)
        assert got == value, f"get({key!r}) = {got!r}, scan gave {value!r}"
    cursor = reader.cursor(b"")
    for i in range(0, len(records), max(1, len(records) // 8)):
        assert list(reader.seek_ge(records[i][0])) == records[i:], f"seek_ge({records[i][0]!r})"
        cursor.seek_ge(records[i][0])  # forward from the previous probe, inside a block or past it
        assert cursor.next() == records[i], f"cursor.seek_ge({records[i][0]!r})"
    everything = reader.cursor()
    assert list(iter(everything.next, None)) == records, "a cursor's full pass"
    assert [k for k, _ in records] == sorted({k for k, _ in records}), "scan keys not strictly ascending"
    assert reader.max_key() == (records[-1][0] if records else None)
    return records


def outcome(data: bytes, name: str) -> str:
    try:
        records = read_everything(data, name)
    except CorruptDataError as e:
        if e.file != name or e.offset is None:
            return f"error CorruptDataError without file/offset: {e}"
        return f"corrupt {e.offset} {e}"
    except Exception as e:  # reported, not raised: the parent test asserts on the outcome
        return f"error {type(e).__name__}: {e}"
    digest = hashlib.sha256(repr(records).encode()).hexdigest()[:16]
    return f"ok {len(records)} {digest}"


# -- the subprocess ---------------------------------------------------------------------------------

_CHILD = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from tests.format.crafted_tables import child_main
child_main(sys.argv[2:])
"""


@dataclass
class ChildResult:
    returncode: int | None
    lines: dict[str, str]
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}; reported {self.lines}; stderr tail: {self.stderr[-2000:]}"


def run_limited(args: list[str], *, memory_bytes: int, timeout: float) -> ChildResult:
    """Run :func:`child_main` (``args``) under ``RLIMIT_AS`` and a wall-clock limit."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(memory_bytes), *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return ChildResult(None, _parse(out), f"timed out after {timeout}s; {err}")
    return ChildResult(proc.returncode, _parse(proc.stdout), proc.stderr)


def _parse(stdout: str) -> dict[str, str]:
    lines = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition(" ")
        lines[name] = rest
    return lines


def child_main(args: list[str]) -> None:
    """``files DIR``: one outcome line per file; ``fuzz N``: the hypothesis mutation run."""
    mode, arg = args
    if mode == "files":
        for path in sorted(Path(arg).iterdir()):
            print(path.name, outcome(path.read_bytes(), path.name), flush=True)
    elif mode == "fuzz":
        from tests.format.fuzz_tables import run_fuzz

        run_fuzz(int(arg))
        print("fuzz done", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


def block_regions(data: bytes) -> list[BlockHandle]:
    """Every block of a valid table (data, index partitions, index, meta blocks, metaindex)."""
    reader = TableReader(data, "regions")
    view = memoryview(data)
    regions = [*reader._handles, reader.footer.index, reader.footer.metaindex, *reader.meta_blocks.values()]
    if reader.index_type == 2:
        regions += [h for _, h in _index_entries(view, reader.footer.index, "regions")]
    assert all(h.offset + h.size + BLOCK_TRAILER_SIZE <= len(data) - FOOTER_SIZE for h in regions)
    return sorted(set(regions))

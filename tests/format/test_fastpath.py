"""The compiled per-record path (``lakefs_core/format/_fastpath.pyx``) and its pure twin agree.

:data:`~lakefs_core.format.sstable.writer.TableWriter` takes ``add``, ``add_record`` and the data
block flush from the extension where it is built; :class:`PureTableWriter` is the reference. Both
must produce the same file bytes, the same running estimates and the same table-id input for any
records, block options and compression, and refuse the same mistakes the same way. CI builds the
extension, so there it must be in use (a silent fallback would hide a broken build); the pinned
digests of ``test_writer_bytes.py`` are also checked with ``LAKEFS_PURE_PYTHON=1`` in a fresh
interpreter, so both paths stay pinned to the bytes of the writer before any speed-up.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import fnv_c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.format.accel import FASTPATH
from lakefs_core.format.envelope import encode_envelope
from lakefs_core.format.records import ValueRecord
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.format.sstable.writer import ACCELERATED, PureTableWriter, TableWriter
from tests.support.profiles import examples
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]
needs_extension = pytest.mark.skipif(
    not ACCELERATED, reason="the _fastpath extension is not built here (CI requires it)"
)

# Bytes that exercise prefix sharing into the trailer (0x00, 0x01) and separator edge cases (0xff).
_KEY_BYTES = st.sampled_from([0x00, 0x01, 0x02, 0x61, 0x62, 0xFE, 0xFF])
_keys = st.lists(
    st.one_of(
        st.binary(max_size=24).map(bytes),
        st.lists(_KEY_BYTES, max_size=12).map(bytes),
        st.lists(_KEY_BYTES, min_size=150, max_size=300).map(bytes),  # two-byte varint headers
    ),
    min_size=0,
    max_size=120,
    unique=True,
).map(sorted)
_parts = st.tuples(
    st.binary(max_size=40),
    st.one_of(st.binary(max_size=200), st.just(b"\x07" * 20_000)),  # multi-byte value lengths
)
_options = st.fixed_dictionaries(
    {
        "compression": st.sampled_from(["snappy", "none"]),
        "block_size": st.sampled_from([32, 256, 1000, 4096]),
        "block_restart_interval": st.sampled_from([1, 3, 16]),
        "index_partition_size": st.sampled_from([48, 256, 4096]),
    }
)


def _write(
    cls: type[PureTableWriter],
    keys: list[bytes],
    parts: list[tuple[bytes, bytes]],
    options: dict[str, object],
    use_records: bool,
) -> tuple[bytes, list[int], str]:
    writer = cls(**options)  # type: ignore[arg-type]
    id_hash = hashlib.sha256()
    writer.set_id_sink(bytearray(), id_hash.update)
    estimates = []
    for key, (identity, data) in zip(keys, parts, strict=False):
        if use_records:
            estimates.append(writer.add_record(key, identity, data))
        else:
            estimates.append(writer.add(key, encode_envelope(identity, data)))
    assert writer.first_key == (keys[0] if keys and estimates else b"")
    data = writer.finish({"type": b"ranges"})
    pending = writer._id_input
    assert pending is not None
    id_hash.update(pending)
    return data, estimates, id_hash.hexdigest()


@needs_extension
@settings(max_examples=examples(1.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=_keys,
    parts=st.lists(_parts, min_size=120, max_size=120),
    options=_options,
    use_records=st.booleans(),
)
def test_compiled_and_pure_writers_agree(
    keys: list[bytes], parts: list[tuple[bytes, bytes]], options: dict[str, object], use_records: bool
) -> None:
    assert _write(TableWriter, keys, parts, options, use_records) == _write(
        PureTableWriter, keys, parts, options, use_records
    )


_policies = st.builds(
    SplitPolicy,
    min_range_size_bytes=st.sampled_from([0, 200, 3000]),
    max_range_size_bytes=st.sampled_from([3000, 20_000, 1 << 30]),
    range_raggedness_entries=st.integers(1, 7),
)


@settings(max_examples=examples(1), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=_keys, parts=st.lists(_parts, min_size=120, max_size=120), policy=_policies)
def test_split_decisions_are_the_policys(
    keys: list[bytes], parts: list[tuple[bytes, bytes]], policy: SplitPolicy
) -> None:
    """``add_record_split`` answers ``SplitPolicy.should_break`` on ``add_record``'s estimate, on
    both paths (the compiled one computes FNV-1a and the thresholds in C)."""
    answers = []
    for cls in dict.fromkeys((TableWriter, PureTableWriter)):
        split, plain = cls(), cls()
        split.set_id_sink(bytearray(), lambda chunk: None)
        plain.set_id_sink(bytearray(), lambda chunk: None)
        split.set_split_policy(policy)
        got = [
            split.add_value_split(ValueRecord(k, i, d)) if n % 2 else split.add_record_split(k, i, d)
            for n, (k, (i, d)) in enumerate(zip(keys, parts, strict=False))
        ]
        want = [
            policy.should_break(k, plain.add_record(k, i, d)) for k, (i, d) in zip(keys, parts, strict=False)
        ]
        assert got == want
        assert split.finish() == plain.finish()
        answers.append(got)
    assert answers[0] == answers[-1]


T = b"\x01" + b"\x00" * 7  # the SET trailer: a key may continue its predecessor with these bytes


@needs_extension
@pytest.mark.parametrize("interval", [1, 16])
def test_prefix_sharing_into_the_trailer(interval: int) -> None:
    # A key that extends its predecessor with the predecessor's own trailer bytes shares a prefix
    # running into that trailer: up to, never past, the key's own length.
    keys = sorted(
        {
            b"a",
            b"a" + T[:1],
            b"a" + T[:3],
            b"a" + T,
            b"a" + T + b"x",
            b"a" + T + T,
            b"a\x01\x01",
            b"b" * 30,
            b"b" * 30 + T[:7],
            b"b" * 30 + T + b"\x00",
            b"\xff" * 3,
            b"\xff" * 3 + T,
        }
    )
    parts = [(b"i", b"d" * n) for n in range(len(keys))]
    options: dict[str, object] = {"block_restart_interval": interval, "block_size": 64}
    for use_records in (False, True):
        assert _write(TableWriter, keys, parts, options, use_records) == _write(
            PureTableWriter, keys, parts, options, use_records
        )


@needs_extension
def test_id_input_matches_the_spec_formula_across_chunks() -> None:
    # Enough input to hand several 64 KiB chunks to the hash: the chunking must not change the id.
    records = [(b"k%06d" % i, b"\x01" * 32, b"d" * (i % 700)) for i in range(600)]
    expected = hashlib.sha256()
    for cls in (TableWriter, PureTableWriter):
        got = hashlib.sha256()
        writer = cls()
        writer.set_id_sink(bytearray(), got.update)
        for key, identity, data in records:
            writer.add_record(key, identity, data)
        assert writer._id_input is not None
        got.update(writer._id_input)
        if cls is TableWriter:
            for key, identity, data in records:
                value = encode_envelope(identity, data)
                expected.update(b"%d%b|%d%b|" % (len(key), key, len(value), value))
        assert got.hexdigest() == expected.hexdigest()


@pytest.mark.parametrize("cls", [TableWriter, PureTableWriter], ids=["table_writer", "pure"])
def test_refusals_are_the_same(cls: type[PureTableWriter]) -> None:
    writer = cls()
    writer.set_id_sink(bytearray(), lambda chunk: None)
    writer.add_record(b"b", b"i", b"d")
    for key in (b"b", b"a", b""):
        with pytest.raises(BadInputError, match="keys must be strictly ascending"):
            writer.add_record(key, b"i", b"d")
        with pytest.raises(BadInputError, match="keys must be strictly ascending"):
            writer.add_record_split(key, b"i", b"d")
        with pytest.raises(BadInputError, match="keys must be strictly ascending"):
            writer.add(key, b"v")
    with pytest.raises(TypeError):
        writer.add("c", b"v")  # type: ignore[arg-type]
    assert writer.entry_count == 1
    writer.finish()
    with pytest.raises(BadInputError, match="already finished"):
        writer.add(b"z", b"v")
    with pytest.raises(BadInputError, match="already finished"):
        writer.add_record(b"z", b"i", b"d")
    for bad in (
        [b"c", b"i", b"d"],
        (b"c", b"i"),
        (b"c", b"i", b"d", b""),
        ("c", b"i", b"d"),
        (b"c", None, b"d"),
    ):
        with pytest.raises(TypeError, match="a record"):
            writer.add_value_split(bad)  # type: ignore[arg-type]
    unsinked = cls()
    with pytest.raises(TypeError, match="id sink"):
        unsinked.add_record(b"a", b"i", b"d")
    with pytest.raises(TypeError, match="id sink"):
        unsinked.add_record_split(b"a", b"i", b"d")
    assert unsinked.entry_count == 0


@pytest.mark.parametrize("cls", [TableWriter, PureTableWriter], ids=["table_writer", "pure"])
def test_an_empty_first_key_is_a_record(cls: type[PureTableWriter]) -> None:
    writer = cls()
    writer.add(b"", b"v")
    writer.add(b"a", b"v")
    assert (writer.first_key, writer.last_key, writer.entry_count) == (b"", b"a", 2)


@needs_extension
@given(st.binary(max_size=300))
def test_compiled_fnv_is_fnv1a_64(data: bytes) -> None:
    assert FASTPATH is not None
    assert FASTPATH.fnv1a64(data) == fnv_c.fnv1a_64(data)


def test_extension_is_in_use_in_ci() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("only CI requires the extension (it builds it with `make venv`)")
    assert os.environ.get("LAKEFS_PURE_PYTHON") != "1"
    assert ACCELERATED, "CI must build lakefs_core/format/_fastpath.pyx (see setup.py)"


@pytest.mark.slow
def test_pure_path_keeps_the_pinned_bytes() -> None:
    """``test_writer_bytes.py`` in a fresh interpreter with the extension switched off."""
    env = {**os.environ, "LAKEFS_PURE_PYTHON": "1"}
    code = (
        "from lakefs_core.format.sstable.writer import ACCELERATED; assert not ACCELERATED;"
        "import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:xdist', '-p', 'no:cacheprovider',"
        " 'tests/format/test_writer_bytes.py']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(240),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout

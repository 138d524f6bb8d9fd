"""Interoperability with RocksDB itself: ``sst_dump`` accepts our files, RocksDB ingests them, and
our reader reads files written by RocksDB's own ``SstFileWriter`` in every format variant.

``sst_dump`` (Debian ``rocksdb-tools``) and ``rocksdict`` (a dev dependency) are prerequisites:
missing, the tests skip with the reason; under ``CI`` they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.sstable import TableReader, TableWriter
from tests.support.timing import scaled

IN_CI = bool(os.environ.get("CI"))


def skip_or_fail(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def sst_dump() -> str:
    path = shutil.which("sst_dump")
    if path is None:
        skip_or_fail("sst_dump is not on PATH (Debian package rocksdb-tools)")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def rocksdict() -> ModuleType:
    try:
        import rocksdict as module
    except ImportError:  # pragma: no cover - depends on the environment
        skip_or_fail("rocksdict is not installed (dev dependency)")
        raise
    return module


def records(n: int, value_size: int = 60) -> list[tuple[bytes, bytes]]:
    # Printable keys and values without quotes or newlines, so sst_dump's output can be parsed.
    return [
        (b"warehouse/t%02d/part-%08d.parquet" % (i % 7, i), (b"v%d." % i * value_size)[:value_size])
        for i in range(n)
    ]


def write(path: Path, recs: list[tuple[bytes, bytes]], **options: object) -> TableReader:
    writer = TableWriter(**options)  # type: ignore[arg-type]
    for key, value in sorted(recs):
        writer.add(key, value)
    data = writer.finish({"type": b"ranges", "count": str(len(recs)).encode()})
    path.write_bytes(data)
    return TableReader(data, str(path))


@dataclass(frozen=True)
class Variant:
    compression: str
    n: int
    index_type: int
    block_size: int = 4096
    index_partition_size: int = 4096

    def write(self, path: Path) -> tuple[TableReader, list[tuple[bytes, bytes]]]:
        recs = sorted(records(self.n))
        reader = write(
            path,
            recs,
            compression=self.compression,
            block_size=self.block_size,
            index_partition_size=self.index_partition_size,
        )
        assert reader.index_type == self.index_type
        return reader, recs


VARIANTS = [
    pytest.param(Variant("snappy", 500, 0), id="snappy-one-level"),
    pytest.param(Variant("none", 500, 0), id="none-one-level"),
    pytest.param(Variant("snappy", 60_000, 2), id="snappy-two-level"),
    pytest.param(Variant("none", 20_000, 2), id="none-two-level"),
    pytest.param(Variant("snappy", 3000, 2, block_size=1024, index_partition_size=200), id="small-parts"),
    pytest.param(Variant("snappy", 1, 0), id="one-record"),
]


def run_sst_dump(sst_dump: str, *args: str) -> str:
    done = subprocess.run(
        [sst_dump, *args], check=False, capture_output=True, text=True, errors="replace", timeout=scaled(120)
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # sst_dump exits 0 even on a corrupt file, so the output is what decides.
    assert "corruption" not in output.lower(), output
    assert "error" not in output.lower(), output
    return output


@pytest.mark.parametrize("variant", VARIANTS)
def test_sst_dump_scans_and_checks_our_files(sst_dump: str, tmp_path: Path, variant: Variant) -> None:
    path = tmp_path / "ours.sst"
    reader, recs = variant.write(path)
    n = variant.n
    scan = run_sst_dump(sst_dump, f"--file={path}", "--command=scan", "--verify_checksum")
    scanned = [line for line in scan.splitlines() if line.startswith("'")]
    assert len(scanned) == n
    first_key, first_value = recs[0]
    assert scanned[0] == f"'{first_key.decode()}' seq:0, type:1 => {first_value.decode()}"
    run_sst_dump(sst_dump, f"--file={path}", "--command=check", "--verify_checksum")
    props = run_sst_dump(sst_dump, f"--file={path}", "--show_properties", "--command=none")
    assert re.search(rf"# entries: {n}\b", props), props
    assert re.search(rf"# data blocks: {reader.num_data_blocks}\b", props), props
    if variant.index_type == 2:
        partitions = re.search(r"# index partitions: (\d+)", props)
        assert partitions is not None and int(partitions.group(1)) > 1, props


def test_sst_dump_output_check_is_not_vacuous(sst_dump: str, tmp_path: Path) -> None:
    """A corrupted file does make the output check fail (sst_dump itself still exits 0)."""
    path = tmp_path / "bad.sst"
    reader = write(path, records(500), compression="none")
    data = bytearray(path.read_bytes())
    data[reader.footer.index.offset - 50] ^= 1  # inside the last data block
    path.write_bytes(bytes(data))
    with pytest.raises(AssertionError, match=r"(?i)corruption"):
        run_sst_dump(sst_dump, f"--file={path}", "--command=check", "--verify_checksum")


@pytest.mark.parametrize("variant", VARIANTS)
def test_rocksdb_ingests_our_files(rocksdict: ModuleType, tmp_path: Path, variant: Variant) -> None:
    path = tmp_path / "ours.sst"
    _, recs = variant.write(path)
    n = variant.n
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    try:
        db.ingest_external_file([str(path)])
        assert list(db.items()) == recs
        for key, value in recs[:: max(1, n // 200)]:
            assert db.get(key) == value
        assert db.get(b"warehouse/absent") is None
    finally:
        db.close()


def write_with_rocksdb(
    rocksdict: ModuleType, path: Path, recs: list[tuple[bytes, bytes]], **settings: str | int | bool
) -> None:
    rd = rocksdict
    table = rd.BlockBasedOptions()
    table.set_format_version(int(settings.get("format_version", 5)))
    table.set_checksum_type(getattr(rd.ChecksumType, str(settings.get("checksum", "crc32c")))())
    if settings.get("two_level"):
        table.set_index_type(rd.BlockBasedIndexType.two_level_index_search())
        table.set_metadata_block_size(256)  # small partitions: several of them
    if settings.get("hash_index"):
        table.set_data_block_index_type(rd.DataBlockIndexType.binary_and_hash())
    options = rd.Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(getattr(rd.DBCompressionType, str(settings.get("compression", "snappy")))())
    writer = rd.SstFileWriter(options=options)
    writer.open(str(path))
    for key, value in recs:
        writer[key] = value
    writer.finish()


@pytest.mark.parametrize("format_version", [2, 3, 4, 5])
@pytest.mark.parametrize("two_level", [False, True])
@pytest.mark.parametrize("compression_and_hash", [("snappy", False), ("none", True)])
def test_reads_rocksdb_written_files(
    rocksdict: ModuleType,
    tmp_path: Path,
    format_version: int,
    two_level: bool,
    compression_and_hash: tuple[str, bool],
) -> None:
    """Format 3+ index keys are user keys, 4+ delta-encodes index handles; hash-indexed data blocks
    carry an extra footer. All must read exactly."""
    compression, hash_index = compression_and_hash
    recs = sorted(records(4000, value_size=30))
    path = tmp_path / "rocks.sst"
    write_with_rocksdb(
        rocksdict,
        path,
        recs,
        format_version=format_version,
        two_level=two_level,
        compression=compression,
        hash_index=hash_index,
    )
    reader = TableReader(path.read_bytes(), str(path))
    assert reader.index_type == (2 if two_level else 0)
    assert reader.num_data_blocks > 10
    assert list(reader) == recs
    for key, value in recs[::37]:
        assert reader.get(key) == value
        assert next(reader.seek_ge(key)) == (key, value)
    assert reader.get(recs[0][0] + b"!") is None


@pytest.mark.parametrize("compression", ["zlib", "bz2", "lz4", "lz4hc", "zstd"])
def test_reads_other_rocksdb_codecs(rocksdict: ModuleType, tmp_path: Path, compression: str) -> None:
    recs = sorted(records(3000))
    path = tmp_path / "codec.sst"
    write_with_rocksdb(rocksdict, path, recs, compression=compression)
    reader = TableReader(path.read_bytes(), str(path))
    assert reader.compression.lower().startswith(compression[:2])
    assert list(reader) == recs


def test_xxhash_checksums_need_verification_off(rocksdict: ModuleType, tmp_path: Path) -> None:
    recs = sorted(records(1000))
    path = tmp_path / "xxh3.sst"
    write_with_rocksdb(rocksdict, path, recs, checksum="xxh3")
    data = path.read_bytes()
    with pytest.raises(CorruptDataError, match="verify_checksums=False") as info:
        TableReader(data, str(path))
    assert info.value.file == str(path)
    assert list(TableReader(data, str(path), verify_checksums=False)) == recs

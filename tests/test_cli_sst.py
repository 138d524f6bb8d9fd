"""``lakefs-core sst inspect`` and ``sst write-range``, run as real processes and in-process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakefs_core.cli import main
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.format.records import make_entry
from tests.support.env import require_tool
from tests.support.timing import scaled

RANGE_ID = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lakefs_core.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=scaled(60),
    )


def test_inspect_lakefs_range_json(shared_fixtures: Path) -> None:
    out = cli("sst", "inspect", str(shared_fixtures / "lakefs" / "range.sst"), "--records", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["kind"] == "ranges"
    assert report["computed_id"] == RANGE_ID
    assert report["count"] == 2
    assert (report["min_key"], report["max_key"]) == ("a/b/c/no", "a/b/c/yes")
    assert report["properties"]["estimated_size_bytes"] == "287"
    recs = report["records"]
    assert [r["key"] for r in recs] == ["a/b/c/no", "a/b/c/yes"]
    assert [r["entry"]["size"] for r in recs] == [11, 4]
    assert all(r["identity_matches_entry"] for r in recs)
    assert all(r["entry"]["address_type"] == "RELATIVE" for r in recs)
    assert all(len(r["identity"]) == 64 for r in recs)


def test_inspect_lakefs_metarange_human(shared_fixtures: Path) -> None:
    out = cli("sst", "inspect", str(shared_fixtures / "lakefs" / "metarange.sst"), "--records")
    assert out.returncode == 0, out.stderr
    assert "kind: metaranges" in out.stdout
    assert f"identity={RANGE_ID}" in out.stdout
    assert '"estimated_size": 1190' in out.stdout


def test_inspect_generic_rocksdb(shared_fixtures: Path) -> None:
    report = json.loads(cli("sst", "inspect", str(shared_fixtures / "rocksdb" / "h.sst"), "--json").stdout)
    assert report["kind"] == "generic"
    assert "computed_id" not in report
    assert report["count"] == 1710


def test_inspect_errors_have_distinct_exit_codes(tmp_path: Path) -> None:
    missing = cli("sst", "inspect", str(tmp_path / "nope.sst"))
    assert missing.returncode == NotFoundError.exit_code
    assert missing.stderr.count("\n") == 1 and "nope.sst" in missing.stderr
    junk = tmp_path / "junk.sst"
    junk.write_bytes(b"x" * 100)
    bad = cli("sst", "inspect", str(junk))
    assert bad.returncode == CorruptDataError.exit_code
    assert "junk.sst" in bad.stderr and "Traceback" not in bad.stderr


def _line(key: str, **extra: object) -> str:
    item = {"key": key, "address": f"data/g1/{key}", "size": len(key), "etag": f"e-{key}", **extra}
    return json.dumps(item)


def test_write_range_then_inspect(tmp_path: Path) -> None:
    lines = [_line(f"k{i:05d}", metadata={"a": "b"}, content_type="text/plain") for i in range(500, 0, -1)]
    lines.append(_line("k00000", last_modified="2026-01-02T03:04:05Z", address_type="FULL"))
    out = cli("sst", "write-range", str(tmp_path / "out"), stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["records"] == 501
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert files == {result["metarange_id"], *result["range_ids"]}
    keys = []
    for range_id in result["range_ids"]:
        path = str(tmp_path / "out" / range_id)
        report = json.loads(cli("sst", "inspect", path, "--records", "--json").stdout)
        assert report["computed_id"] == range_id and report["id_matches_file_name"]
        keys += [r["key"] for r in report["records"]]
        assert all(r["identity_matches_entry"] for r in report["records"])
    assert keys == sorted(f"k{i:05d}" for i in range(501))
    meta = json.loads(cli("sst", "inspect", str(tmp_path / "out" / result["metarange_id"]), "--json").stdout)
    assert meta["kind"] == "metaranges" and meta["computed_id"] == result["metarange_id"]
    first = json.loads(
        cli("sst", "inspect", str(tmp_path / "out" / result["range_ids"][0]), "--records", "--json").stdout
    )["records"][0]
    assert first["entry"]["last_modified"] == "2026-01-02T03:04:05Z"
    assert first["entry"]["address_type"] == "FULL"
    identity, _ = make_entry("data/g1/k00000", 6, "e-k00000")
    assert first["identity"] == identity.hex()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"key": "a", "address": "x", "size": -1, "etag": "e"}', "line 1: size"),
        ('{"key": "a", "address": "x", "size": 1}', "line 1: etag"),
        ('{"key": "a", "address": "x", "size": 1, "etag": "e", "color": 1}', "line 1: color"),
        ("not json", "line 1"),
        (
            '{"key": "a", "address": "x", "size": 1, "etag": "e", "last_modified": "2026-01-01T00:00:00"}',
            "line 1: last_modified",
        ),
    ],
)
def test_write_range_bad_input_names_line_and_field(
    tmp_path: Path, line: str, field: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(line + "\n"))
    assert main(["sst", "write-range", str(tmp_path / "o")]) == BadInputError.exit_code
    assert field in capsys.readouterr().err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_write_range_duplicate_key(tmp_path: Path) -> None:
    out = cli("sst", "write-range", str(tmp_path / "o"), stdin=_line("a") + "\n" + _line("a") + "\n")
    assert out.returncode == BadInputError.exit_code
    assert "line 2: key" in out.stderr


def test_sst_dump_reads_written_files(tmp_path: Path) -> None:
    sst_dump = require_tool("sst_dump", "rocksdb-tools")
    out = cli("sst", "write-range", str(tmp_path), stdin="\n".join(_line(f"x{i}") for i in range(50)))
    result = json.loads(out.stdout)
    for table_id in [*result["range_ids"], result["metarange_id"]]:
        named = tmp_path / f"{table_id}.sst"  # sst_dump only accepts *.sst names
        shutil.copyfile(tmp_path / table_id, named)
        dump = subprocess.run(
            [sst_dump, f"--file={named}", "--command=check", "--verify_checksum"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert dump.returncode == 0 and "Corruption" not in dump.stdout + dump.stderr

"""``lakefs-core sst``: inspect and write graveler table files.

- ``sst inspect FILE [--records] [--json]``: the table's kind (``ranges``, ``metaranges`` or
  ``generic`` for any other RocksDB table), its user properties, record count, min/max key and, for
  graveler tables, the id computed from its content (``computed_id``; equal to the file name for an
  intact file). ``--records`` adds every record: key, identity (hex) and the decoded ``Entry`` /
  ``RangeData`` (raw value for generic tables).
- ``sst write-range OUT_DIR < records.jsonl``: one JSON object per line (``key``, ``address``,
  ``size``, ``etag``, optional ``last_modified`` RFC 3339, ``metadata``, ``content_type``,
  ``address_type``); sorts them, writes range files and a metarange into OUT_DIR, each file named by
  its id, and prints JSON with the metarange id and the range ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from stat import S_ISREG
from typing import Any, Literal

import click
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakefs_core.cli.context import local_path_error
from lakefs_core.committed.writer import METARANGES, RANGES, MetaRangeWriter
from lakefs_core.errors import BadInputError
from lakefs_core.format.ids import DERIVED_TABLE_PROPS, table_id
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import (
    ADDRESS_FULL,
    ADDRESS_RELATIVE,
    ValueRecord,
    decode_entry,
    decode_metarange_record,
    decode_range_record,
    entry_identity_of,
    make_entry,
)
from lakefs_core.format.sstable.reader import TableReader


@click.group()
def sst() -> None:
    """Inspect and write graveler (RocksDB-compatible) table files."""


def show_bytes(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def _entry_json(entry: catalog_pb2.Entry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "address": entry.address,
        "size": entry.size,
        "etag": entry.e_tag,
        "metadata": dict(sorted(entry.metadata.items())),
        "address_type": catalog_pb2.Entry.AddressType.Name(entry.address_type),
        "content_type": entry.content_type,
    }
    if entry.HasField("last_modified"):
        out["last_modified"] = entry.last_modified.ToJsonString()
    return out


def _record_json(kind: str, key: bytes, value: bytes, file: str) -> dict[str, Any]:
    if kind == RANGES:
        rec = decode_range_record(key, value, file=file)
        entry = decode_entry(rec.data, file=file)
        return {
            "key": show_bytes(key),
            "identity": rec.identity.hex(),
            "identity_matches_entry": entry_identity_of(entry) == rec.identity,
            "entry": _entry_json(entry),
        }
    if kind == METARANGES:
        info = decode_metarange_record(key, value, file=file)
        return {
            "key": show_bytes(key),
            "identity": info.id,
            "range_data": {
                "min_key": show_bytes(info.min_key),
                "max_key": show_bytes(info.max_key),
                "estimated_size": info.estimated_size,
                "count": info.count,
            },
        }
    return {"key": show_bytes(key), "value": show_bytes(value)}


def inspect_table(data: bytes, name: str, *, records: bool) -> dict[str, Any]:
    """Everything ``sst inspect`` reports about one table, as a JSON-able dict."""
    reader = TableReader(data, name=name)
    props = reader.user_properties
    kind_raw = props.get("type", b"")
    kind = kind_raw.decode() if kind_raw in (RANGES.encode(), METARANGES.encode()) else "generic"
    pairs = list(reader)
    out: dict[str, Any] = {
        "file": name,
        "kind": kind,
        "properties": {k: show_bytes(v) for k, v in sorted(props.items())},
        "count": len(pairs),
        "min_key": show_bytes(pairs[0][0]) if pairs else None,
        "max_key": show_bytes(pairs[-1][0]) if pairs else None,
    }
    if kind != "generic":
        id_props = {k: v for k, v in props.items() if k not in DERIVED_TABLE_PROPS}
        out["computed_id"] = table_id(pairs, id_props)
        base = os.path.basename(name)
        if len(base) == 64:
            out["id_matches_file_name"] = base == out["computed_id"]
    if records:
        out["records"] = [_record_json(kind, k, v, name) for k, v in pairs]
    return out


def _print_human(report: dict[str, Any]) -> None:
    for field in ("file", "kind", "computed_id", "id_matches_file_name", "count", "min_key", "max_key"):
        if field in report:
            click.echo(f"{field}: {report[field]}")
    click.echo("properties:")
    for k, v in report["properties"].items():
        click.echo(f"  {k} = {v}")
    for rec in report.get("records", []):
        detail = rec.get("entry") or rec.get("range_data") or {"value": rec.get("value")}
        ident = f"  identity={rec['identity']}" if "identity" in rec else ""
        click.echo(f"- {rec['key']}{ident}")
        click.echo(f"    {json.dumps(detail, sort_keys=True)}")


def read_table_file(file: Path) -> bytes:
    """The bytes of a regular file. Anything else (a FIFO, ``/dev/zero``) is refused before it is
    opened: opening a FIFO blocks and a device may never end."""
    try:
        st = file.stat()
        if not S_ISREG(st.st_mode):
            raise BadInputError(f"{file} is not a regular file", field="FILE")
        return file.read_bytes()
    except OSError as e:
        raise local_path_error(e, file, "FILE") from e


@sst.command("inspect")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--records", is_flag=True, help="List every record.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def inspect_cmd(file: Path, records: bool, as_json: bool) -> None:
    """Describe a range, metarange or generic RocksDB table file."""
    data = read_table_file(file)
    report = inspect_table(data, str(file), records=records)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    else:
        _print_human(report)


MAX_SIZE = 2**63 - 1  # Entry.size is a protobuf int64


class RecordLine(BaseModel):
    """One line of ``write-range`` input."""

    model_config = ConfigDict(extra="forbid", strict=False)

    key: str = Field(min_length=1)
    address: str = Field(min_length=1)
    size: int = Field(ge=0, le=MAX_SIZE)
    etag: str
    last_modified: datetime | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    content_type: str = ""
    address_type: Literal["RELATIVE", "FULL"] = "RELATIVE"


def _check_timestamp(when: datetime | None, n: int) -> None:
    """Aware, and within protobuf Timestamp's range once in UTC (years 1 to 9999)."""
    if when is None:
        return
    if when.tzinfo is None:
        raise BadInputError("must include a timezone (RFC 3339)", field=f"line {n}: last_modified")
    try:
        when.astimezone(UTC)
    except OverflowError:
        raise BadInputError(
            "out of range (0001-01-01 to 9999-12-31 in UTC)", field=f"line {n}: last_modified"
        ) from None


def parse_record_lines(lines: Iterable[str]) -> list[ValueRecord]:
    """Validate JSON lines into records sorted by key; errors name the line and field."""
    records: dict[bytes, ValueRecord] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = RecordLine.model_validate_json(line)
        except ValidationError as e:
            first = e.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "<line>"
            raise BadInputError(first["msg"], field=f"line {n}: {where}") from None
        _check_timestamp(item.last_modified, n)
        key = item.key.encode()
        if key in records:
            raise BadInputError(f"duplicate key {item.key!r}", field=f"line {n}: key")
        try:
            identity, data = make_entry(
                item.address,
                item.size,
                item.etag,
                last_modified=item.last_modified,
                metadata=item.metadata,
                content_type=item.content_type,
                address_type=ADDRESS_FULL if item.address_type == "FULL" else ADDRESS_RELATIVE,
            )
        except BadInputError as e:
            raise BadInputError(str(e).split(": ", 1)[-1], field=f"line {n}: {e.field}") from None
        except (ValueError, OverflowError) as e:  # protobuf's own range checks
            raise BadInputError(str(e), field=f"line {n}") from None
        records[key] = ValueRecord(key, identity, data)
    return [records[k] for k in sorted(records)]


class DirectorySink:
    """Writes each table to ``<dir>/<id>`` atomically; an existing file is left alone."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def write(self, table_id: str, data: bytes) -> bool:
        target = self.root / table_id
        if target.exists():
            return False
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return True


async def write_ranges(records: list[ValueRecord], out_dir: Path) -> dict[str, Any]:
    writer = MetaRangeWriter(DirectorySink(out_dir))
    for record in records:
        await writer.add(record)
    metarange_id, ranges = await writer.close()
    return {
        "metarange_id": metarange_id,
        "range_ids": [r.id for r in ranges],
        "records": len(records),
        "out_dir": str(out_dir),
    }


@sst.command("write-range")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
def write_range_cmd(out_dir: Path) -> None:
    """Write JSON-lines records from stdin as range files plus a metarange."""
    if sys.stdin is None:
        raise BadInputError("stdin is closed", field="stdin")
    try:
        records = parse_record_lines(sys.stdin)
    except UnicodeDecodeError as e:
        raise BadInputError(f"not UTF-8 text ({e.reason})", field="stdin") from None
    except OSError as e:
        raise local_path_error(e, "<stdin>", "stdin") from e
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        report = asyncio.run(write_ranges(records, out_dir))
    except OSError as e:
        raise local_path_error(e, e.filename or out_dir, "OUT_DIR", doing="write") from e
    click.echo(json.dumps(report, sort_keys=True))

"""GC run files in lakeFS's shapes, with parsers that treat every file as hostile.

Contract:

- ``commits.csv`` (``…/gc/commits/run_id=<id>/commits.csv``): exactly what lakeFS's
  ``SaveGarbageCollectionCommits`` writes: the header ``commit_id,expired,metarange_id`` then one
  ``<commit id>,false,<metarange id>`` row per active commit, ``\\n`` line ends (Go's ``csv.Writer``;
  hex ids never need quoting). lakeFS no longer writes expired rows; the parser still accepts
  ``true`` rows. Written streamed and create-only.
- ``summary.json`` (``…/gc/unified/<run>/summary.json``): lakeFS's Spark fields in lakeFS's order
  and compact form (``run_id, success, first_slice, start_time, cutoff_time, num_deleted_objects``;
  times as Java ``ISO_INSTANT``), then ours (``active_commits``, ``ranges_read``, ``listed``,
  ``uncommitted``, ``expired_commits``) when known. It is the run's commit point: written last and
  create-only, so a second writer gets :class:`PreconditionFailedError` and never replaces it.
- ``run.json`` (:class:`RunManifest`, ``…/gc/unified/<run>/run.json``): ours, written create-only
  when a run is claimed: mode, ``now`` and cutoff, the rules snapshot, tags policy and pins.

Parsers bound the size they read, validate every field and raise :class:`CorruptDataError` naming
the file (``<store uri>/<key>``). Callers pass keys built by :mod:`lakefs_core.keys`; nothing here
formats a key.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.repos.graveler import is_commit_id
from lakefs_gc.rules import GCRules
from lakefs_gc.runs.record import Digester, digesting

COMMITS_HEADER = "commit_id,expired,metarange_id"
MAX_CSV_LINE = 256  # a row is 64 + 1 + 5 + 1 + 64 bytes
MAX_SUMMARY_BYTES = 64 << 10
MAX_MANIFEST_BYTES = 8 << 20
MAX_PINS = 100_000
CSV_CHUNK = 256 << 10  # lakeFS's writeCSVBufferSize
_METARANGE = re.compile(r"(?:[0-9a-f]{64})?")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}")
_INSTANT = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")
Count = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
_M = TypeVar("_M", bound=BaseModel)


def _file(store: BlockStore, key: str) -> str:
    return f"{store.uri.rstrip('/')}/{key}"


# -- times ----------------------------------------------------------------------------------------


def iso_instant(when: datetime) -> str:
    """Java's ``DateTimeFormatter.ISO_INSTANT``: UTC, ``Z``, fraction in 0, 3 or 6 digits as needed."""
    if when.tzinfo is None:
        raise BadInputError("must be timezone-aware", field="time")
    when = when.astimezone(UTC)
    base = when.strftime("%Y-%m-%dT%H:%M:%S")
    us = when.microsecond
    if us == 0:
        return base + "Z"
    if us % 1000 == 0:
        return f"{base}.{us // 1000:03d}Z"
    return f"{base}.{us:06d}Z"


def parse_instant(text: object) -> datetime:
    """An ``ISO_INSTANT`` string (up to 9 fraction digits; beyond microseconds truncated)."""
    m = _INSTANT.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{text!r} is not an ISO instant (YYYY-MM-DDTHH:MM:SS[.f]Z)")
    y, mo, d, h, mi, s, frac = m.groups()
    us = int((frac or "0").ljust(9, "0")[:6])
    return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), us, tzinfo=UTC)


class _Instant(BaseModel):
    """Base: the time fields are ISO instants on the wire and aware datetimes in memory."""

    @field_validator("*", mode="before")
    @classmethod
    def _times(cls, value: object, info: Any) -> object:
        if info.field_name in ("start_time", "cutoff_time", "now", "created") and not isinstance(
            value, datetime
        ):
            return parse_instant(value)
        return value

    @field_validator("*")
    @classmethod
    def _aware(cls, value: object) -> object:
        if isinstance(value, datetime) and value.tzinfo is None:
            raise ValueError("must be timezone-aware")
        return value


def _parse_json(model: type[_M], raw: bytes, *, limit: int, file: str) -> _M:
    if len(raw) > limit:
        raise CorruptDataError(f"larger than {limit} bytes", file=file)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CorruptDataError(f"not JSON: {e}", file=file) from e
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise CorruptDataError(f"invalid {model.__name__}: {where}: {first['msg']}", file=file) from None


async def _read_bounded(store: BlockStore, key: str, limit: int) -> bytes:
    """At most ``limit + 1`` bytes: enough to tell an oversized (hostile) file without reading it."""
    return await store.get(key, length=limit + 1)


# -- summary.json ---------------------------------------------------------------------------------


class Summary(_Instant):
    """``summary.json``: lakeFS's fields first (same names, types and order), ours after."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # a newer lakeFS may add fields

    run_id: StrictStr
    success: StrictBool
    first_slice: StrictStr
    start_time: datetime
    cutoff_time: datetime
    num_deleted_objects: Count
    active_commits: Count | None = None
    expired_commits: Count | None = None
    ranges_read: Count | None = None
    listed: Count | None = None
    uncommitted: Count | None = None

    def to_bytes(self) -> bytes:
        """Compact JSON like json4s ``compact(render(...))``: no spaces, no trailing newline."""
        body: dict[str, Any] = {
            "run_id": self.run_id,
            "success": self.success,
            "first_slice": self.first_slice,
            "start_time": iso_instant(self.start_time),
            "cutoff_time": iso_instant(self.cutoff_time),
            "num_deleted_objects": self.num_deleted_objects,
        }
        for name in ("active_commits", "expired_commits", "ranges_read", "listed", "uncommitted"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def parse_summary(raw: bytes, *, file: str) -> Summary:
    return _parse_json(Summary, raw, limit=MAX_SUMMARY_BYTES, file=file)


async def write_summary(store: BlockStore, key: str, summary: Summary) -> None:
    """Create-only: raises :class:`PreconditionFailedError` if the run already has a summary."""
    await store.put(key, summary.to_bytes(), if_none_match=True, content_type="application/json")


async def read_summary(store: BlockStore, key: str) -> Summary | None:
    """The summary, or ``None`` when the run has none (not finished, or abandoned)."""
    try:
        raw = await _read_bounded(store, key, MAX_SUMMARY_BYTES)
    except NotFoundError:
        return None
    return parse_summary(raw, file=_file(store, key))


# -- run.json -------------------------------------------------------------------------------------


class RunManifest(_Instant):
    """``run.json``: what a run decided when it was claimed, so a sweep or re-verification uses the
    same cutoff, rules and pins as the mark."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    run_id: StrictStr
    repository: StrictStr
    mode: Literal["full", "mark", "sweep", "dry-run"]
    mark_id: StrictStr | None = None  # sweep-only runs: the mark they sweep
    start_time: datetime
    now: datetime  # retention "now" (fixed once per run)
    cutoff_time: datetime  # objects modified at or after it are never candidates
    min_age_seconds: Count
    rules: GCRules | None
    tags_policy: Literal["pin", "ignore"]
    pins: tuple[StrictStr, ...] = Field(default=(), max_length=MAX_PINS)

    @field_validator("run_id", "mark_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and not _RUN_ID.fullmatch(value):
            raise ValueError(f"invalid run id {value!r}")
        return value

    @field_validator("pins")
    @classmethod
    def _pins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pin in value:
            if not is_commit_id(pin):
                raise ValueError(f"pin {pin!r} is not a commit id")
        return tuple(sorted(set(value)))

    def to_bytes(self) -> bytes:
        body = self.model_dump(mode="json")
        for name in ("start_time", "now", "cutoff_time"):
            body[name] = iso_instant(getattr(self, name))
        return json.dumps(body, indent=1, sort_keys=True).encode() + b"\n"


def parse_manifest(raw: bytes, *, file: str) -> RunManifest:
    return _parse_json(RunManifest, raw, limit=MAX_MANIFEST_BYTES, file=file)


async def write_manifest(store: BlockStore, key: str, manifest: RunManifest) -> None:
    """Create-only: claiming a run id twice raises :class:`PreconditionFailedError`."""
    await store.put(key, manifest.to_bytes(), if_none_match=True, content_type="application/json")


async def read_manifest(store: BlockStore, key: str) -> RunManifest:
    raw = await _read_bounded(store, key, MAX_MANIFEST_BYTES)
    return parse_manifest(raw, file=_file(store, key))


# -- commits.csv ----------------------------------------------------------------------------------


def _row(commit_id: str, expired: bool, metarange_id: str) -> str:
    if not is_commit_id(commit_id):
        raise BadInputError(f"{commit_id!r} is not a commit id", field="commit_id")
    if not isinstance(metarange_id, str) or not _METARANGE.fullmatch(metarange_id):
        raise BadInputError(f"{metarange_id!r} is not a metarange id", field="metarange_id")
    return f"{commit_id},{'true' if expired else 'false'},{metarange_id}\n"


async def commits_csv_chunks(active: AsyncIterable[tuple[str, str]]) -> AsyncIterator[bytes]:
    """lakeFS's ``commits.csv`` for ``(commit id, metarange id)`` of active commits, in chunks."""
    buf = [COMMITS_HEADER + "\n"]
    size = len(buf[0])
    async for commit_id, metarange_id in active:
        line = _row(commit_id, False, metarange_id)
        buf.append(line)
        size += len(line)
        if size >= CSV_CHUNK:
            yield "".join(buf).encode()
            buf, size = [], 0
    if buf:
        yield "".join(buf).encode()


async def write_commits_csv(
    store: BlockStore, key: str, active: AsyncIterable[tuple[str, str]], *, digester: Digester | None = None
) -> None:
    """Stream ``commits.csv`` to ``key``, create-only (a run id is written once); the bytes written
    are fed to ``digester`` when given."""
    chunks = commits_csv_chunks(active)
    if digester is not None:
        chunks = digesting(chunks, digester)
    await store.put(key, chunks, if_none_match=True, content_type="text/csv")


def parse_commits_line(line: bytes, *, file: str, lineno: int) -> tuple[str, bool, str]:
    """One data row as ``(commit id, expired, metarange id)``."""
    text = line.rstrip(b"\r").decode("ascii", "replace")
    parts = text.split(",")
    if len(parts) != 3:
        raise CorruptDataError(f"line {lineno}: expected 3 columns, got {len(parts)}", file=file)
    commit_id, expired, metarange_id = parts
    if not is_commit_id(commit_id):
        raise CorruptDataError(f"line {lineno}: {commit_id[:80]!r} is not a commit id", file=file)
    if expired not in ("true", "false"):
        raise CorruptDataError(f"line {lineno}: expired is {expired[:20]!r}, not true/false", file=file)
    if not _METARANGE.fullmatch(metarange_id):
        raise CorruptDataError(f"line {lineno}: {metarange_id[:80]!r} is not a metarange id", file=file)
    return commit_id, expired == "true", metarange_id


async def read_commits_csv(
    store: BlockStore, key: str, *, digester: Digester | None = None
) -> AsyncIterator[tuple[str, bool, str]]:
    """Stream the rows of a ``commits.csv`` (ours or lakeFS's); lines are bounded, never buffered
    whole. The bytes read are fed to ``digester`` when given."""
    file = _file(store, key)
    pending = b""
    lineno = 0
    async for chunk in store.stream(key):
        if digester is not None:
            digester.update(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_CSV_LINE:
            raise CorruptDataError(
                f"line {lineno + len(lines) + 1} longer than {MAX_CSV_LINE} bytes", file=file
            )
        for line in lines:
            lineno += 1
            if lineno == 1:
                if line.rstrip(b"\r") != COMMITS_HEADER.encode():
                    raise CorruptDataError(f"header is {line[:80]!r}, not {COMMITS_HEADER!r}", file=file)
                continue
            yield parse_commits_line(line, file=file, lineno=lineno)
    if pending:
        raise CorruptDataError(f"line {lineno + 1} is truncated (no final newline)", file=file)
    if lineno == 0:
        raise CorruptDataError("empty file: no header", file=file)

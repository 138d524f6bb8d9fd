"""A GC run's record in the KV: what a sweep may trust of the files a mark left in the namespace.

Files in a namespace can be written by anyone with access to the bucket; the KV cannot. So a mark,
once its ``summary.json`` is written, binds its outputs to a record in its repository's KV
partition, and the sweep (and a mirror applying a sweep) acts only on files whose SHA-256 matches.

Contract:

- :class:`RunRecord`: run id, repository, ``state`` (``complete``: a mark that may be swept;
  ``swept``; ``failed``, with a ``reason``), the mark's start and end, the rules it used, and
  :class:`FileDigest` (SHA-256 and size) of every file the sweep reads, keyed by namespace-relative
  path: ``run.json``, ``summary.json``, ``commits.csv``, every part of ``uncommitted/``,
  ``metaranges/``, ``ranges.txt/`` and ``deleted.text/``. The sweep adds its checkpoint's digest (the
  current and the previous one: a crash between the record and the file leaves one of the two) and,
  once swept, ``sweep.json`` and ``sweep/failed.text``.
- Storage (:class:`RunRecords`), immutable then pointer: a record's bytes are written create-only at
  ``gc-run-records/<sha-256 of the bytes>``, then ``gc-runs/<run id>`` is moved to that digest by
  compare-and-swap (from absent for a new run, from the digest read for a change). A writer that
  lost the swap gets :class:`~lakefs_core.errors.PreconditionFailedError`. Keys come from
  :mod:`lakefs_core.refs.kvkeys`.
- Bounded by design on every KV driver: a record is stored in chunks of :data:`CHUNK_BYTES`
  (256 KiB: DynamoDB takes items up to 400 KB), the first at ``gc-run-records/<sha-256>``, the
  next at ``.../<sha-256>/1``, ``/2``... (a chunk shorter than :data:`CHUNK_BYTES` is the last), all
  written create-only before the pointer moves, and read back whole and checked against the
  pointer's SHA-256. A record of many files (a mark on many partitions) therefore never meets the
  item limit; one over :data:`MAX_RECORD_BYTES` is refused with
  :class:`~lakefs_core.errors.BadInputError` before anything is written, never stored truncated.
- :meth:`RunRecords.run_ids`: the runs the KV has records of, newest first (the daemon's schedule
  and the runs API list them, so directories planted in the namespace cannot push them out).
- :class:`Digester` streams a digest (bounded memory); :func:`digesting` passes chunks through it
  while they are written, :func:`file_digest` reads a stored file once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncIterable, AsyncIterator
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError, PreconditionFailedError
from lakefs_core.kv.base import Expect
from lakefs_core.kv.ranges import prefix_end
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler
from lakefs_gc.rules import GCRules

RecordState = Literal["complete", "swept", "failed"]
Sha256 = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]
MAX_RECORD_BYTES = 64 << 20
CHUNK_BYTES = 256 << 10  # one KV value of a record: well under DynamoDB's 400 KB item limit


class FileDigest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: Sha256
    size: Annotated[StrictInt, Field(ge=0)]


class Digester:
    """SHA-256 and size of a byte stream, fed chunk by chunk."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self.size += len(chunk)

    def result(self) -> FileDigest:
        return FileDigest(sha256=self._hash.hexdigest(), size=self.size)


def digest_of(data: bytes) -> FileDigest:
    return FileDigest(sha256=hashlib.sha256(data).hexdigest(), size=len(data))


async def digesting(chunks: AsyncIterable[bytes], digester: Digester) -> AsyncIterator[bytes]:
    """``chunks`` unchanged, each fed to ``digester`` on its way (a write digests what it writes)."""
    async for chunk in chunks:
        digester.update(chunk)
        yield chunk


async def file_digest(store: BlockStore, key: str) -> FileDigest:
    """The digest of a stored file, streamed."""
    digester = Digester()
    async for chunk in store.stream(key):
        digester.update(chunk)
    return digester.result()


class RunRecord(BaseModel):
    """One GC run as the KV knows it (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    run_id: StrictStr
    repository: StrictStr
    state: RecordState
    reason: StrictStr | None = None
    start_time: datetime
    end_time: datetime
    rules: GCRules | None
    files: dict[StrictStr, FileDigest]
    checkpoint: FileDigest | None = None
    previous_checkpoint: FileDigest | None = None
    sweep_files: dict[StrictStr, FileDigest] = Field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()


class RunRecords:
    """The run records of one repository (its KV partition)."""

    def __init__(self, graveler: Graveler, repo_id: str) -> None:
        self._g, self._repo = graveler, repo_id

    async def _partition(self) -> bytes:
        return (await self._g.repository(self._repo)).partition

    async def read(self, run_id: str) -> tuple[str, RunRecord] | None:
        """``(pointer, record)`` of ``run_id``, or None when the KV has no record of it."""
        partition = await self._partition()
        try:
            pointer = (await self._g.kv.get(partition, kvkeys.gc_run_key(run_id))).decode()
            first = await self._g.kv.get(partition, kvkeys.gc_run_record_key(pointer))
        except NotFoundError:
            return None
        where = f"KV gc-runs/{run_id} of repository {self._repo!r}"
        raw = await self._rest(partition, pointer, first, where)
        if len(raw) > MAX_RECORD_BYTES or hashlib.sha256(raw).hexdigest() != pointer:
            raise CorruptDataError("the run record does not match its digest", file=where)
        try:
            record = RunRecord.model_validate_json(raw)
        except ValidationError as e:
            raise CorruptDataError(f"invalid run record: {e.errors()[0]['msg']}", file=where) from None
        if record.run_id != run_id or record.repository != self._repo:
            raise CorruptDataError(f"the record names {record.repository!r} run {record.run_id}", file=where)
        return pointer, record

    async def run_ids(self) -> list[str]:
        """The ids of every run the KV has a record of, newest first (the run ids sort by time):
        the trusted list of runs, which files planted in the namespace cannot lengthen or hide."""
        partition = await self._partition()
        start = kvkeys.GC_RUNS_PREFIX
        found = [
            item.key[len(start) :].decode()
            async for item in self._g.kv.scan(partition, start, end=prefix_end(start))
        ]
        return sorted(found, reverse=True)

    async def _rest(self, partition: bytes, pointer: str, first: bytes, where: str) -> bytes:
        """The whole record from its first chunk: the next chunks while the last one read is full
        (bounded by :data:`MAX_RECORD_BYTES`; a missing chunk leaves bytes that fail the digest)."""
        chunks, size, last = [first], len(first), first
        while len(last) == CHUNK_BYTES and size <= MAX_RECORD_BYTES:
            try:
                last = await self._g.kv.get(partition, kvkeys.gc_run_record_key(pointer, len(chunks)))
            except NotFoundError:
                break  # an exact multiple of the chunk size, or a chunk lost: the digest decides
            chunks.append(last)
            size += len(last)
        if size > MAX_RECORD_BYTES:
            raise CorruptDataError(f"the run record is larger than {MAX_RECORD_BYTES} bytes", file=where)
        return b"".join(chunks)

    async def write(self, record: RunRecord, *, replacing: str | None) -> str:
        """Store ``record`` (immutable, in chunks), then point ``gc-runs/<run>`` at it: from absent
        when ``replacing`` is None, else from ``replacing``. Returns the new pointer. A record over
        :data:`MAX_RECORD_BYTES` is :class:`BadInputError`, raised before any write."""
        raw = record.to_bytes()
        if len(raw) > MAX_RECORD_BYTES:
            raise BadInputError(
                f"the run record of {record.repository!r} run {record.run_id} would take {len(raw)} "
                f"bytes, more than {MAX_RECORD_BYTES}: fewer partitions make fewer part files",
                field="files",
            )
        partition = await self._partition()
        digest = hashlib.sha256(raw).hexdigest()
        # The later chunks first, the first one last: a first chunk present means the whole record is.
        for n in range(len(raw) // CHUNK_BYTES, -1, -1):
            chunk = raw[n * CHUNK_BYTES : (n + 1) * CHUNK_BYTES]
            if n and not chunk:
                continue  # an exact multiple of the chunk size: no empty last chunk
            with contextlib.suppress(PreconditionFailedError):  # the same bytes are there already
                await self._g.kv.set_if(partition, kvkeys.gc_run_record_key(digest, n), chunk, Expect.ABSENT)
        expected = Expect.ABSENT if replacing is None else Expect.equals(replacing.encode())
        await self._g.kv.set_if(partition, kvkeys.gc_run_key(record.run_id), digest.encode(), expected)
        return digest

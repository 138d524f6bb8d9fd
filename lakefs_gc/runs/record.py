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
- Bounded in number too: a record no pointer names any more is *retired*: its digest gets a
  tombstone ``gc-run-garbage/<sha-256>`` = ``{run_id, at}`` (upserted: a second retirement restarts
  its grace). :meth:`RunRecords.write` retires the record it replaced once its swap SUCCEEDED, and its
  own new record when the swap definitely failed (:class:`PreconditionFailedError`; a writer that
  wrote the same bytes and won keeps them: see below); an unknown outcome (a
  :class:`~lakefs_core.errors.TransientError`) retires nothing. :meth:`RunRecords.retire_run`
  retires a run's current record, then deletes its pointer (:mod:`lakefs_gc.runs.retention` decides
  which runs). :meth:`RunRecords.collect` (run after a successful write when a tombstone the object knows of,
  or found at its last collection, is due; always at its first write) deletes the chunks of
  every record retired more than :data:`RECORD_GRACE` ago (the later chunks first, the first one
  last, then the tombstone), each only after re-reading its run's pointer right before: a record the
  pointer names again (a writer that wrote the same bytes) keeps its chunks and loses its tombstone.
  The grace is for readers: one that read the old pointer may still be reading its chunks; and
  :meth:`RunRecords.read` re-reads the pointer when a chunk is missing or the bytes fail the digest,
  and tries again when it moved (a reader stalled past the grace gets the newer record, never a
  false "no record"). Footprint: per run its current record plus those retired in the last
  :data:`RECORD_GRACE` (a sweep moves its record at most every ``checkpoint_every_seconds``, 10 s:
  about 31 records while it runs, 1 after), plus chunks a writer killed between its chunks and its
  swap left (never tombstoned: a leak per crash).
- :class:`Digester` streams a digest (bounded memory); :func:`digesting` passes chunks through it
  while they are written, :func:`file_digest` reads a stored file once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.kv.base import Expect
from lakefs_core.kv.ranges import prefix_end
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler
from lakefs_gc.rules import GCRules

RecordState = Literal["complete", "swept", "failed"]
Sha256 = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]
MAX_RECORD_BYTES = 64 << 20
CHUNK_BYTES = 256 << 10  # one KV value of a record: well under DynamoDB's 400 KB item limit
# A reader reads a pointer then its chunks within milliseconds (seconds for a 64 MiB record): five
# minutes is far beyond that, and keeps about 31 records of a sweep checkpointing every 10 s.
RECORD_GRACE = timedelta(minutes=5)
READ_ATTEMPTS = 3  # pointer re-reads of one read whose chunks vanished under it

log = logging.getLogger(__name__)


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


def _chunks(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """``(n, chunk n)`` of a record, the last first (no empty last chunk for an exact multiple)."""
    for n in range(len(raw) // CHUNK_BYTES, -1, -1):
        chunk = raw[n * CHUNK_BYTES : (n + 1) * CHUNK_BYTES]
        if chunk or not n:
            yield n, chunk


class Tombstone(BaseModel):
    """The value of ``gc-run-garbage/<sha-256>``: whose record, retired when (the grace starts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: StrictStr
    at: datetime


class RunRecords:
    """The run records of one repository (its KV partition). ``clock`` times retirements and the
    grace (default: the Graveler's clock); ``grace``: :data:`RECORD_GRACE`."""

    def __init__(
        self,
        graveler: Graveler,
        repo_id: str,
        *,
        clock: Callable[[], datetime] | None = None,
        grace: timedelta = RECORD_GRACE,
    ) -> None:
        self._g, self._repo = graveler, repo_id
        self._clock = clock or graveler.clock
        self._grace = grace
        # When the next tombstone this object knows of is due (None: unknown, scan): a sweep
        # writing every 10 s scans the tombstones only when one can be collected.
        self._due: datetime | None = None

    async def _partition(self) -> bytes:
        return (await self._g.repository(self._repo)).partition

    async def pointer(self, run_id: str) -> str | None:
        """The digest ``gc-runs/<run id>`` names now (None: no record)."""
        return await self._pointer(await self._partition(), run_id)

    async def _pointer(self, partition: bytes, run_id: str) -> str | None:
        try:
            return (await self._g.kv.get(partition, kvkeys.gc_run_key(run_id))).decode()
        except NotFoundError:
            return None

    async def read(self, run_id: str) -> tuple[str, RunRecord] | None:
        """``(pointer, record)`` of ``run_id``, or None when the KV has no record of it. Chunks that
        vanish under the read (the pointer moved and the old record was collected) make it re-read
        the pointer and read the new record."""
        partition = await self._partition()
        where = f"KV gc-runs/{run_id} of repository {self._repo!r}"
        pointer: str | None = None
        raw: bytes | None = None
        for _ in range(READ_ATTEMPTS):
            moved = await self._pointer(partition, run_id)
            if moved is None:
                return None
            if moved == pointer:
                break  # the same pointer again: what was read is what is stored
            pointer = moved
            raw = await self._whole(partition, pointer, where)
            if raw is not None and hashlib.sha256(raw).hexdigest() == pointer:
                return pointer, self._parse(raw, run_id, where)
        if raw is None or pointer is None:
            return None  # a pointer naming no record: as good as none
        raise CorruptDataError("the run record does not match its digest", file=where)

    def _parse(self, raw: bytes, run_id: str, where: str) -> RunRecord:
        try:
            record = RunRecord.model_validate_json(raw)
        except ValidationError as e:
            raise CorruptDataError(f"invalid run record: {e.errors()[0]['msg']}", file=where) from None
        if record.run_id != run_id or record.repository != self._repo:
            raise CorruptDataError(f"the record names {record.repository!r} run {record.run_id}", file=where)
        return record

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

    async def _whole(self, partition: bytes, pointer: str, where: str) -> bytes | None:
        """The whole record ``pointer`` names (None: its first chunk is absent): the next chunks
        while the last one read is full (bounded by :data:`MAX_RECORD_BYTES`; a missing chunk
        leaves bytes that fail the digest)."""
        try:
            first = await self._g.kv.get(partition, kvkeys.gc_run_record_key(pointer))
        except NotFoundError:
            return None
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
        :data:`MAX_RECORD_BYTES` is :class:`BadInputError`, raised before any write. The record
        replaced is retired, and due retired records collected, after the swap (see the module doc)."""
        raw = record.to_bytes()
        if len(raw) > MAX_RECORD_BYTES:
            raise BadInputError(
                f"the run record of {record.repository!r} run {record.run_id} would take {len(raw)} "
                f"bytes, more than {MAX_RECORD_BYTES}: fewer partitions make fewer part files",
                field="files",
            )
        partition = await self._partition()
        digest = hashlib.sha256(raw).hexdigest()
        reused = await self._store_chunks(partition, digest, raw)
        expected = Expect.ABSENT if replacing is None else Expect.equals(replacing.encode())
        try:
            await self._g.kv.set_if(partition, kvkeys.gc_run_key(record.run_id), digest.encode(), expected)
        except PreconditionFailedError:
            # Definitely not ours: our chunks are garbage, unless a writer of the same bytes won
            # (the collection re-reads the pointer before deleting anything).
            await self._quietly(self._retire(partition, digest, record.run_id))
            raise
        if reused:
            await self._quietly(self._revive(partition, digest, raw))
        if replacing is not None and replacing != digest:
            await self._quietly(self._retire(partition, replacing, record.run_id))
        if self._due is None or self._due <= self._clock():
            await self._quietly(self.collect())
        return digest

    async def _store_chunks(self, partition: bytes, digest: str, raw: bytes) -> bool:
        """Write ``raw``'s chunks create-only, the later ones first and the first one last (a first
        chunk present means the whole record is); True when the first one was there already."""
        reused = False
        for n, chunk in _chunks(raw):
            try:
                await self._g.kv.set_if(partition, kvkeys.gc_run_record_key(digest, n), chunk, Expect.ABSENT)
            except PreconditionFailedError:  # the same bytes are there already
                reused = n == 0
        return reused

    async def _revive(self, partition: bytes, digest: str, raw: bytes) -> None:
        """Our pointer names bytes that were stored already, perhaps retired: drop their tombstone,
        and store the chunks again should a collection have deleted them before our swap."""
        await self._g.kv.delete(partition, kvkeys.gc_run_garbage_key(digest))
        try:
            await self._g.kv.get(partition, kvkeys.gc_run_record_key(digest))
        except NotFoundError:
            log.warning("run record %s was collected under its writer: stored again", digest)
            for n, chunk in _chunks(raw):
                await self._g.kv.set(partition, kvkeys.gc_run_record_key(digest, n), chunk)

    async def _retire(self, partition: bytes, digest: str, run_id: str) -> None:
        stone = Tombstone(run_id=run_id, at=self._clock())
        await self._g.kv.set(partition, kvkeys.gc_run_garbage_key(digest), stone.model_dump_json().encode())
        self._due = min(self._due or stone.at + self._grace, stone.at + self._grace)

    @staticmethod
    async def _quietly(step: Awaitable[object]) -> None:
        """Housekeeping after the swap decided: its failure leaves garbage for later, never fails
        the write that succeeded (or hides why it failed)."""
        try:
            await step
        except LakeFSError as e:
            log.warning("run record housekeeping failed (collected later): %s: %s", type(e).__name__, e)

    async def retire_run(self, run_id: str, pointer: str) -> bool:
        """Retire run ``run_id``'s record ``pointer``, then delete its pointer, when the pointer
        still names it right before (False: it moved or is gone, nothing deleted). The caller
        holds the repository's GC lease (no sweep of it is writing)."""
        partition = await self._partition()
        if await self.pointer(run_id) != pointer:
            return False
        await self._retire(partition, pointer, run_id)
        if await self.pointer(run_id) != pointer:
            return False  # moved meanwhile: its writer retires what it replaced
        await self._g.kv.delete(partition, kvkeys.gc_run_key(run_id))
        return True

    async def tombstones(self) -> dict[str, Tombstone | None]:
        """Every retired record's digest, with its tombstone (None: unreadable, never collected)."""
        partition = await self._partition()
        start = kvkeys.GC_RUN_GARBAGE_PREFIX
        found: dict[str, Tombstone | None] = {}
        async for item in self._g.kv.scan(partition, start, end=prefix_end(start)):
            digest = item.key[len(start) :].decode(errors="replace")
            try:
                found[digest] = Tombstone.model_validate_json(item.value)
            except ValidationError:
                log.warning("unreadable run record tombstone %s: left alone", digest)
                found[digest] = None
        return found

    async def collect(self) -> int:
        """Delete every record retired more than the grace ago that its run's pointer, re-read right
        before, does not name; returns how many were deleted (see the module doc)."""
        partition = await self._partition()
        cutoff = self._clock() - self._grace
        deleted = 0
        waiting = [self._clock() + self._grace]  # those retired from now on are due no earlier
        for digest, stone in (await self.tombstones()).items():
            if stone is None or stone.at > cutoff:
                waiting.extend(() if stone is None else [stone.at + self._grace])
                continue
            if await self._pointer(partition, stone.run_id) != digest:
                await self._delete_chunks(partition, digest)
                deleted += 1
            await self._g.kv.delete(partition, kvkeys.gc_run_garbage_key(digest))
        self._due = min(waiting)
        return deleted

    async def _delete_chunks(self, partition: bytes, digest: str) -> None:
        """The later chunks first, the first one last: a crash midway leaves the first chunk and the
        tombstone, and the next collection finishes."""
        first = kvkeys.gc_run_record_key(digest)
        start = first + b"/"
        later = [item.key async for item in self._g.kv.scan(partition, start, end=prefix_end(start))]
        for key in reversed(later):
            await self._g.kv.delete(partition, key)
        await self._g.kv.delete(partition, first)

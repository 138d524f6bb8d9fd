"""The GC sweep: delete a successful mark's addresses, re-verifying before and during (gc.md §3b).

:func:`run_sweep` sweeps mark ``mark_id`` of a repository:

1. Refuse what must not be swept: a read-only repository; a mark without ``summary.json`` (running,
   crashed: abandoned) or with ``success=false``; a ``dry-run`` mark; a manifest of another
   repository. A mark already swept (its KV record says so) answers its report and deletes nothing.
   Then trust nothing the KV does not vouch for (:mod:`.verify`): the run record must be
   ``complete``; ``run.json``, ``summary.json`` and the checkpoint are read once and their digests
   checked on the bytes parsed; the parts of ``deleted.text/``, ``uncommitted/`` and
   ``metaranges/`` must be exactly the recorded ones with the recorded digests, ``ranges.txt/``
   and ``commits.csv`` are checked as the re-verification loads them, all before the first delete.
   A refusal raises :class:`~lakefs_core.errors.TamperedError` and marks the record ``failed``.
2. Re-verify (:class:`~lakefs_gc.sweep.reverify.Reverifier`) before the first delete, then again every
   ``reverify_every_seconds`` (default 10 min) or ``reverify_every_batches`` batches.
3. Stream ``deleted.text/part-*`` in batches of at most 1,000 addresses, resuming after the
   checkpoint, digesting each part again as it is read (a part swapped since its check stops the
   sweep at its end); drop the live-again addresses (counted as ``rescued``), check each address is
   a data object of the namespace (never ``_lakefs/``), and delete the rest through the deleter (rate limited,
   an outcome per key). Failed keys are appended to ``sweep/failed.text``: they are still garbage, so
   the next mark lists them again and the next sweep retries them after its own verification (a key
   is never deleted on an old verdict).
4. ``sweep/checkpoint.json`` is overwritten every ``checkpoint_every_batches`` batches or
   ``checkpoint_every_seconds``, its digest recorded first (the record keeps the previous one too:
   a crash between the two leaves one of them); a killed sweep resumes there (deletes are
   idempotent, so re-deleting a batch done after the last checkpoint is harmless). ``sweep.json``
   is written create-only, then the record becomes ``swept`` with the digests of ``sweep.json`` and
   ``sweep/failed.text``. A ``sweep.json`` found while the record is still ``complete`` (a crash
   between the two, or a planted file) is never trusted: the sweep runs again and replaces it.

Dry run: the same verification and counting, nothing deleted, nothing written to the namespace, and
the record never moved to ``swept`` nor given a checkpoint; a refusal marks it ``failed`` as a real
sweep's does (the files were found tampered with, whoever looked).
``sweep.json``'s ``start_time`` and ``end_time`` come from ``SweepOptions.clock`` (:mod:`lakefs_gc.clock`).
Fault points (:mod:`.faults`): ``sweep:verified``, ``sweep:batch:<n>``, ``sweep:before-report``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    ReadOnlyError,
    TamperedError,
)
from lakefs_core.repos.graveler import DATA_DIR, TABLES_DIR, Graveler, StorageNamespace
from lakefs_core.repos.namespace_claims import check_for_gc
from lakefs_core.service.deleter import FailedKeysLog, KeyDeleter
from lakefs_gc.clock import RunClock
from lakefs_gc.faults import fault_point
from lakefs_gc.pins import PinSource
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import file_name, ns_relative, read_lines
from lakefs_gc.runs.record import Digester, FileDigest, RunRecord, RunRecords, digest_of
from lakefs_gc.runs.reports import (
    MAX_MANIFEST_BYTES,
    MAX_SUMMARY_BYTES,
    RunManifest,
    parse_manifest,
    parse_summary,
)
from lakefs_gc.sweep.reverify import Reverifier
from lakefs_gc.sweep.verify import (
    check_digest,
    expected,
    mark_failed,
    parsed_as_recorded,
    read_as_recorded,
    read_verified,
    trusted_record,
    verify_parts,
)

log = logging.getLogger("lakefs_gc.sweep.sweep")

MAX_BATCH = 1000
MAX_STATE_BYTES = 64 << 10
Count = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]


@dataclass(frozen=True)
class SweepOptions:
    dry_run: bool = False
    batch_size: int = MAX_BATCH
    reverify_every_seconds: float = 600.0
    reverify_every_batches: int | None = None
    checkpoint_every_batches: int = 10
    checkpoint_every_seconds: float = 10.0
    workdir: Path | None = None
    clock: RunClock | None = None  # the run's clock (default: the Graveler's, no offset)

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= MAX_BATCH:
            raise BadInputError(f"must be between 1 and {MAX_BATCH}", field="batch_size")
        if self.reverify_every_batches is not None and self.reverify_every_batches < 1:
            raise BadInputError("must be >= 1", field="reverify_every_batches")
        if self.checkpoint_every_batches < 1:
            raise BadInputError("must be >= 1", field="checkpoint_every_batches")


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    mark_id: StrictStr
    part: Count = 0  # index into the sorted deleted.text parts
    line: Count = 0  # lines of that part already done
    candidates: Count = 0
    deleted: Count = 0
    failed: Count = 0
    rescued: Count = 0
    throttled: Count = 0
    reverifications: Count = 0


class Checkpoint(_State):
    """``sweep/checkpoint.json``: where a killed sweep resumes."""


class SweepReport(_State):
    """``sweep.json``: the sweep's outcome (also the result of a dry run, never written then)."""

    repository: StrictStr
    dry_run: StrictBool = False
    start_time: StrictStr
    end_time: StrictStr
    ranges_read: Count = 0


_S = TypeVar("_S", bound=_State)


def _dump(model: BaseModel) -> bytes:
    return json.dumps(model.model_dump(mode="json"), indent=1, sort_keys=True).encode() + b"\n"


async def _read_state(store: BlockStore, key: str, model: type[_S]) -> _S | None:
    try:
        raw = await store.get(key, length=MAX_STATE_BYTES + 1)
    except NotFoundError:
        return None
    return _parse_state(raw, model, file_name(store, key))


def _parse_state(raw: bytes, model: type[_S], file: str) -> _S:
    if len(raw) > MAX_STATE_BYTES:
        raise CorruptDataError(f"larger than {MAX_STATE_BYTES} bytes", file=file)
    try:
        return model.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as e:
        raise CorruptDataError(f"invalid {model.__name__}: {e}", file=file) from e


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_address(address: str, ns: StorageNamespace) -> str:
    """The store key of a marked address, refusing anything but a data object of the namespace: an
    address under ``data/`` (any depth) or a legacy root object, never ``_lakefs/`` (defence in
    depth: the mark never lists them, a tampered report must not make us delete them)."""
    parts = address.split("/")
    ok = (parts[0] == DATA_DIR and len(parts) >= 3) or (len(parts) == 1 and parts[0] != TABLES_DIR)
    if not ok or any(p in ("", ".", "..") for p in parts):
        raise TamperedError(
            f"marked address {address[:200]!r} is not a data object of {ns.uri}", reason="outside-data"
        )
    return ns.key(address)


@dataclass
class Mark:
    """A mark the KV vouches for: its files' layout, its parsed manifest, its record and pointer."""

    layout: RunLayout
    manifest: RunManifest
    pointer: str
    record: RunRecord


async def open_mark(graveler: Graveler, repo_id: str, mark_id: str) -> Mark:
    """A sweepable mark (see step 1 of the module docstring)."""
    await check_for_gc(graveler, repo_id)  # its namespace still leads where recorded, overlapping none
    repo = await graveler.repository(repo_id)
    if repo.read_only:
        raise ReadOnlyError(f"repository {repo_id!r} is read-only (a mirror): GC never sweeps it")
    ns = StorageNamespace(repo.storage_namespace)
    store = await graveler.namespace_store(ns)
    layout = RunLayout(ns, mark_id)
    try:
        raw_summary = await store.get(layout.summary, length=MAX_SUMMARY_BYTES + 1)
    except NotFoundError:
        raise NotFoundError(
            f"mark {mark_id} of {repo_id!r} has no summary (not finished, or abandoned)"
        ) from None
    with contextlib.suppress(CorruptDataError):  # refusing on an unverified file deletes nothing
        if not parse_summary(raw_summary, file=file_name(store, layout.summary)).success:
            raise ConflictError(f"mark {mark_id} of {repo_id!r} failed (summary success=false): not swept")
    pointer, record = await trusted_record(graveler, repo_id, mark_id)
    want = expected(record, ns, store, layout.summary)
    check_digest(digest_of(raw_summary), want, file_name(store, layout.summary))
    parse_summary(raw_summary, file=file_name(store, layout.summary))  # as the mark wrote it
    raw = await read_verified(store, ns, record, layout.manifest, limit=MAX_MANIFEST_BYTES)
    manifest = parse_manifest(raw, file=file_name(store, layout.manifest))
    if manifest.repository != repo_id or manifest.run_id != mark_id:
        raise CorruptDataError(f"run.json names {manifest.repository!r} run {manifest.run_id}",
                               file=file_name(store, layout.manifest))  # fmt: skip
    return Mark(layout, manifest, pointer, record)


async def load_mark(graveler: Graveler, repo_id: str, mark_id: str) -> tuple[RunLayout, RunManifest]:
    """:func:`open_mark`'s layout and manifest."""
    mark = await open_mark(graveler, repo_id, mark_id)
    return mark.layout, mark.manifest


class _Record:
    """The run record as the sweep moves it: checkpoints, then ``swept``."""

    def __init__(self, graveler: Graveler, repo_id: str, mark: Mark) -> None:
        self._records = RunRecords(graveler, repo_id)
        self.pointer, self.record = mark.pointer, mark.record

    async def _move(self, record: RunRecord) -> None:
        self.pointer = await self._records.write(record, replacing=self.pointer)
        self.record = record

    async def checkpoint(self, store: BlockStore, key: str, data: bytes) -> None:
        """Record the checkpoint's digest (keeping the current one as previous), then write it."""
        update = {"checkpoint": digest_of(data), "previous_checkpoint": self.record.checkpoint}
        await self._move(self.record.model_copy(update=update))
        await store.put(key, data, content_type="application/json")

    async def swept(self, files: dict[str, FileDigest]) -> None:
        await self._move(self.record.model_copy(update={"state": "swept", "sweep_files": files}))


async def _read_checkpoint(store: BlockStore, layout: RunLayout, record: RunRecord) -> Checkpoint | None:
    """The checkpoint, when it is one the record names (the current or the previous one)."""
    file = file_name(store, layout.checkpoint)
    try:
        raw = await store.get(layout.checkpoint, length=MAX_STATE_BYTES + 1)
    except NotFoundError:
        if record.previous_checkpoint is not None:  # a checkpoint was written for sure
            raise TamperedError(
                "recorded in the run record but absent", reason="missing-file", file=file
            ) from None
        return None
    if record.checkpoint is None:
        raise TamperedError("a checkpoint the run record does not list", reason="extra-file", file=file)
    actual = digest_of(raw)
    if actual != record.previous_checkpoint:
        check_digest(actual, record.checkpoint, file)
    return _parse_state(raw, Checkpoint, file)


class _Sweeper:
    """One sweep's loop state."""

    def __init__(
        self,
        store: BlockStore,
        layout: RunLayout,
        reverifier: Reverifier,
        *,
        deleter: KeyDeleter | None,
        options: SweepOptions,
        state: Checkpoint,
        failed_log: FailedKeysLog | None,
        record: _Record,
    ) -> None:
        self.store, self.layout, self.rv, self.deleter = store, layout, reverifier, deleter
        self.record = record
        self.options = options
        self.state = state.model_dump()
        self.failed_log = failed_log
        self.batches = 0
        self._since_verify = 0
        self._verified_at = time.monotonic()
        self._since_checkpoint = 0
        self._checkpointed_at = time.monotonic()

    async def batches_from(self, parts: list[str]) -> AsyncIterator[tuple[int, int, list[str]]]:
        """``(part index, lines done after this batch, batch)`` from the checkpoint on. A batch
        carries over into the next part (full batches whatever the parts' sizes: one request per
        ``batch_size`` keys); its position is its last line's, so every earlier part is done."""
        size = self.options.batch_size
        batch: list[str] = []
        index = done = 0
        for index in range(self.state["part"], len(parts)):
            skip = self.state["line"] if index == self.state["part"] else 0
            done = 0
            digester = Digester()  # the part again, as read: swapped since its check, it stops here
            want = expected(self.record.record, self.layout.ns, self.store, parts[index])
            async with parsed_as_recorded(self.store, parts[index], want):
                async for lines in read_lines(self.store, parts[index], digester=digester):
                    for line in lines:
                        done += 1
                        if done <= skip:
                            continue
                        batch.append(line)
                        if len(batch) >= size:
                            yield index, done, batch
                            batch = []
            check_digest(digester.result(), want, file_name(self.store, parts[index]))
        if batch:
            yield index, done, batch

    async def maybe_verify(self) -> None:
        every_n = self.options.reverify_every_batches
        due = time.monotonic() - self._verified_at >= self.options.reverify_every_seconds
        if due or (every_n is not None and self._since_verify >= every_n):
            await self.rv.verify()
            self.state["reverifications"] += 1
            self._verified_at, self._since_verify = time.monotonic(), 0

    async def one_batch(self, batch: list[str]) -> None:
        ns = self.layout.ns
        keys = [check_address(a, ns) for a in batch]  # every address checked before any delete
        live = await self.rv.live_among(batch) if batch else set()
        doomed = [k for a, k in zip(batch, keys, strict=True) if a not in live]
        self.state["candidates"] += len(batch)
        self.state["rescued"] += len(batch) - len(doomed)
        if self.deleter is None or not doomed:
            return
        outcome = await self.deleter.delete_keys(doomed)
        self.state["deleted"] += len(outcome.deleted)
        self.state["failed"] += len(outcome.failed)
        self.state["throttled"] += outcome.throttled
        if outcome.failed and self.failed_log is not None:
            await self.failed_log(outcome.failed)

    async def maybe_checkpoint(self, force: bool = False) -> None:
        self._since_checkpoint += 1
        due = time.monotonic() - self._checkpointed_at >= self.options.checkpoint_every_seconds
        if self.deleter is None or not (
            force or due or self._since_checkpoint >= self.options.checkpoint_every_batches
        ):
            return
        if self.failed_log is not None:
            await self.failed_log.flush()  # the checkpoint never counts failures the log lacks
        await self.record.checkpoint(self.store, self.layout.checkpoint, _dump(Checkpoint(**self.state)))
        self._since_checkpoint, self._checkpointed_at = 0, time.monotonic()

    async def run(self, parts: list[str]) -> None:
        async for index, done, batch in self.batches_from(parts):
            await self.maybe_verify()
            await self.one_batch(batch)
            self.state["part"], self.state["line"] = index, done
            self.batches += 1
            self._since_verify += 1
            fault_point("sweep:batch", self.batches)
            await self.maybe_checkpoint()
        self.state["part"], self.state["line"] = len(parts), 0


async def run_sweep(
    graveler: Graveler,
    repo_id: str,
    mark_id: str,
    *,
    deleter: KeyDeleter | None,
    options: SweepOptions | None = None,
    pins: PinSource | None = None,
) -> SweepReport:
    """Sweep mark ``mark_id`` (see the module docstring). ``deleter`` may be ``None`` only for a
    dry run. Returns the report (already written, unless dry run). A refusal
    (:class:`~lakefs_core.errors.TamperedError`) marks the run's record failed, in a dry run too."""
    options = options or SweepOptions()
    if deleter is None and not options.dry_run:
        raise BadInputError("a sweep that deletes needs a deleter", field="deleter")
    found = await RunRecords(graveler, repo_id).read(mark_id)
    if found is not None and found[1].state == "swept":
        return await _already_swept(graveler, repo_id, found[1])  # a re-sweep deletes nothing (I3)
    try:
        return await _sweep(graveler, repo_id, mark_id, deleter=deleter, options=options, pins=pins)
    except TamperedError as e:
        # A dry run records the refusal too: what it found is a fact about the run's files, not an
        # action, and a record left ``complete`` would go on telling the API, the scheduler and the
        # mirrors that a run known to be tampered with may be swept.
        await mark_failed(graveler, repo_id, await RunRecords(graveler, repo_id).read(mark_id), e)
        raise


async def _already_swept(graveler: Graveler, repo_id: str, record: RunRecord) -> SweepReport:
    """The swept run's report, as the record lists it (the answer, never a file anyone wrote)."""
    repo = await graveler.repository(repo_id)
    mark_id = record.run_id
    layout = RunLayout(StorageNamespace(repo.storage_namespace), mark_id)
    store = await graveler.namespace_store(layout.ns)
    want = record.sweep_files.get(ns_relative(layout.ns, layout.sweep_report))
    raw = await read_as_recorded(store, layout.sweep_report, want, limit=MAX_STATE_BYTES)
    done = _parse_state(raw, SweepReport, file_name(store, layout.sweep_report))
    if done.mark_id != mark_id:
        raise CorruptDataError("the run record says swept, the sweep report is absent or of another mark",
                               file=file_name(store, layout.sweep_report))  # fmt: skip
    return done


async def _sweep(
    graveler: Graveler,
    repo_id: str,
    mark_id: str,
    *,
    deleter: KeyDeleter | None,
    options: SweepOptions,
    pins: PinSource | None,
) -> SweepReport:
    mark = await open_mark(graveler, repo_id, mark_id)
    layout, manifest, record = mark.layout, mark.manifest, _Record(graveler, repo_id, mark)
    store = await graveler.namespace_store(layout.ns)
    if manifest.mode == "dry-run" and not options.dry_run:
        raise ConflictError(f"mark {mark_id} was a dry run: it is never swept")
    # A sweep.json while the record is still complete: a sweep killed between its report and its
    # record, or a planted file. Never trusted: the sweep runs (idempotent) and replaces it.
    replace = await store.exists(layout.sweep_report)
    clock = options.clock or RunClock(graveler.clock)
    start = clock.now()
    state = Checkpoint(mark_id=mark_id)
    if not options.dry_run:
        state = await _read_checkpoint(store, layout, mark.record) or state
    if state.mark_id != mark_id:
        raise CorruptDataError(
            f"checkpoint names mark {state.mark_id}", file=file_name(store, layout.checkpoint)
        )
    parts = await verify_parts(store, layout.ns, mark.record, layout.deleted_text, digests=True)
    for directory in (layout.uncommitted, layout.metaranges):
        await verify_parts(store, layout.ns, mark.record, directory, digests=True)
    async with Reverifier(
        graveler, repo_id, layout, manifest, pins=pins, workdir=options.workdir, record=mark.record
    ) as rv:
        await rv.verify()  # checks ranges.txt and commits.csv as it loads them
        fault_point("sweep:verified")
        failed_log = None if options.dry_run else await FailedKeysLog.open(store, layout.failed)
        sweeper = _Sweeper(store, layout, rv, deleter=None if options.dry_run else deleter,
                           options=options, state=state, failed_log=failed_log, record=record)  # fmt: skip
        sweeper.state["reverifications"] += 1
        await sweeper.run(parts)
        await sweeper.maybe_checkpoint(force=True)
        ranges_read = rv.ranges_read
    report = SweepReport(
        **sweeper.state,
        repository=repo_id,
        dry_run=options.dry_run,
        start_time=_iso(start),
        end_time=_iso(clock.now()),
        ranges_read=ranges_read,
    )
    fault_point("sweep:before-report")
    if not options.dry_run:
        data = _dump(report)
        await store.put(layout.sweep_report, data, if_none_match=not replace, content_type="application/json")
        failed = digest_of(failed_log.stored() if failed_log is not None else b"")
        ns = layout.ns
        await record.swept({ns_relative(ns, layout.sweep_report): digest_of(data),
                            ns_relative(ns, layout.failed): failed})  # fmt: skip
    log.info(
        "swept %s mark %s: %d deleted, %d failed, %d rescued of %d%s",
        repo_id, mark_id, report.deleted, report.failed, report.rescued, report.candidates,
        " (dry run)" if options.dry_run else "",
    )  # fmt: skip
    return report

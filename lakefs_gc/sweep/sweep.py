"""The GC sweep: delete a successful mark's addresses, re-verifying before and during (gc.md §3b).

:func:`run_sweep` sweeps mark ``mark_id`` of a repository:

1. Refuse what must not be swept: a read-only repository; a mark without ``summary.json`` (running,
   crashed: abandoned) or with ``success=false``; a ``dry-run`` mark; a manifest of another
   repository. A mark already swept (``sweep.json`` present) answers its report and deletes nothing.
2. Re-verify (:class:`~lakefs_gc.sweep.reverify.Reverifier`) before the first delete, then again every
   ``reverify_every_seconds`` (default 10 min) or ``reverify_every_batches`` batches.
3. Stream ``deleted.text/part-*`` in batches of at most 1,000 addresses, resuming after the
   checkpoint; drop the live-again addresses (counted as ``rescued``), check each address is a data
   object of the namespace (never ``_lakefs/``), and delete the rest through the deleter (rate limited,
   an outcome per key). Failed keys are appended to ``sweep/failed.text``: they are still garbage, so
   the next mark lists them again and the next sweep retries them after its own verification (a key
   is never deleted on an old verdict).
4. ``sweep/checkpoint.json`` is overwritten every ``checkpoint_every_batches`` batches or
   ``checkpoint_every_seconds``; a killed sweep resumes there (deletes are idempotent, so re-deleting
   a batch done after the last checkpoint is harmless). ``sweep.json`` is written LAST, create-only.

Dry run: the same verification and counting, nothing deleted, nothing written.
Fault points (:mod:`.faults`): ``sweep:verified``, ``sweep:batch:<n>``, ``sweep:before-report``.
"""

from __future__ import annotations

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
)
from lakefs_core.repos.graveler import DATA_DIR, TABLES_DIR, Graveler, StorageNamespace
from lakefs_core.repos.namespace_claims import check_for_gc
from lakefs_core.service.deleter import FailedKeysLog, KeyDeleter
from lakefs_gc.faults import fault_point
from lakefs_gc.pins import PinSource
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import file_name, list_parts, read_lines
from lakefs_gc.runs.reports import RunManifest, read_manifest, read_summary
from lakefs_gc.sweep.reverify import Reverifier

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
    if len(raw) > MAX_STATE_BYTES:
        raise CorruptDataError(f"larger than {MAX_STATE_BYTES} bytes", file=file_name(store, key))
    try:
        return model.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as e:
        raise CorruptDataError(f"invalid {model.__name__}: {e}", file=file_name(store, key)) from e


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_address(address: str, ns: StorageNamespace) -> str:
    """The store key of a marked address, refusing anything but a data object of the namespace: an
    address under ``data/`` (any depth) or a legacy root object, never ``_lakefs/`` (defence in
    depth: the mark never lists them, a tampered report must not make us delete them)."""
    parts = address.split("/")
    ok = (parts[0] == DATA_DIR and len(parts) >= 3) or (len(parts) == 1 and parts[0] != TABLES_DIR)
    if not ok or any(p in ("", ".", "..") for p in parts):
        raise CorruptDataError(f"marked address {address[:200]!r} is not a data object of {ns.uri}")
    return ns.key(address)


async def load_mark(graveler: Graveler, repo_id: str, mark_id: str) -> tuple[RunLayout, RunManifest]:
    """The layout and manifest of a sweepable mark (see step 1 of the module docstring)."""
    await check_for_gc(graveler, repo_id)  # its namespace still leads where recorded, overlapping none
    repo = await graveler.repository(repo_id)
    if repo.read_only:
        raise ReadOnlyError(f"repository {repo_id!r} is read-only (a mirror): GC never sweeps it")
    ns = StorageNamespace(repo.storage_namespace)
    store = await graveler.namespace_store(ns)
    layout = RunLayout(ns, mark_id)
    summary = await read_summary(store, layout.summary)
    if summary is None:
        raise NotFoundError(f"mark {mark_id} of {repo_id!r} has no summary (not finished, or abandoned)")
    if not summary.success:
        raise ConflictError(f"mark {mark_id} of {repo_id!r} failed (summary success=false): not swept")
    manifest = await read_manifest(store, layout.manifest)
    if manifest.repository != repo_id or manifest.run_id != mark_id:
        raise CorruptDataError(f"run.json names {manifest.repository!r} run {manifest.run_id}",
                               file=file_name(store, layout.manifest))  # fmt: skip
    return layout, manifest


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
    ) -> None:
        self.store, self.layout, self.rv, self.deleter = store, layout, reverifier, deleter
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
            async for lines in read_lines(self.store, parts[index]):
                for line in lines:
                    done += 1
                    if done <= skip:
                        continue
                    batch.append(line)
                    if len(batch) >= size:
                        yield index, done, batch
                        batch = []
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
        await self.store.put(
            self.layout.checkpoint, _dump(Checkpoint(**self.state)), content_type="application/json"
        )
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
    dry run. Returns the report (already written, unless dry run)."""
    options = options or SweepOptions()
    if deleter is None and not options.dry_run:
        raise BadInputError("a sweep that deletes needs a deleter", field="deleter")
    layout, manifest = await load_mark(graveler, repo_id, mark_id)
    store = await graveler.namespace_store(layout.ns)
    done = await _read_state(store, layout.sweep_report, SweepReport)
    if done is not None:
        if done.mark_id != mark_id:
            raise CorruptDataError(
                f"sweep.json names mark {done.mark_id}", file=file_name(store, layout.sweep_report)
            )
        return done  # already swept: a re-sweep deletes nothing (I3)
    if manifest.mode == "dry-run" and not options.dry_run:
        raise ConflictError(f"mark {mark_id} was a dry run: it is never swept")
    start = datetime.now(UTC)
    state = None if options.dry_run else await _read_state(store, layout.checkpoint, Checkpoint)
    if state is not None and state.mark_id != mark_id:
        raise CorruptDataError(
            f"checkpoint names mark {state.mark_id}", file=file_name(store, layout.checkpoint)
        )
    state = state or Checkpoint(mark_id=mark_id)
    parts = await list_parts(store, layout.deleted_text)
    async with Reverifier(graveler, repo_id, layout, manifest, pins=pins, workdir=options.workdir) as rv:
        await rv.verify()
        fault_point("sweep:verified")
        sweeper = _Sweeper(
            store,
            layout,
            rv,
            deleter=None if options.dry_run else deleter,
            options=options,
            state=state,
            failed_log=None if options.dry_run else await FailedKeysLog.open(store, layout.failed),
        )
        sweeper.state["reverifications"] += 1
        await sweeper.run(parts)
        await sweeper.maybe_checkpoint(force=True)
        ranges_read = rv.ranges_read
    report = SweepReport(
        **sweeper.state,
        repository=repo_id,
        dry_run=options.dry_run,
        start_time=_iso(start),
        end_time=_iso(datetime.now(UTC)),
        ranges_read=ranges_read,
    )
    fault_point("sweep:before-report")
    if not options.dry_run:
        await store.put(
            layout.sweep_report, _dump(report), if_none_match=True, content_type="application/json"
        )
    log.info(
        "swept %s mark %s: %d deleted, %d failed, %d rescued of %d%s",
        repo_id, mark_id, report.deleted, report.failed, report.rescued, report.candidates,
        " (dry run)" if options.dry_run else "",
    )  # fmt: skip
    return report

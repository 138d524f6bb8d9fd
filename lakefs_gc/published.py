"""GC's published interface: the one module of ``lakefs_gc`` another package may import.

The mirror (``lakefs_mirror``) meets GC here and nowhere else (import-linter enforces it):

- :class:`PinSource`: what GC asks a pin source (``await source.pinned_commits(repo_id) -> set[str]``,
  the commits to treat as branch heads NOW; raise when it cannot tell). A package provides a source
  by an entry point of group :data:`PIN_SOURCES_GROUP` (``lakefs_open.pin_sources``) naming an
  opener ``async def open_pins(url: str, *, source_region: str | None) -> source`` whose source also
  has ``async def aclose()``: the mirror declares ``mirror = "lakefs_mirror.pins:open_pins"``. GC
  opens sources by name (:func:`lakefs_gc.pins.open_pin_source`), never by importing their package,
  and checks every id a source answers (hostile input).
- :func:`finished_runs`: a repository's GC runs that are done for good, oldest first: each a
  :class:`FinishedRun`, either swept (:class:`SweptRun`: the addresses the sweep deleted, in checked
  batches, and what the source still holds) or never to be swept (a failed mark, a dry-run mark, a
  run whose KV record is ``failed``). A run is swept only when its run record in the repository's
  KV (:mod:`lakefs_gc.runs.record`) says so: a ``sweep.json`` without a ``swept`` record (a sweep
  that has not recorded its end, lakeFS's own runs, a file planted in the bucket) is not yielded.
  Marks not swept yet and dry-run sweeps are not yielded either.

Everything is read as the sweep reads it: ``sweep.json``, ``summary.json``, ``run.json`` bounded
and strictly parsed, ``sweep.json``, ``sweep/failed.text`` and every ``deleted.text`` part checked
against the digests of the run record (the parts before the first batch is handed out, and again
as each is read), a recorded run's ``run.json`` too before its mode is believed, the sweep report
checked to name its own mark, every deleted address checked to be a data object of the namespace
(never ``_lakefs/``) before a batch is handed out. A corrupt file raises
:class:`~lakefs_core.errors.CorruptDataError` naming it, a file that does not match the record
:class:`~lakefs_core.errors.TamperedError`; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Container
from dataclasses import dataclass

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import CorruptDataError, NotFoundError, TamperedError
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.service.deleter import read_failed_keys
from lakefs_gc.pins import PIN_SOURCES_GROUP, PinSource
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import file_name, ns_relative, read_lines
from lakefs_gc.runs.record import Digester, RunRecord, RunRecords, digest_of, file_digest
from lakefs_gc.runs.reports import MAX_MANIFEST_BYTES, parse_manifest, read_manifest, read_summary
from lakefs_gc.runs.runs import MAX_SWEEP_REPORT_BYTES, list_run_ids, parse_sweep_report
from lakefs_gc.sweep.sweep import check_address
from lakefs_gc.sweep.verify import (
    check_digest,
    expected,
    parsed_as_recorded,
    read_as_recorded,
    read_verified,
    verify_parts,
)

__all__ = ["PIN_SOURCES_GROUP", "FinishedRun", "PinSource", "SweptRun", "finished_runs"]


@dataclass(frozen=True)
class SweptRun:
    """A finished, non-dry-run sweep of a mark of the namespace."""

    store: BlockStore
    ns: StorageNamespace
    run_id: str
    rescued: int  # candidates the sweep's re-verification kept
    record: RunRecord  # the KV's (state swept): what the files must match

    async def deleted_batches(self, size: int) -> AsyncIterator[list[str]]:
        """The relative addresses the sweep deleted (``deleted.text``), in batches of at most
        ``size``; the parts are the recorded ones with the recorded digests, and every address of a
        batch is checked before the batch is yielded."""
        layout = RunLayout(self.ns, self.run_id)
        batch: list[str] = []
        for part in await verify_parts(self.store, self.ns, self.record, layout.deleted_text, digests=True):
            digester, want = Digester(), expected(self.record, self.ns, self.store, part)
            async with parsed_as_recorded(self.store, part, want):
                async for lines in read_lines(self.store, part, digester=digester):
                    for line in lines:
                        check_address(line, self.ns)
                        batch.append(line)
                        if len(batch) >= size:
                            yield batch
                            batch = []
            check_digest(digester.result(), want, file_name(self.store, part))
        if batch:
            yield batch

    async def kept_in_source(self) -> set[str] | None:
        """The relative addresses of the sweep's candidates the namespace still holds, when that is
        known from the run's files: a sweep that rescued nothing left exactly its failed deletes.
        ``None`` when it rescued some (rescued keys are not recorded: check each one)."""
        if self.rescued:
            return None
        key = RunLayout(self.ns, self.run_id).failed
        want = self.record.sweep_files.get(ns_relative(self.ns, key))
        try:
            actual = await file_digest(self.store, key)
        except NotFoundError:
            actual = digest_of(b"")
        if want is None:
            raise TamperedError("the run record lists no failed keys file", reason="missing-file",
                                file=file_name(self.store, key))  # fmt: skip
        check_digest(actual, want, file_name(self.store, key))
        failed = await read_failed_keys(self.store, key)
        return {ns_relative(self.ns, key) for key, _ in failed}


@dataclass(frozen=True)
class FinishedRun:
    """A run that is done for good: ``swept`` holds its sweep, or is None when it never will be."""

    run_id: str
    swept: SweptRun | None


async def finished_runs(
    graveler: Graveler, repo_id: str, store: BlockStore, ns: StorageNamespace, *, skip: Container[str] = ()
) -> AsyncIterator[FinishedRun]:
    """The finished runs of repository ``repo_id`` (namespace ``ns`` in ``store``), oldest first,
    except those in ``skip`` (see the module docstring)."""
    records = RunRecords(graveler, repo_id)
    for run_id in reversed(await list_run_ids(store, ns)):  # oldest first
        if run_id in skip:
            continue
        layout = RunLayout(ns, run_id)
        found = await records.read(run_id)
        state = found[1].state if found is not None else None
        if found is not None and state == "swept":
            swept = await _swept(store, ns, layout, found[1])
            if swept is not None:
                yield FinishedRun(run_id, swept)
        elif state == "failed" or await _never_swept(store, layout, None if found is None else found[1]):
            yield FinishedRun(run_id, None)


async def _swept(
    store: BlockStore, ns: StorageNamespace, layout: RunLayout, record: RunRecord
) -> SweptRun | None:
    """The swept run, its report checked against the record (None: a dry run's)."""
    key = layout.sweep_report
    want = record.sweep_files.get(ns_relative(ns, key))
    file = file_name(store, key)
    raw = await read_as_recorded(store, key, want, limit=MAX_SWEEP_REPORT_BYTES)
    sweep = parse_sweep_report(raw, file=file)
    if sweep.mark_id != layout.run_id:
        raise CorruptDataError(f"sweep.json names mark {sweep.mark_id}", file=file)
    if sweep.dry_run:
        return None
    return SweptRun(store, ns, layout.run_id, sweep.rescued, record)


async def _never_swept(store: BlockStore, layout: RunLayout, record: RunRecord | None) -> bool:
    """A failed mark or a dry-run mark: the sweep refuses both, for good. A recorded run's mode is
    read from its ``run.json`` as recorded (a planted one cannot make a sweepable mark look like a
    dry run); a run without a record (a failed mark of a version that recorded none) from its files."""
    if record is not None:
        raw = await read_verified(store, layout.ns, record, layout.manifest, limit=MAX_MANIFEST_BYTES)
        return parse_manifest(raw, file=file_name(store, layout.manifest)).mode == "dry-run"
    summary = await read_summary(store, layout.summary)
    if summary is not None and not summary.success:
        return True
    try:
        manifest = await read_manifest(store, layout.manifest)
    except NotFoundError:
        return False  # lakeFS's own run, or one still starting
    return manifest.mode == "dry-run"

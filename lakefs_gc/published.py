"""GC's published interface: the one module of ``lakefs_gc`` another package may import.

The mirror (``lakefs_mirror``) meets GC here and nowhere else (import-linter enforces it):

- :class:`PinSource`: what GC asks a pin source (``await source.pinned_commits(repo_id) -> set[str]``,
  the commits to treat as branch heads NOW; raise when it cannot tell). A package provides a source
  by an entry point of group :data:`PIN_SOURCES_GROUP` (``lakefs_open.pin_sources``) naming an
  opener ``async def open_pins(url: str, *, source_region: str | None) -> source`` whose source also
  has ``async def aclose()``: the mirror declares ``mirror = "lakefs_mirror.pins:open_pins"``. GC
  opens sources by name (:func:`lakefs_gc.pins.open_pin_source`), never by importing their package,
  and checks every id a source answers (hostile input).
- :func:`finished_runs`: a repository's GC runs that are done for good, oldest first, read from its
  namespace: each a :class:`FinishedRun`, either swept (:class:`SweptRun`: the addresses the sweep
  deleted, in checked batches, and what the source still holds) or never to be swept (a failed mark,
  a dry-run mark). Marks not swept yet, lakeFS's own runs and dry-run sweeps are not yielded.

Everything is read as the sweep and the API read it: ``sweep.json``, ``summary.json``, ``run.json``
bounded and strictly parsed, the sweep report checked to name its own mark, every deleted address
checked to be a data object of the namespace (never ``_lakefs/``) before a batch is handed out. A
corrupt file raises :class:`~lakefs_core.errors.CorruptDataError` naming it; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Container
from dataclasses import dataclass

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import CorruptDataError, NotFoundError
from lakefs_core.namespace import StorageNamespace
from lakefs_core.service.deleter import read_failed_keys
from lakefs_gc.pins import PIN_SOURCES_GROUP, PinSource
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, ns_relative, read_lines
from lakefs_gc.runs.reports import read_manifest, read_summary
from lakefs_gc.runs.runs import list_run_ids, read_sweep_report
from lakefs_gc.sweep.sweep import check_address

__all__ = ["PIN_SOURCES_GROUP", "FinishedRun", "PinSource", "SweptRun", "finished_runs"]


@dataclass(frozen=True)
class SweptRun:
    """A finished, non-dry-run sweep of a mark of the namespace."""

    store: BlockStore
    ns: StorageNamespace
    run_id: str
    rescued: int  # candidates the sweep's re-verification kept

    async def deleted_batches(self, size: int) -> AsyncIterator[list[str]]:
        """The relative addresses the sweep deleted (``deleted.text``), in batches of at most
        ``size``; every address of a batch is checked before the batch is yielded."""
        layout = RunLayout(self.ns, self.run_id)
        batch: list[str] = []
        for part in await list_parts(self.store, layout.deleted_text):
            async for lines in read_lines(self.store, part):
                for line in lines:
                    check_address(line, self.ns)
                    batch.append(line)
                    if len(batch) >= size:
                        yield batch
                        batch = []
        if batch:
            yield batch

    async def kept_in_source(self) -> set[str] | None:
        """The relative addresses of the sweep's candidates the namespace still holds, when that is
        known from the run's files: a sweep that rescued nothing left exactly its failed deletes.
        ``None`` when it rescued some (rescued keys are not recorded: check each one)."""
        if self.rescued:
            return None
        failed = await read_failed_keys(self.store, RunLayout(self.ns, self.run_id).failed)
        return {ns_relative(self.ns, key) for key, _ in failed}


@dataclass(frozen=True)
class FinishedRun:
    """A run that is done for good: ``swept`` holds its sweep, or is None when it never will be."""

    run_id: str
    swept: SweptRun | None


async def finished_runs(
    store: BlockStore, ns: StorageNamespace, *, skip: Container[str] = ()
) -> AsyncIterator[FinishedRun]:
    """The finished runs of the namespace, oldest first, except those in ``skip`` (see the module)."""
    for run_id in reversed(await list_run_ids(store, ns)):  # oldest first
        if run_id in skip:
            continue
        layout = RunLayout(ns, run_id)
        sweep = await read_sweep_report(store, layout.sweep_report)
        if sweep is not None and not sweep.dry_run:
            if sweep.mark_id != run_id:
                raise CorruptDataError(f"sweep.json names mark {sweep.mark_id}", file=layout.sweep_report)
            yield FinishedRun(run_id, SweptRun(store, ns, run_id, sweep.rescued))
        elif await _never_swept(store, layout):
            yield FinishedRun(run_id, None)


async def _never_swept(store: BlockStore, layout: RunLayout) -> bool:
    """A failed mark or a dry-run mark: the sweep refuses both, for good."""
    summary = await read_summary(store, layout.summary)
    if summary is not None and not summary.success:
        return True
    try:
        manifest = await read_manifest(store, layout.manifest)
    except NotFoundError:
        return False  # lakeFS's own run, or one still starting
    return manifest.mode == "dry-run"

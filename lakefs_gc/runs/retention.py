"""Retention of GC run records: the KV keeps the newest runs of a repository, not every run ever.

Contract:

- :func:`retire_old_runs` keeps the ``keep`` newest runs the KV has records of
  (:meth:`~lakefs_gc.runs.record.RunRecords.run_ids`; the ids sort by time) and retires every older
  one (:meth:`~lakefs_gc.runs.record.RunRecords.retire_run`: its record is tombstoned, its pointer
  deleted; the chunks go after :data:`~lakefs_gc.runs.record.RECORD_GRACE`), then collects what is
  due. The caller holds the repository's GC lease, so no mark or sweep of it writes meanwhile.
- Never retired, re-checked right before each retirement: a run ``protected`` names (the daemon
  passes the runs queued or running in its registry: a sweep requested for an old mark), and a
  run whose pointer moved since it was read.
  Any state is retired past the ``keep`` newest: the scheduler resumes only the newest run, and a
  sweep asked for later of a retired mark is refused for want of a record (it deletes nothing).
- References checked: nothing else names a run id in the KV. Purge audit records name audit ids
  only; a mirror applies the finished runs it finds (:func:`lakefs_gc.published.finished_runs`)
  and records them in its own database: a mirror that has not applied a swept run by the time the
  run is retired never applies it (its garbage stays; nothing live is deleted). ``keep`` counts
  runs, so with daily runs the default (30) gives a paused mirror a month.
- The run's files in the namespace stay (the runs API then shows the run as ``incomplete``, as a
  run without a record).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container

from lakefs_gc.runs.record import RunRecords

log = logging.getLogger(__name__)

DEFAULT_RUNS_KEPT = 30


async def retire_old_runs(
    records: RunRecords, *, keep: int, protected: Callable[[], Container[str]] = frozenset
) -> list[str]:
    """Retire the runs older than the ``keep`` newest (see the module doc); returns their ids."""
    if keep < 1:
        raise ValueError("keep must be >= 1")
    retired = []
    for run_id in (await records.run_ids())[keep:]:
        pointer = await records.pointer(run_id)
        if pointer is None:
            continue
        if run_id in protected():  # right before: the registry may have changed while we read
            continue
        if await records.retire_run(run_id, pointer):
            retired.append(run_id)
    collected = await records.collect()
    if retired or collected:
        log.info("retired %d GC run record(s), deleted %d retired record(s)", len(retired), collected)
    return retired

"""Prometheus metrics of the GC daemon (spec gc.md §3b), declared once per registry.

Contract:

- Names start with ``lakefs_gc_``; counters end in ``_total``, ages and times in ``_seconds``.
- Every series carries ``region`` (the daemon's configured region, added at collection time), so
  one Prometheus can scrape the GC daemons of every region.
- ``repo`` (the repository id) is the only per-object label; ``phase`` (``mark``/``sweep``/``run``)
  and ``outcome`` (``success``/``failure``/``abandoned``) are fixed sets. The number of series is
  bounded by the number of repositories this daemon collects.
- A repository's counters exist at 0 from the first pass that sees it (:meth:`GCMetrics.known`),
  so ``increase()`` sees the first run; :meth:`GCMetrics.forget` drops every series of a
  repository that no longer exists.

Retention GC: ``runs_total{repo,phase,outcome}``, ``last_success_timestamp_seconds{repo}``,
``objects_{listed,marked,deleted}_total{repo}``, ``delete_failures_total{repo}``,
``sweep_throttled_total{repo}``, ``reverify_rescued_total{repo}``, ``pinned_commits{repo}``,
``run_in_progress{repo}``, ``sweep_refusals_total{repo,reason}`` (GC refused to act on a run or a
namespace: ``reason`` is one of :data:`REFUSAL_REASONS`, a fixed set: the sweep's
:data:`lakefs_gc.sweep.verify.REASONS`, a run whose files do not match its KV record, plus
``namespace``, a namespace that no longer leads where recorded or overlaps another, in any phase).
Hard delete: ``hd_candidates{repo}`` (intents due at the last pass),
``hd_deleted_total{repo}``, ``hd_rescued_total{repo}`` (found live at the re-check),
``hd_oldest_candidate_age_seconds{repo}``, ``hd_passes_total{repo,outcome}``, ``purges_total{repo}``,
``purged_objects_total{repo}``. The loop: ``consecutive_errors``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import Counter, Gauge

from lakefs_core.service.http.metrics import RegionRegistry
from lakefs_gc.sweep.verify import REASONS

PREFIX = "lakefs_gc"
PHASES = ("mark", "sweep", "run")
OUTCOMES = ("success", "failure", "abandoned")
REFUSAL_REASONS = (*REASONS, "namespace")


class GCMetrics:
    def __init__(self, region: str = "default") -> None:
        self.registry = RegionRegistry(region)  # every series also carries ``region``
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ("repo",)) -> Counter:
            return Counter(f"{PREFIX}_{name}", doc, labels, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ("repo",)) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", doc, labels, registry=r)

        self.runs = counter("runs", "GC runs by phase and outcome.", ("repo", "phase", "outcome"))
        self.last_success = gauge("last_success_timestamp_seconds", "End of the last successful GC run.")
        self.listed = counter("objects_listed", "Objects listed in the namespace by marks.")
        self.marked = counter("objects_marked", "Objects marked as garbage.")
        self.deleted = counter("objects_deleted", "Objects deleted by sweeps.")
        self.delete_failures = counter("delete_failures", "Keys a sweep failed to delete (retried next run).")
        self.throttled = counter("sweep_throttled", "DeleteObjects calls answered SlowDown/503.")
        self.rescued = counter("reverify_rescued", "Marked objects found live again by re-verification.")
        self.pinned = gauge("pinned_commits", "Commits pinned by mirrors at the last mark.")
        self.refusals = counter(
            "sweep_refusals",
            "Runs GC refused to act on: files not matching the KV record, or the namespace.",
            ("repo", "reason"),
        )
        self.in_progress = gauge("run_in_progress", "1 while a GC run of the repository is running here.")
        self.hd_candidates = gauge("hd_candidates", "Journal intents due at the last reconciliation.")
        self.hd_deleted = counter("hd_deleted", "Uncommitted garbage deleted by the reconciler.")
        self.hd_rescued = counter("hd_rescued", "Reconciler candidates found live at the re-check.")
        self.hd_oldest = gauge("hd_oldest_candidate_age_seconds", "Age of the oldest undecided intent.")
        self.hd_passes = counter("hd_passes", "Reconciliation passes by outcome.", ("repo", "outcome"))
        self.purges = counter("purges", "Audited purges carried out.")
        self.purged = counter("purged_objects", "Objects deleted by audited purges.")
        self.consecutive_errors = Gauge(
            f"{PREFIX}_consecutive_errors", "Scheduling passes failed in a row.", registry=r
        )
        self._known: set[str] = set()

    def known(self, repo: str) -> None:
        """Create the repository's series at 0 (idempotent)."""
        if repo in self._known:
            return
        self._known.add(repo)
        for phase in PHASES:
            for outcome in OUTCOMES:
                self.runs.labels(repo, phase, outcome)
        for c in (self.listed, self.marked, self.deleted, self.delete_failures, self.throttled, self.rescued):
            c.labels(repo)
        for c in (self.hd_deleted, self.hd_rescued, self.purges, self.purged):
            c.labels(repo)
        for outcome in ("success", "failure"):
            self.hd_passes.labels(repo, outcome)
        for reason in REFUSAL_REASONS:
            self.refusals.labels(repo, reason)
        self.in_progress.labels(repo).set(0)

    def forget(self, repo: str) -> None:
        """Drop every series of ``repo`` (deleted, or no longer selected)."""
        if repo not in self._known:
            return
        self._known.discard(repo)
        for phase in PHASES:
            for outcome in OUTCOMES:
                self._remove(self.runs, repo, phase, outcome)
        for m in (
            self.last_success, self.listed, self.marked, self.deleted, self.delete_failures, self.throttled,
            self.rescued, self.pinned, self.in_progress, self.hd_candidates, self.hd_deleted,
            self.hd_rescued, self.hd_oldest, self.purges, self.purged,
        ):  # fmt: skip
            self._remove(m, repo)
        for outcome in ("success", "failure"):
            self._remove(self.hd_passes, repo, outcome)
        for reason in REFUSAL_REASONS:
            self._remove(self.refusals, repo, reason)

    @staticmethod
    def _remove(metric: Any, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # never set: nothing to drop
            metric.remove(*labels)

    def known_repos(self) -> set[str]:
        return set(self._known)

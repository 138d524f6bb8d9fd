"""Prometheus metrics of the mirroring daemon, declared once per registry.

Labels are low-cardinality: ``mirror`` (the mirror id) and ``branch`` at most (``operation`` for
object-store requests is a fixed small set). Names follow Prometheus conventions: ``_seconds`` for
durations and ages, ``_total`` for counters, ``_bytes`` for sizes.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "lakefs_mirror"


class MirrorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.freshness_lag = Gauge(
            f"{PREFIX}_freshness_lag_seconds",
            "Age of the oldest source commit not yet on the mirror branch (0 when up to date).",
            ["mirror", "branch"],
            registry=r,
        )
        self.commits_pending = Gauge(
            f"{PREFIX}_commits_pending",
            "First-parent source commits not yet on the mirror branch.",
            ["mirror", "branch"],
            registry=r,
        )
        self.missing_objects = Gauge(
            f"{PREFIX}_missing_objects",
            "Data objects of the candidate commit not yet present in the mirror namespace.",
            ["mirror", "branch"],
            registry=r,
        )
        self.missing_ranges = Gauge(
            f"{PREFIX}_missing_ranges",
            "Ranges (and metarange) of the candidate commit not yet present in the mirror namespace.",
            ["mirror", "branch"],
            registry=r,
        )
        self.validation_duration = Histogram(
            f"{PREFIX}_validation_duration_seconds",
            "Time to validate one candidate commit in the mirror namespace.",
            ["mirror"],
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.promotions = Counter(
            f"{PREFIX}_promotions_total",
            "Mirror branch (or tag) heads moved to a validated commit.",
            ["mirror", "branch"],
            registry=r,
        )
        self.commits_copied = Counter(
            f"{PREFIX}_commits_copied_total",
            "Commit records copied verbatim from the source repository.",
            ["mirror"],
            registry=r,
        )
        self.store_requests = Counter(
            f"{PREFIX}_object_store_requests_total",
            "Object-store requests issued while validating and copying, by operation.",
            ["operation"],
            registry=r,
        )
        self.cache_hits = Counter(
            f"{PREFIX}_presence_cache_hits_total", "Presence checks answered from the cache.", registry=r
        )
        self.cache_misses = Counter(
            f"{PREFIX}_presence_cache_misses_total",
            "Presence checks that needed the object store.",
            registry=r,
        )
        self.copy_bytes = Counter(
            f"{PREFIX}_copy_bytes_total",
            "Bytes copied by the daemon itself (active mode).",
            ["mirror"],
            registry=r,
        )
        self.consecutive_errors = Gauge(
            f"{PREFIX}_consecutive_errors",
            "Failed passes in a row (0 after a successful pass).",
            registry=r,
        )
        self.lease_held = Gauge(
            f"{PREFIX}_lease_held",
            "1 while this daemon holds its region's lease (is the active daemon), else 0.",
            registry=r,
        )
        self.last_pass = Gauge(
            f"{PREFIX}_last_pass_timestamp_seconds",
            "Unix time at which the last pass finished.",
            registry=r,
        )

    def forget(self, mirror: str, branch: str) -> None:
        """Drop the per-branch series of a branch that no longer exists."""
        for gauge in (self.freshness_lag, self.commits_pending, self.missing_objects, self.missing_ranges):
            with contextlib.suppress(KeyError):
                gauge.remove(mirror, branch)

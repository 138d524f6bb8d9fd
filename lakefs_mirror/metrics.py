"""Prometheus metrics of the mirroring daemon, declared once per registry.

Contract:

- **Every series carries ``region``**, the region of the exporting daemon, so one Prometheus can
  scrape every region's daemons. The metrics declared here have it as a label; anything else
  registered in :attr:`MirrorMetrics.registry` (the HTTP API's request metrics) gets it added at
  collection time.
- **Mirrors are labelled by name**: ``mirror`` is the mirror's name, which is unique within its
  destination region and equals the mirror repository's name there. A mirror's series are exported
  only by the daemons of its destination region (in practice by the one holding the region's lease,
  which runs the mirror), so ``{region, mirror}`` identifies one mirror.
  The mirror's id (and source) is on ``lakefs_mirror_info{region,mirror,id,source_repository,
  source_region} 1``, for joins.
- Labels are otherwise low-cardinality: ``branch``, ``kind`` (a fixed set, :data:`ERROR_KINDS`) and
  ``operation`` (a fixed set, :data:`STORE_OPERATIONS`).
- Counters exist at 0 from the start: the unlabelled ones (per region) when the registry is built,
  the per-mirror ones when :meth:`MirrorMetrics.known_mirror` first sees a mirror, so ``rate()`` and
  ``increase()`` see the first increment.
- :meth:`MirrorMetrics.forget_mirror` removes every series of a mirror at once (it was deleted).

Names follow Prometheus conventions: ``_seconds`` for durations and ages, ``_total`` for counters,
``_bytes`` for sizes.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from lakefs_core.errors import (
    AccessDeniedError,
    BadInputError,
    ConflictError,
    CorruptDataError,
    LakeFSError,
    NotFoundError,
    StorageFullError,
    TransientError,
    UnreachableError,
)
from lakefs_core.service.http.metrics import RegionRegistry

PREFIX = "lakefs_mirror"
_PER_BRANCH = ("region", "mirror", "branch")
_PER_MIRROR = ("region", "mirror")

# Error class -> ``kind`` label of ``lakefs_mirror_pass_errors_total``; the most specific class in
# an error's MRO wins (UnreachableError before TransientError), anything else is "other".
_KIND_OF: dict[type[BaseException], str] = {
    AccessDeniedError: "access_denied",
    NotFoundError: "not_found",
    UnreachableError: "unreachable",
    TransientError: "transient",
    CorruptDataError: "corrupt",
    ConflictError: "conflict",
    BadInputError: "bad_input",
    StorageFullError: "storage_full",
}
ERROR_KINDS: tuple[str, ...] = (*_KIND_OF.values(), "other")
STORE_OPERATIONS: tuple[str, ...] = ("get", "head", "list")


def error_kind(exc: BaseException) -> str:
    """The short, fixed ``kind`` of an error (see :data:`ERROR_KINDS`)."""
    for cls in type(exc).__mro__:
        if cls is LakeFSError:
            break
        kind = _KIND_OF.get(cls)
        if kind is not None:
            return kind
    return "other"


class MirrorMetrics:
    def __init__(self, *, region: str, registry: CollectorRegistry | None = None) -> None:
        self.region = region
        self.registry = registry or RegionRegistry(region)
        r = self.registry
        self.info = Gauge(
            f"{PREFIX}_info",
            "1 per mirror this daemon mirrors into its region: the mirror's id and source, by name.",
            ["region", "mirror", "id", "source_repository", "source_region"],
            registry=r,
        )
        self._init_branch_metrics(r)
        self._init_activity_metrics(r)
        self._per_mirror: tuple[MetricWrapperBase, ...] = (
            self.info,
            self.freshness_lag,
            self.commits_pending,
            self.missing_objects,
            self.missing_ranges,
            self.validation_duration,
            self.promotions,
            self.commits_copied,
            self.copy_bytes,
            self.pass_errors,
            self.consecutive_failures,
        )
        self._init_region_metrics(r)
        self._known: dict[str, tuple[str, str, str]] = {}  # mirror name -> info labels after it

    def _init_branch_metrics(self, r: CollectorRegistry) -> None:
        """Per-branch progress: how far each mirror branch is behind its source."""
        self.freshness_lag = Gauge(
            f"{PREFIX}_freshness_lag_seconds",
            "Age of the oldest source commit not yet on the mirror branch (0 when up to date).",
            _PER_BRANCH,
            registry=r,
        )
        self.commits_pending = Gauge(
            f"{PREFIX}_commits_pending",
            "First-parent source commits not yet on the mirror branch.",
            _PER_BRANCH,
            registry=r,
        )
        self.missing_objects = Gauge(
            f"{PREFIX}_missing_objects",
            "Data objects of the candidate commit not yet present in the mirror namespace.",
            _PER_BRANCH,
            registry=r,
        )
        self.missing_ranges = Gauge(
            f"{PREFIX}_missing_ranges",
            "Ranges (and metarange) of the candidate commit not yet present in the mirror namespace.",
            _PER_BRANCH,
            registry=r,
        )

    def _init_activity_metrics(self, r: CollectorRegistry) -> None:
        """Per-mirror (and per-branch promotion) work done and errors met."""
        self.validation_duration = Histogram(
            f"{PREFIX}_validation_duration_seconds",
            "Time to validate one candidate commit in the mirror namespace.",
            _PER_MIRROR,
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.promotions = Counter(
            f"{PREFIX}_promotions_total",
            "Mirror branch (or tag) heads moved to a validated commit.",
            _PER_BRANCH,
            registry=r,
        )
        self.commits_copied = Counter(
            f"{PREFIX}_commits_copied_total",
            "Commit records copied verbatim from the source repository.",
            _PER_MIRROR,
            registry=r,
        )
        self.copy_bytes = Counter(
            f"{PREFIX}_copy_bytes_total",
            "Bytes copied by the daemon itself (active mode).",
            _PER_MIRROR,
            registry=r,
        )
        self.pass_errors = Counter(
            f"{PREFIX}_pass_errors_total",
            "Errors met while mirroring (the mirror as a whole, or one of its branches or tags), by kind.",
            ["region", "mirror", "kind"],
            registry=r,
        )
        self.consecutive_failures = Gauge(
            f"{PREFIX}_consecutive_failures",
            "Passes in a row in which this mirror met an error (0 after a pass without one).",
            _PER_MIRROR,
            registry=r,
        )

    def _init_region_metrics(self, r: CollectorRegistry) -> None:
        """Per-region series, bound to this daemon's region (so they exist, at 0, from the start)."""
        region = self.region
        store_requests = Counter(
            f"{PREFIX}_object_store_requests_total",
            "Object-store requests issued while validating and copying, by operation.",
            ["region", "operation"],
            registry=r,
        )
        self.store_requests = store_requests
        for op in STORE_OPERATIONS:
            store_requests.labels(region, op)
        self.cache_hits = Counter(
            f"{PREFIX}_presence_cache_hits_total",
            "Presence checks answered from the cache.",
            ["region"],
            registry=r,
        ).labels(region)
        self.cache_misses = Counter(
            f"{PREFIX}_presence_cache_misses_total",
            "Presence checks that needed the object store.",
            ["region"],
            registry=r,
        ).labels(region)
        self.consecutive_errors = Gauge(
            f"{PREFIX}_consecutive_errors",
            "Failed passes in a row (0 after a successful pass).",
            ["region"],
            registry=r,
        ).labels(region)
        self.lease_held = Gauge(
            f"{PREFIX}_lease_held",
            "1 while this daemon holds its region's lease (is the active daemon), else 0.",
            ["region"],
            registry=r,
        ).labels(region)
        self.last_pass = Gauge(
            f"{PREFIX}_last_pass_timestamp_seconds",
            "Unix time at which the last pass finished.",
            ["region"],
            registry=r,
        ).labels(region)

    # -- per-mirror series ----------------------------------------------------------------------

    def known_mirror(self, name: str, mirror_id: str, source_repository: str, source_region: str) -> None:
        """Create a mirror's counters at 0 and its info series (re-created if the id changed)."""
        info = (mirror_id, source_repository, source_region)
        old = self._known.get(name)
        if old == info:
            return
        if old is not None:
            with contextlib.suppress(KeyError):
                self.info.remove(self.region, name, *old)
        self._known[name] = info
        self.info.labels(self.region, name, *info).set(1)
        self.consecutive_failures.labels(self.region, name)
        self.commits_copied.labels(self.region, name)
        self.copy_bytes.labels(self.region, name)
        for kind in ERROR_KINDS:
            self.pass_errors.labels(self.region, name, kind)

    def known_mirrors(self) -> set[str]:
        return set(self._known)

    def forget_mirror(self, name: str) -> None:
        """Remove every series of mirror ``name`` (deleted, or no longer mirrored into this region)."""
        self._known.pop(name, None)
        for metric in self._per_mirror:
            metric.remove_by_labels({"region": self.region, "mirror": name})

    def failed(self, mirror: str, exc: BaseException) -> None:
        self.pass_errors.labels(self.region, mirror, error_kind(exc)).inc()

    def forget(self, mirror: str, branch: str) -> None:
        """Drop the per-branch series of a branch that no longer exists."""
        for gauge in (self.freshness_lag, self.commits_pending, self.missing_objects, self.missing_ranges):
            with contextlib.suppress(KeyError):
                gauge.remove(self.region, mirror, branch)

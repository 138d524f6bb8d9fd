"""The JSON bodies of the GC daemon's API (pydantic; the OpenAPI document is generated from them).

lakeFS-compatible bodies keep lakeFS's names: ``GarbageCollectionRules`` (``/settings/gc_rules``,
validated by :class:`lakefs_gc.rules.GCRules`) and ``GarbageCollectionConfig``
(``{"grace_period": seconds}``). The ``/service/gc/v1`` bodies are ours.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from lakefs_core.repos.graveler import PurgeRecord, PurgeReport
from lakefs_gc.rules import BranchRule

RUN_ID_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z_-]{0,127}$"
REPO_PATTERN = r"^[a-z0-9][a-z0-9-]{2,62}$"


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GarbageCollectionRules(_Out):
    """lakeFS's rules body: a default retention and per-branch overrides, in days."""

    default_retention_days: int
    branches: list[BranchRule]


class GarbageCollectionConfig(_Out):
    """lakeFS's ``/config/garbage-collection`` answer: the grace period (``min_age``) in seconds."""

    grace_period: int


class RepoPath(_In):
    repository: StrictStr = Field(pattern=REPO_PATTERN)


class RunPath(_In):
    repository: StrictStr = Field(pattern=REPO_PATTERN)
    run_id: StrictStr = Field(pattern=RUN_ID_PATTERN)


class PurgePath(_In):
    repository: StrictStr = Field(pattern=REPO_PATTERN)
    audit_id: StrictStr = Field(min_length=1, max_length=128, pattern=r"^[0-9A-Za-z_-]+$")


class ListQuery(_In):
    amount: int = Field(default=100, ge=1, le=1000)


class RunCreation(_In):
    """Start a run: ``full`` (mark then sweep), ``mark``, ``dry-run`` (a mark never swept), or
    ``sweep`` of the successful mark ``mark_id`` (``dry_run``: re-verify and count only)."""

    mode: Literal["full", "mark", "sweep", "dry-run"] = "full"
    mark_id: StrictStr | None = Field(default=None, pattern=RUN_ID_PATTERN)
    dry_run: StrictBool = False
    min_age_seconds: StrictInt | None = Field(default=None, ge=0, le=10 * 365 * 86400)
    tags: Literal["pin", "ignore"] | None = None


class Run(_Out):
    """A run as this daemon knows it: its KV record (``state``, ``record``: the record's own state,
    None without one), the files in the namespace that match the record (``summary``, ``sweep``;
    the others named in ``file_errors``), merged with its in-memory state."""

    repository: str
    run_id: str
    mode: str | None = None
    state: Literal["queued", "running", "incomplete", "failed", "marked", "swept"]
    record: Literal["complete", "swept", "failed"] | None = None
    phase: str | None = None
    mark_id: str | None = None
    requested_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    summary: dict[str, Any] | None = None
    sweep: dict[str, Any] | None = None
    file_errors: list[str] = Field(default_factory=list)


class RunList(_Out):
    results: list[Run]


class Reconciliation(_Out):
    """The last reconciliation pass of the repository on this daemon."""

    finished_at: datetime
    dry_run: bool
    candidates: int
    deleted: int
    rescued: int
    committed: int
    staged: int
    waiting: int
    failed: int
    oldest_undecided_age_seconds: float | None


class HardDeleteStatus(_Out):
    repository: str
    journal_enabled: bool
    reconciler_enabled: bool
    grace_seconds: float
    pending_timeout_seconds: float
    undecided_intents: int
    oldest_undecided_age_seconds: float | None
    last_pass: Reconciliation | None = None
    last_error: str | None = None


class PurgeCreation(_In):
    """Purge the objects ``path`` had at ``ref`` (or in every commit, with ``all_history``)."""

    ref: StrictStr = Field(min_length=1, max_length=1024)
    path: StrictStr = Field(min_length=1, max_length=4096)
    all_history: StrictBool = False
    reason: StrictStr = Field(min_length=1, max_length=1024)
    yes: StrictBool = False


PurgeReportModel = PurgeReport  # the core's models are the API's bodies
PurgeRecordModel = PurgeRecord

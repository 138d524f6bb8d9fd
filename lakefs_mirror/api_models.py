"""The mirroring API's request and response models: the one description of what it accepts and answers.

:mod:`lakefs_mirror.api` validates every path parameter, query string and body with these models
and serialises every response through them; :mod:`lakefs_core.service.http.openapi` generates
``/openapi.json`` from the same classes. Patterns are ECMA-262-compatible (``$`` only at the very end,
as pydantic's Rust regex engine reads them too), so a request valid by the document is never refused
as malformed and one invalid by it never accepted. ``region`` is an enum of the configured regions,
so the creation and list-query models are built per configuration by :func:`regional_models`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from lakefs_mirror.db import MAX_BRANCH_FILTER, MAX_GLOB_LENGTH

API_PREFIX = "/service/replication/v1"

REPO_ID_PATTERN = "^[a-z0-9][a-z0-9-]{2,62}$"
MIRROR_ID_PATTERN = "^[0-9a-f]{32}$"
AFTER_PATTERN = "^[0-9a-f]{0,32}$"
GLOB_PATTERN = "^[^\\x00]+$"
_SEGMENTS = "(/[A-Za-z0-9_-][A-Za-z0-9._-]*)"
NAMESPACE_PATTERN = (
    f"^s3://[A-Za-z0-9][A-Za-z0-9._-]{{1,253}}[A-Za-z0-9]{_SEGMENTS}*/?$|^local://{_SEGMENTS}+/?$"
)
MAX_NAMESPACE_LENGTH = 1024
MAX_VERSION = 2**31 - 1
MAX_AMOUNT = 1000

REPO_ID_HINT = "invalid repository id: 3-63 characters of a-z, 0-9 and '-', starting with a letter or digit"
# The message of a malformed value, per field (pydantic's own text quotes the regular expression).
HINTS = {
    "source_repo": REPO_ID_HINT,
    "name": REPO_ID_HINT,
    "mirror_id": "invalid mirror id: 32 lower-case hex digits",
    "storage_namespace": "must be s3://bucket[/prefix] or local:///absolute/path "
    "(path segments of letters, digits, '.', '_' and '-', not starting with '.')",
    "amount": f"must be an integer from 1 to {MAX_AMOUNT}",
    "after": "must be a mirror id (up to 32 lower-case hex digits)",
}

_compiled: dict[str, re.Pattern[str]] = {}


def fullmatch(pattern: str, value: str) -> bool:
    """Does ``value`` match the schema ``pattern`` as ECMA-262 reads it (``$`` only at the very end)?"""
    compiled = _compiled.get(pattern)
    if compiled is None:
        compiled = _compiled[pattern] = re.compile(pattern)
    return compiled.fullmatch(value) is not None


def _durable(value: Any) -> Any:
    """A ``mem://`` store lives in one process: no reader, nor this daemon after a restart, would see
    what the mirror promoted. Refused with its own message before the pattern (which excludes it too)."""
    if isinstance(value, str) and value.startswith("mem://"):
        raise ValueError(
            "a mirror's namespace must be durable and reachable by every reader: use s3:// or "
            "local:///, not a mem:// store"
        )
    return value


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


RepoId = Annotated[str, Field(pattern=REPO_ID_PATTERN)]
MirrorId = Annotated[str, Field(pattern=MIRROR_ID_PATTERN)]
Glob = Annotated[str, Field(min_length=1, max_length=MAX_GLOB_LENGTH, pattern=GLOB_PATTERN)]
BranchFilter = Annotated[
    list[Glob],
    Field(
        min_length=1,
        max_length=MAX_BRANCH_FILTER,
        description="fnmatch globs; a branch (or tag) is mirrored when any glob matches its name.",
    ),
]
Mode = Annotated[
    Literal["native", "active"],
    Field(
        description="native: wait for S3 Replication; active: also copy objects it has not delivered "
        "after the grace period."
    ),
]
Namespace = Annotated[
    str,
    Field(
        max_length=MAX_NAMESPACE_LENGTH,
        pattern=NAMESPACE_PATTERN,
        description="Destination storage namespace: s3://bucket/prefix or local:///abs/path (durable; not mem://).",
    ),
    # after the Field: a validator before the constraints would hide the pattern from the schema
    BeforeValidator(_durable),
]

# -- parameters ------------------------------------------------------------------------------------------


class RepoPath(_In):
    source_repo: Annotated[RepoId, Field(description="Source repository.")]


class MirrorPath(RepoPath):
    mirror_id: Annotated[MirrorId, Field(description="Mirror id, as returned on creation.")]


# -- bodies ----------------------------------------------------------------------------------------------


class _CreationBase(_In):
    name: Annotated[
        RepoId, Field(description="Id of the read-only mirror repository in the destination region.")
    ]
    region: str
    storage_namespace: Namespace
    branch_filter: BranchFilter = Field(default_factory=lambda: ["*"])
    paused: bool = False
    mode: Mode = "native"
    mirror_tags: bool = True


class MirrorUpdate(_In):
    """Every field optional but never null: which were given is ``model_fields_set``."""

    branch_filter: BranchFilter = Field(default_factory=lambda: ["*"])
    paused: bool = False
    mode: Mode = "native"
    mirror_tags: bool = True
    version: int = Field(
        default=1,
        ge=1,
        le=MAX_VERSION,
        description="Apply only if the mirror is still at this version (else 409).",
    )


class _ListQueryBase(BaseModel):
    model_config = ConfigDict(extra="ignore")  # unknown query parameters are ignored, as lakeFS does

    after: str = Field(
        default="", pattern=AFTER_PATTERN, description="Return mirrors whose id sorts after this one."
    )
    amount: int = Field(default=MAX_AMOUNT, ge=1, le=MAX_AMOUNT, description="Page size.")
    source_region: str | None = None


@dataclass(frozen=True)
class RegionalModels:
    creation: type[_CreationBase]
    list_query: type[_ListQueryBase]


def regional_models(regions: Sequence[str]) -> RegionalModels:
    """The models whose ``region`` fields are an enum of the configured ``regions``."""
    region: Any = Literal[tuple(sorted(regions))]
    destination: Any = Annotated[region, Field(description="A configured region: the mirror's destination.")]
    source: Any = Annotated[
        region | None, Field(description="Region of the source repository (default: this daemon's region).")
    ]
    creation = create_model(
        "MirrorCreation",
        __base__=_CreationBase,
        __doc__="Create a mirror of the path's source repository (in this daemon's region).",
        region=(destination, ...),
    )
    list_query = create_model("MirrorListQuery", __base__=_ListQueryBase, source_region=(source, None))
    return RegionalModels(creation, list_query)


# -- responses -------------------------------------------------------------------------------------------


class Mirror(_Out):
    id: MirrorId
    source_repo: RepoId
    source_region: str
    name: RepoId
    region: str
    storage_namespace: str
    branch_filter: list[str]
    paused: bool
    mode: Literal["native", "active"]
    mirror_tags: bool
    created_at: str = Field(json_schema_extra={"format": "date-time"})
    updated_at: str = Field(json_schema_extra={"format": "date-time"})
    resync_requested_at: str | None = Field(json_schema_extra={"format": "date-time"})
    version: int = Field(ge=1)
    warnings: list[str] = Field(
        default_factory=list,
        description="Why this mirror can never progress as configured (accepted anyway), e.g. native "
        "mode into a local namespace.",
    )


class Pagination(_Out):
    has_more: bool
    next_offset: str
    results: int = Field(ge=0)
    max_per_page: int = Field(ge=1)


class MirrorList(_Out):
    results: list[Mirror]
    pagination: Pagination


Count = Annotated[int, Field(ge=0)]
Timestamp = Annotated[str | None, Field(json_schema_extra={"format": "date-time"})]


class BranchStatus(_Out):
    kind: Literal["branch", "tag"]
    name: str = Field(description="Branch or tag name.")
    source_head: str | None
    mirror_head: str | None
    candidate: str | None = Field(description="Source commit being validated.")
    missing_objects: Count
    missing_ranges: Count
    external_objects: Count
    lag_seconds: float | None
    last_promotion_at: Timestamp
    last_checked_at: Timestamp
    last_error: str | None
    blocked_reason: str | None = Field(
        description="Why this branch or tag does not progress (null: it is up to date or moving)."
    )
    caught_up: bool = Field(
        description="The mirror head equals the source head last seen AND every object, range and the "
        "metarange of it is in the destination namespace (a mirror head is only ever a validated commit)."
    )


class Leader(_Out):
    """The destination region's daemon holding the region lease."""

    holder: str
    expires_at: str = Field(json_schema_extra={"format": "date-time"})
    live: bool


class MirrorStatus(_Out):
    mirror: Mirror
    destination_leader: Leader | None = Field(
        description="null: no daemon of the destination region took its lease yet."
    )
    blocked_reason: str | None = Field(
        description="Why the mirror as a whole does not progress: paused, or no live daemon in the "
        "destination region (null: it runs)."
    )
    results: list[BranchStatus]
    caught_up: bool = Field(
        description="Every branch and tag is caught_up and the mirror is neither paused nor promoted."
    )
    warnings: list[str] = Field(default_factory=list, description="As in the mirror.")
    promotion: Promotion | None = Field(
        default=None, description="The failover of this mirror (null: it mirrors)."
    )
    failback: str | None = Field(
        default=None,
        description="For a reverse mirror created by a failback: what the failback kept, and where.",
    )


class Promotion(_Out):
    """A mirror's failover: the destination repository is writable, mirroring into it stopped."""

    promoted_at: str = Field(json_schema_extra={"format": "date-time"})
    forced: bool
    source_reachable: bool
    heads: dict[str, str] = Field(description='Destination heads ("branch:NAME", "tag:NAME") at promotion.')
    source_heads: dict[str, str] = Field(description="Source heads last seen when promoting.")
    note: str | None = Field(description="What a failback kept (null: no failback yet).")
    failback_mirror_id: str | None = Field(description="The reverse mirror a failback created.")


class PromoteRequest(_In):
    force: bool = Field(
        default=False, description="Promote even though the source region is reachable and the mirror runs."
    )


class FailbackRequest(_In):
    mode: Mode | None = Field(
        default=None, description="Mode of the reverse mirror (default: this mirror's)."
    )


class FailbackResponse(_Out):
    reverse_mirror: Mirror
    kept: dict[str, str] = Field(
        description='Old source ref ("branch:NAME") -> the failback branch keeping it.'
    )
    note: str


MirrorStatus.model_rebuild()

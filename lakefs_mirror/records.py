"""The mirror records: the values :class:`~lakefs_mirror.db.MirrorsDB` stores and returns.

Plain frozen dataclasses (:class:`Mirror`, :class:`MirrorStatus`, :class:`Lease`), the closed value
sets and limits of their fields, and the checks that guard them; every check raises
:class:`~lakefs_core.errors.BadInputError` naming the field. No database code: how a record maps to
table rows is :mod:`lakefs_mirror.db_schema`'s business.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from lakefs_core.errors import BadInputError

MirrorMode = Literal["native", "active"]
StatusKind = Literal["branch", "tag"]
MIRROR_MODES: tuple[str, ...] = get_args(MirrorMode)
STATUS_KINDS: tuple[str, ...] = get_args(StatusKind)
DEFAULT_BRANCH_FILTER: tuple[str, ...] = ("*",)
MAX_BRANCH_FILTER = 100
MAX_GLOB_LENGTH = 256


def new_mirror_id() -> str:
    """A fresh mirror id: 32 lower-case hex digits (a random UUID4)."""
    return uuid.uuid4().hex


def check_branch_filter(value: object, field: str = "branch_filter") -> tuple[str, ...]:
    """A non-empty list of 1..100 fnmatch globs, each 1..256 characters without NUL."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise BadInputError("must be a list of glob patterns", field=field)
    globs = tuple(value)
    if not 1 <= len(globs) <= MAX_BRANCH_FILTER:
        raise BadInputError(f"must hold 1 to {MAX_BRANCH_FILTER} glob patterns", field=field)
    for i, glob in enumerate(globs):
        if not isinstance(glob, str) or not 1 <= len(glob) <= MAX_GLOB_LENGTH or "\0" in glob:
            raise BadInputError(
                f"must be a string of 1 to {MAX_GLOB_LENGTH} characters without NUL", field=f"{field}.{i}"
            )
    return globs


def check_choice(value: object, choices: Sequence[str], field: str) -> str:
    """``value`` if it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise BadInputError(f"must be one of {', '.join(choices)}", field=field)
    return value


def check_bool(value: object, field: str) -> bool:
    """``value`` if it is a ``bool``."""
    if not isinstance(value, bool):
        raise BadInputError("must be true or false", field=field)
    return value


def check_text(value: object, field: str, max_length: int) -> str:
    """``value`` if it is a string of 1 to ``max_length`` characters without NUL."""
    if not isinstance(value, str) or not 1 <= len(value) <= max_length or "\0" in value:
        raise BadInputError(f"must be a string of 1 to {max_length} characters without NUL", field=field)
    return value


@dataclass(frozen=True)
class Mirror:
    """One mirror: ``source_repo`` in ``source_region`` -> repository ``name`` in ``region``."""

    id: str
    source_repo: str
    source_region: str
    name: str
    region: str
    storage_namespace: str
    branch_filter: tuple[str, ...]
    paused: bool
    mode: MirrorMode
    mirror_tags: bool
    created_at: datetime
    updated_at: datetime
    resync_requested_at: datetime | None
    version: int


@dataclass(frozen=True)
class MirrorStatus:
    """How far one branch (or tag, ``kind="tag"``) of a mirror got; written by the engine.

    ``branch`` is the branch or tag name. Heads are commit ids (``None``: not known yet). ``candidate``
    is the source commit being validated. ``lag_seconds`` is the freshness lag of the mirror head.
    """

    mirror_id: str
    kind: StatusKind
    branch: str
    source_head: str | None = None
    mirror_head: str | None = None
    candidate: str | None = None
    missing_objects: int = 0
    missing_ranges: int = 0
    external_objects: int = 0
    lag_seconds: float | None = None
    last_promotion_at: datetime | None = None
    last_checked_at: datetime | None = None
    last_error: str | None = None


# Names the engine uses for the same records.
MirrorRecord = Mirror
StatusRow = MirrorStatus


@dataclass(frozen=True)
class Lease:
    """Who leads a region's mirroring, until when."""

    region: str
    holder: str
    expires_at: datetime


@dataclass(frozen=True)
class Promotion:
    """A mirror's failover (:mod:`lakefs_mirror.failover`): its destination repository was made
    writable at ``heads`` (``"branch:NAME"`` / ``"tag:NAME"`` -> commit id, every one fully
    validated) while the source was last seen at ``source_heads``; mirroring into it stopped."""

    mirror_id: str
    promoted_at: datetime
    forced: bool
    source_reachable: bool
    heads: dict[str, str]
    source_heads: dict[str, str]
    note: str | None = None  # what a failback kept (lakefs_mirror.failover.failback)
    failback_mirror_id: str | None = None  # the reverse mirror a failback created

"""The tables of the mirrors database and how records map to their rows.

Defines the SQLAlchemy tables ``mirrors``, ``mirror_status``, ``leases``, ``mirror_gc_applied`` and
``mirror_promotions`` (layout in :mod:`lakefs_mirror.db`) on :data:`schema_meta`, the time encoding of their
columns (integer microseconds since the Unix epoch, read back as aware UTC :class:`~datetime.datetime`), and
the conversion of result rows to :mod:`lakefs_mirror.records`. Queries and transactions are
:class:`~lakefs_mirror.db.MirrorsDB`'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from lakefs_core.errors import BadInputError
from lakefs_mirror.records import Mirror, MirrorMode, MirrorStatus, Promotion, StatusKind

MAX_REF_NAME = 512  # branch or tag name in mirror_status
MAX_ERROR_TEXT = 4000  # last_error (and a promotion's note) is truncated to this many characters

schema_meta = MetaData()

mirrors_table = Table(
    "mirrors",
    schema_meta,
    Column("id", String(64), primary_key=True),
    Column("source_repo", String(63), nullable=False),
    Column("source_region", String(63), nullable=False),
    Column("name", String(63), nullable=False),
    Column("region", String(63), nullable=False),
    Column("storage_namespace", Text, nullable=False),
    Column("branch_filter", Text, nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("mode", String(16), nullable=False),
    Column("mirror_tags", Boolean, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("resync_requested_at", BigInteger, nullable=True),
    Column("version", Integer, nullable=False),
    UniqueConstraint("region", "name", name="mirrors_region_name_key"),
)

status_table = Table(
    "mirror_status",
    schema_meta,
    Column("mirror_id", String(64), ForeignKey("mirrors.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(8), nullable=False),
    Column("branch", String(MAX_REF_NAME), nullable=False),
    Column("source_head", Text, nullable=True),
    Column("mirror_head", Text, nullable=True),
    Column("candidate", Text, nullable=True),
    Column("missing_objects", BigInteger, nullable=False),
    Column("missing_ranges", BigInteger, nullable=False),
    Column("external_objects", BigInteger, nullable=False),
    Column("lag_seconds", Double, nullable=True),
    Column("last_promotion_at", BigInteger, nullable=True),
    Column("last_checked_at", BigInteger, nullable=True),
    Column("last_error", Text, nullable=True),
    PrimaryKeyConstraint("mirror_id", "kind", "branch", name="mirror_status_pkey"),
)

leases_table = Table(
    "leases",
    schema_meta,
    Column("region", String(63), primary_key=True),
    Column("holder", String(256), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)

# Source GC sweeps a mirror has applied to its own namespace (lakefs_mirror.gc_apply): one row per
# (mirror, source run), so a sweep finished out of run order is still applied once. A new table (not
# a column) so existing databases gain it through CREATE TABLE IF NOT EXISTS, without a migration.
gc_applied_table = Table(
    "mirror_gc_applied",
    schema_meta,
    Column("mirror_id", String(64), ForeignKey("mirrors.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", String(128), nullable=False),
    Column("applied_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("mirror_id", "run_id", name="mirror_gc_applied_pkey"),
)

# A promoted mirror (failover, lakefs_mirror.failover): the destination repository was made writable
# and the mirror stopped. ``heads`` and ``source_heads`` are JSON objects {"branch:NAME": commit id}
# (what the destination held and what the source was last seen at). A new table, for the same reason.
promotions_table = Table(
    "mirror_promotions",
    schema_meta,
    Column("mirror_id", String(64), ForeignKey("mirrors.id", ondelete="CASCADE"), primary_key=True),
    Column("promoted_at", BigInteger, nullable=False),
    Column("forced", Boolean, nullable=False),
    Column("source_reachable", Boolean, nullable=False),
    Column("heads", Text, nullable=False),
    Column("source_heads", Text, nullable=False),
    Column("note", Text, nullable=True),
    Column("failback_mirror_id", String(64), nullable=True),
)


# -- times --------------------------------------------------------------------------------------------


def to_us(when: datetime | float) -> int:
    """``when`` (an aware datetime or Unix seconds) as integer microseconds since the epoch."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise BadInputError("datetimes must be time-zone aware", field="now")
        delta = when - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return round(float(when) * 1_000_000)


def from_us(us: int | None) -> datetime | None:
    """The aware UTC datetime of a stored time (``None`` stays ``None``)."""
    if us is None:
        return None
    return datetime.fromtimestamp(us // 1_000_000, tz=UTC).replace(microsecond=us % 1_000_000)


def now_us(now: datetime | float | None) -> int:
    """:func:`to_us` of ``now``, or of the current time when ``None``."""
    return to_us(time.time() if now is None else now)


# -- rows -> records ----------------------------------------------------------------------------------


def mirror_from_row(row: Mapping[Any, Any]) -> Mirror:
    """The :class:`Mirror` of a ``mirrors`` row."""
    created = from_us(row["created_at"])
    updated = from_us(row["updated_at"])
    assert created is not None and updated is not None
    return Mirror(
        id=row["id"],
        source_repo=row["source_repo"],
        source_region=row["source_region"],
        name=row["name"],
        region=row["region"],
        storage_namespace=row["storage_namespace"],
        branch_filter=tuple(json.loads(row["branch_filter"])),
        paused=bool(row["paused"]),
        mode=cast(MirrorMode, row["mode"]),
        mirror_tags=bool(row["mirror_tags"]),
        created_at=created,
        updated_at=updated,
        resync_requested_at=from_us(row["resync_requested_at"]),
        version=int(row["version"]),
    )


def promotion_from_row(row: Mapping[Any, Any]) -> Promotion:
    """The :class:`Promotion` of a ``mirror_promotions`` row."""
    at = from_us(row["promoted_at"])
    assert at is not None
    return Promotion(
        mirror_id=row["mirror_id"],
        promoted_at=at,
        forced=bool(row["forced"]),
        source_reachable=bool(row["source_reachable"]),
        heads=dict(json.loads(row["heads"])),
        source_heads=dict(json.loads(row["source_heads"])),
        note=row["note"],
        failback_mirror_id=row["failback_mirror_id"],
    )


def status_from_row(row: Mapping[Any, Any]) -> MirrorStatus:
    """The :class:`MirrorStatus` of a ``mirror_status`` row."""
    return MirrorStatus(
        mirror_id=row["mirror_id"],
        kind=cast(StatusKind, row["kind"]),
        branch=row["branch"],
        source_head=row["source_head"],
        mirror_head=row["mirror_head"],
        candidate=row["candidate"],
        missing_objects=int(row["missing_objects"]),
        missing_ranges=int(row["missing_ranges"]),
        external_objects=int(row["external_objects"]),
        lag_seconds=None if row["lag_seconds"] is None else float(row["lag_seconds"]),
        last_promotion_at=from_us(row["last_promotion_at"]),
        last_checked_at=from_us(row["last_checked_at"]),
        last_error=row["last_error"],
    )


def status_row(status: MirrorStatus) -> dict[str, Any]:
    """The ``mirror_status`` row of ``status`` (its fields already checked): times in microseconds,
    the error text without NULs and truncated to :data:`MAX_ERROR_TEXT`."""
    return {
        "mirror_id": status.mirror_id,
        "kind": status.kind,
        "branch": status.branch,
        "source_head": status.source_head,
        "mirror_head": status.mirror_head,
        "candidate": status.candidate,
        "missing_objects": status.missing_objects,
        "missing_ranges": status.missing_ranges,
        "external_objects": status.external_objects,
        "lag_seconds": status.lag_seconds,
        "last_promotion_at": None if status.last_promotion_at is None else to_us(status.last_promotion_at),
        "last_checked_at": None if status.last_checked_at is None else to_us(status.last_checked_at),
        "last_error": (
            None if status.last_error is None else status.last_error.replace("\0", "\\0")[:MAX_ERROR_TEXT]
        ),
    }

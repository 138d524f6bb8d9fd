"""Value types shared by the committed-data layer.

A :class:`ValueRecord` is one graveler record: ``key`` (object path bytes), ``identity`` (raw
32-byte entry identity for ranges) and ``data`` (the ``Entry`` protobuf bytes, carried verbatim from
staging into ranges and never re-encoded). A :class:`Change` is one element of a sorted change
stream; ``value=None`` is a tombstone. A :class:`RangeInfo` describes one range as its metarange
record does. The two record types live in the pure format layer and are re-exported here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from lakefs_core.format.records import RangeInfo, ValueRecord

__all__ = ["Change", "DiffRecord", "DiffType", "MergeStrategy", "RangeInfo", "ValueRecord"]


class Change(NamedTuple):
    """A change to apply: ``value`` is the new record for ``key``, or ``None`` to delete it.

    A named tuple, as :class:`ValueRecord`: bulk writes build one per record, and a tuple is
    built in about half the time of a frozen dataclass."""

    key: bytes
    value: ValueRecord | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


class DiffType(enum.Enum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class DiffRecord:
    """One difference between ``left`` and ``right`` at ``key``."""

    type: DiffType
    key: bytes
    left: ValueRecord | None
    right: ValueRecord | None


class MergeStrategy(enum.Enum):
    """How a three-way merge resolves keys changed differently on both sides."""

    NONE = "none"  # report conflicts (MergeConflictError with the keys)
    SOURCE_WINS = "source-wins"
    DEST_WINS = "dest-wins"

"""Three-way merge of metaranges (source into destination, relative to their base).

Shortcuts first: source equal to destination or to base means nothing to merge
(:class:`~lakefs_core.errors.NoChangesError`); destination equal to base fast-forwards to the
source metarange without writing anything.

Otherwise both sides are diffed against the base (each diff skips identical ranges) and the two
sorted diffs are joined by key. A key changed only by the source becomes a change to apply to the
destination; a key changed only by the destination stays; a key changed by both to the same result
is fine; a key changed by both differently is a conflict, resolved by the strategy: ``none`` raises
:class:`~lakefs_core.errors.MergeConflictError` listing every conflicting key (nothing is written),
``source-wins`` takes the source, ``dest-wins`` keeps the destination. The changes are applied to
the destination metarange, which reuses every destination range the source did not touch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.diff import diff
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change, DiffRecord, MergeStrategy
from lakefs_core.committed.tables import TableStore
from lakefs_core.errors import MergeConflictError, NoChangesError
from lakefs_core.format.splitter import SplitPolicy


@dataclass(frozen=True)
class MergeResult:
    metarange_id: str
    fast_forward: bool
    changes_applied: int
    conflicts_resolved: int


def _same_outcome(a: DiffRecord, b: DiffRecord) -> bool:
    if a.right is None or b.right is None:
        return a.right is None and b.right is None
    return a.right.identity == b.right.identity


async def _next(it: AsyncIterator[DiffRecord]) -> DiffRecord | None:
    return await anext(it, None)


async def merge_changes(
    base: MetaRange, source: MetaRange, dest: MetaRange, strategy: MergeStrategy
) -> tuple[list[Change], int]:
    """The changes that bring ``dest`` up to date with ``source``, and the conflicts resolved."""
    src_it, dst_it = diff(base, source), diff(base, dest)
    s, d = await _next(src_it), await _next(dst_it)
    changes: list[Change] = []
    conflicts: list[bytes] = []
    resolved = 0
    while s is not None:
        if d is not None and d.key < s.key:
            d = await _next(dst_it)
            continue
        if d is not None and d.key == s.key:
            if not _same_outcome(s, d):
                if strategy is MergeStrategy.NONE:
                    conflicts.append(s.key)
                elif strategy is MergeStrategy.SOURCE_WINS:
                    changes.append(Change(s.key, s.right))
                    resolved += 1
                else:
                    resolved += 1
            d = await _next(dst_it)
        else:
            changes.append(Change(s.key, s.right))
        s = await _next(src_it)
    if conflicts:
        raise MergeConflictError(conflicts)
    return changes, resolved


async def merge(
    tables: TableStore,
    base: MetaRange,
    source: MetaRange,
    dest: MetaRange,
    strategy: MergeStrategy = MergeStrategy.NONE,
    *,
    policy: SplitPolicy | None = None,
) -> MergeResult:
    if source.id in (dest.id, base.id):
        raise NoChangesError("nothing to merge: the destination already contains the source")
    if base.id == dest.id:
        return MergeResult(source.id, fast_forward=True, changes_applied=0, conflicts_resolved=0)
    changes, resolved = await merge_changes(base, source, dest, strategy)
    result = await apply_changes(tables, dest, changes, policy=policy)
    return MergeResult(result.metarange_id, False, result.effective_changes, resolved)

"""The change feed of a branch: one row per changed path for each commit on its first-parent chain.

Rows (:data:`COLUMNS`): the commit id, its first parent, the path, ``added``/``changed``/``removed``,
the entry's address and size (the removed entry's for ``removed``), the commit's time. A commit's
rows are the committed diff of its first parent to it (:func:`lakefs_core.committed.diff.diff`, in
path order); a merge commit's rows are what the merge brought in along the first parent.

Offsets are ``{"commit": <id>}``: everything up to and including that commit was delivered. A
stream resumes from its checkpoint's offset; the commits after it are found by walking the
first-parent chain back from the branch head to it (at most ``max_commits`` per batch). An offset
that is no longer on the branch's first-parent chain (the branch was reset) is an error, never a
silent gap. A batch read over ``(startingCommit, endingCommit]`` gives the same rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime

from lakefs_core.compute.partition import stream_async
from lakefs_core.errors import BadInputError
from lakefs_core.spark.options import CoreRef

COLUMNS = (
    ("commit_id", "string"),
    ("parent", "string"),
    ("path", "string"),
    ("change_type", "string"),
    ("address", "string"),
    ("size", "bigint"),
    ("commit_time", "timestamp"),
)
SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
MAX_WALK = 100_000  # commits walked back from a head before giving up on finding an offset


@dataclass(frozen=True)
class CommitStep:
    """One commit of the feed (picklable: a task's partition)."""

    commit_id: str
    parent: str  # "" for a root commit
    metarange: str
    parent_metarange: str
    time: datetime


async def _chain(core: CoreRef, repo: str, start: str | None, end: str, limit: int) -> list[CommitStep]:
    """Commits after ``start`` up to ``end`` (a ref) on the first-parent chain, oldest first, at most
    ``limit`` (the oldest ones)."""
    async with core.open() as opened:
        g = opened.graveler
        record = await g.repository(repo)
        commit = (await g.resolve(record, end)).commit
        steps: list[CommitStep] = []
        while commit.id != start:
            if not commit.parents:
                if start is not None:
                    raise BadInputError(
                        f"commit {start} is not on the first-parent chain of {end!r} (was the branch reset?)",
                        field="startingCommit",
                    )
                steps.append(CommitStep(commit.id, "", commit.metarange_id, "", commit.creation_date))
                break
            parent = await g.get_commit_by_id(repo, commit.parents[0])
            steps.append(CommitStep(commit.id, parent.id, commit.metarange_id, parent.metarange_id,
                                    commit.creation_date))  # fmt: skip
            if len(steps) > MAX_WALK:
                raise BadInputError(f"more than {MAX_WALK} commits after {start}", field="startingCommit")
            commit = parent
    steps.reverse()
    return steps[:limit]


def commits_after(core: CoreRef, repo: str, start: str | None, end: str, limit: int) -> list[CommitStep]:
    return asyncio.run(_chain(core, repo, start, end, limit))


def head_of(core: CoreRef, repo: str, ref: str) -> str:
    async def head() -> str:
        async with core.open() as opened:
            return (await opened.graveler.get_commit(repo, ref)).id

    return asyncio.run(head())


def change_rows(core: CoreRef, repo: str, step: CommitStep) -> Iterator[tuple[object, ...]]:
    """A task: the rows of one commit (the diff of its first parent to it)."""
    from lakefs_core.committed.diff import diff
    from lakefs_core.committed.model import DiffType
    from lakefs_core.format.records import decode_entry

    kinds = {DiffType.ADDED: "added", DiffType.CHANGED: "changed", DiffType.REMOVED: "removed"}

    async def rows() -> AsyncIterator[tuple[object, ...]]:
        async with core.open() as opened:
            g = opened.graveler
            record = await g.repository(repo)
            left = await g.metarange(record, step.parent_metarange)
            right = await g.metarange(record, step.metarange)
            async for change in diff(left, right):
                value = change.right if change.type is not DiffType.REMOVED else change.left
                entry = decode_entry(value.data) if value is not None else None
                yield (
                    step.commit_id, step.parent or None, change.key.decode("utf-8", "surrogateescape"),
                    kinds[change.type], entry.address if entry else None, entry.size if entry else None,
                    step.time,
                )  # fmt: skip

    # streamed on one private loop: a commit of millions of paths never sits in memory
    yield from stream_async(rows)

"""Annotate (lakectl's ``annotate``, a blame): the last commit that changed each of some objects.

:func:`annotate` walks the first-parent history of a ref, newest first, and diffs each commit
against its first parent (the committed layer's diff skips identical ranges, so a commit costs what
it changed); an object is attributed to the first commit whose diff names it, and the walk stops
once every object is. An object present since a root commit is attributed to that commit. A merge
commit is diffed against its first parent, so what a merge brought in is attributed to the merge
(first-parent blame, as ``lakectl annotate --first-parent``).

It reads through the :class:`~lakefs_core.repos.graveler.Graveler` facade (log, diff) and writes
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakefs_core.refs.model import Commit
    from lakefs_core.repos.graveler import Graveler


async def annotate(g: Graveler, repo_id: str, ref: str, keys: Iterable[bytes]) -> dict[bytes, Commit]:
    """Key -> the last commit (first-parent) reachable from ``ref`` that changed it; a key that no
    commit of that history holds is left out."""
    remaining = set(keys)
    found: dict[bytes, Commit] = {}
    async for commit in g.log(repo_id, ref):
        if not remaining:
            break
        if not commit.parents:
            found.update(dict.fromkeys(remaining, commit))
            break
        async for change in g.diff(repo_id, commit.parents[0], commit.id):
            if change.key in remaining:
                found[change.key] = commit
                remaining.discard(change.key)
    return found

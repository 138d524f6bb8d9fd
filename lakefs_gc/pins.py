"""Pins: commits GC must treat as branch heads whatever their age (gc.md §3d).

Contract:

- :class:`PinSource` is the one seam: ``await source.pinned_commits(repo_id) -> set[str]`` answers
  the commit ids pinned for a repository NOW. The mark reads it once (recorded in ``run.json``);
  re-verification during a sweep reads it again. A source that cannot answer RAISES (an unreachable
  mirrors database aborts the run): an empty answer means "no pins", never "don't know".
- :class:`StaticPins`: a fixed set (a spark-submit child gets the pins its parent read, as job
  arguments); :class:`CombinedPins`: the union of several sources (mirror pins plus operator pins).
- :class:`MirrorPins`: the mirrors database's ``mirror_head`` and ``candidate`` of every mirror of
  this source repository in every destination region. It talks to the database through the duck-typed
  :class:`MirrorsPinReader` (``lakefs_mirror.db.MirrorsDB.pinned_commits``), so ``lakefs_gc`` never
  imports ``lakefs_mirror`` except in :func:`open_mirror_pins`, which opens that database by URL.

Every id is checked to be a commit id (hostile input: a status row may hold anything); a malformed
one raises :class:`~lakefs_core.errors.CorruptDataError` rather than being dropped, since dropping a
pin could expire a mirror head's objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, runtime_checkable

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.repos.graveler import is_commit_id

__all__ = ["CombinedPins", "MirrorPins", "MirrorsPinReader", "PinSource", "StaticPins", "open_mirror_pins"]


@runtime_checkable
class PinSource(Protocol):
    """Commits pinned for a repository right now (raises when it cannot tell)."""

    async def pinned_commits(self, repo_id: str) -> set[str]: ...


def check_pins(pins: Iterable[object], *, where: str) -> set[str]:
    """``pins`` as a set of commit ids; :class:`CorruptDataError` naming ``where`` on a bad one."""
    out: set[str] = set()
    for pin in pins:
        if not isinstance(pin, str) or not is_commit_id(pin):
            raise CorruptDataError(f"pinned commit {str(pin)[:80]!r} is not a commit id", file=where)
        out.add(pin)
    return out


class StaticPins:
    """A fixed set of pinned commit ids, the same for every repository asked."""

    def __init__(self, pins: Iterable[str] = ()) -> None:
        items = list(pins)
        for pin in items:
            if not isinstance(pin, str) or not is_commit_id(pin):
                raise BadInputError(f"{str(pin)[:80]!r} is not a commit id", field="pins")
        self._pins = frozenset(items)

    async def pinned_commits(self, repo_id: str) -> set[str]:
        return set(self._pins)


class CombinedPins:
    """The union of several sources; any source failing fails the whole answer."""

    def __init__(self, *sources: PinSource) -> None:
        self._sources = sources

    async def pinned_commits(self, repo_id: str) -> set[str]:
        out: set[str] = set()
        for source in self._sources:
            out |= await source.pinned_commits(repo_id)
        return out


class MirrorsPinReader(Protocol):
    """What GC needs of the mirrors database (``lakefs_mirror.db.MirrorsDB``)."""

    async def pinned_commits(self, source_repo: str, *, source_region: str | None = None) -> set[str]: ...


class MirrorPins:
    """Every ``mirror_head`` and ``candidate`` of the mirrors of a source repository (all regions).

    ``source_region`` narrows to mirrors whose source is this region's repository (two regions may
    hold repositories of the same name); ``None`` takes every mirror of that name (retains more).
    """

    def __init__(
        self,
        db: MirrorsPinReader,
        *,
        source_region: str | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._db = db
        self._source_region = source_region
        self._close = close

    async def aclose(self) -> None:
        """Close the database when this source opened it (:func:`open_mirror_pins`)."""
        if self._close is not None:
            close, self._close = self._close, None
            await close()

    async def pinned_commits(self, repo_id: str) -> set[str]:
        pins = await self._db.pinned_commits(repo_id, source_region=self._source_region)
        return check_pins(pins, where=f"mirrors database (mirrors of {repo_id!r})")


async def open_mirror_pins(url: str, *, source_region: str | None = None) -> MirrorPins:
    """Open the mirrors database at ``url`` (no table creation) as a pin source; ``aclose()`` it.
    The only import of ``lakefs_mirror`` in ``lakefs_gc``."""
    from lakefs_mirror.db import MirrorsDB

    db = await MirrorsDB.open(url, create=False)
    return MirrorPins(db, source_region=source_region, close=db.close)

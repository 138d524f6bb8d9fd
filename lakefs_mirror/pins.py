"""The mirror's pin source for retention GC (gc.md §3d): mirrors pin their source's commits.

Every ``mirror_head`` and ``candidate`` of every mirror of a source repository, in every destination
region (paused mirrors included), is a commit GC on the source must treat as a branch head, or a
mirror could be left pointing at swept objects. GC opens this source by name through its registry
(the entry point ``mirror = "lakefs_mirror.pins:open_pins"`` of group ``lakefs_open.pin_sources``,
declared in ``pyproject.toml``); it checks every id the source answers. The protocol is GC's
published :class:`lakefs_gc.published.PinSource`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lakefs_mirror.db import MirrorsDB

__all__ = ["MirrorPins", "open_pins"]


class MirrorPins:
    """Every ``mirror_head`` and ``candidate`` of the mirrors of a source repository (all regions).

    ``source_region`` narrows to mirrors whose source is this region's repository (two regions may
    hold repositories of the same name); ``None`` takes every mirror of that name (retains more).
    A database that cannot answer raises: an empty answer means "no pins", never "don't know".
    """

    def __init__(
        self,
        db: MirrorsDB,
        *,
        source_region: str | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._db = db
        self._source_region = source_region
        self._close = close

    async def pinned_commits(self, repo_id: str) -> set[str]:
        return await self._db.pinned_commits(repo_id, source_region=self._source_region)

    async def aclose(self) -> None:
        """Close the database when this source opened it (:func:`open_pins`)."""
        if self._close is not None:
            close, self._close = self._close, None
            await close()


async def open_pins(url: str, *, source_region: str | None = None) -> MirrorPins:
    """Open the mirrors database at ``url`` (no table creation) as a pin source; ``aclose()`` it."""
    db = await MirrorsDB.open(url, create=False)
    return MirrorPins(db, source_region=source_region, close=db.close)

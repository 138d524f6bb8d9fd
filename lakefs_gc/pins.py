"""Pins: commits GC must treat as branch heads whatever their age (gc.md §3d).

Contract:

- :class:`PinSource` is the one seam: ``await source.pinned_commits(repo_id) -> set[str]`` answers
  the commit ids pinned for a repository NOW. The mark reads it once (recorded in ``run.json``);
  re-verification during a sweep reads it again. A source that cannot answer RAISES (an unreachable
  mirrors database aborts the run): an empty answer means "no pins", never "don't know".
- :class:`StaticPins`: a fixed set (a spark-submit child gets the pins its parent read, as job
  arguments); :class:`CombinedPins`: the union of several sources (mirror pins plus operator pins).
- Sources of other packages are opened by name from a registry: :func:`open_pin_source` finds the
  opener an installed package declares in the entry points group :data:`PIN_SOURCES_GROUP`
  (``lakefs_open.pin_sources``); a configured source that is not installed is a
  :class:`~lakefs_core.errors.StartupError`. The mirror provides ``mirror`` (its mirrors database's
  ``mirror_head`` and ``candidate`` of every mirror of the source repository,
  :func:`open_mirror_pins`), so ``lakefs_gc`` never imports ``lakefs_mirror``; the protocol is
  published to it by :mod:`lakefs_gc.published`.

Every id a registry's source answers is checked to be a commit id (:class:`CheckedPins`; hostile
input: a status row may hold anything); a malformed one raises
:class:`~lakefs_core.errors.CorruptDataError` rather than being dropped, since dropping a pin could
expire a mirror head's objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from lakefs_core.errors import BadInputError, CorruptDataError, StartupError
from lakefs_core.repos.graveler import is_commit_id

__all__ = [
    "PIN_SOURCES_GROUP",
    "CheckedPins",
    "ClosablePinSource",
    "CombinedPins",
    "PinSource",
    "StaticPins",
    "open_mirror_pins",
    "open_pin_source",
    "pinned_now",
]


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


async def pinned_now(pins: PinSource | None, repo_id: str) -> set[str]:
    """What ``pins`` pins for ``repo_id`` now, every id checked (:func:`check_pins`: whatever
    answers is hostile input); the empty set without a source."""
    if pins is None:
        return set()
    return check_pins(await pins.pinned_commits(repo_id), where=f"pin source (pins of {repo_id!r})")


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


PIN_SOURCES_GROUP = "lakefs_open.pin_sources"


class ClosablePinSource(PinSource, Protocol):
    """A pin source this process opened (:func:`open_pin_source`): close it when done."""

    async def aclose(self) -> None: ...


class CheckedPins:
    """A source opened from a registry: every id it answers is checked (:func:`check_pins`)."""

    def __init__(self, name: str, source: ClosablePinSource) -> None:
        self.name = name
        self._source = source

    async def pinned_commits(self, repo_id: str) -> set[str]:
        pins = await self._source.pinned_commits(repo_id)
        return check_pins(pins, where=f"pin source {self.name!r} (pins of {repo_id!r})")

    async def aclose(self) -> None:
        await self._source.aclose()


def pin_source_opener(name: str) -> Callable[..., Awaitable[ClosablePinSource]]:
    """The opener an installed package registers for pin source ``name`` (entry point group
    :data:`PIN_SOURCES_GROUP`); :class:`StartupError` naming the group when none is installed."""
    found = [ep for ep in entry_points(group=PIN_SOURCES_GROUP) if ep.name == name]
    if not found:
        raise StartupError(
            f"pin source {name!r} is not installed (no entry point {name!r} in group {PIN_SOURCES_GROUP}; "
            "install the package that provides it)",
            key="pins",
        )
    try:
        opener: Callable[..., Awaitable[ClosablePinSource]] = found[0].load()
    except (ImportError, AttributeError) as e:
        raise StartupError(f"pin source {name!r} cannot be loaded: {e}", key="pins") from e
    return opener


async def open_pin_source(name: str, url: str, *, source_region: str | None = None) -> CheckedPins:
    """Open the pin source ``name`` at ``url`` (see :func:`pin_source_opener`); ``aclose()`` it."""
    opened = await pin_source_opener(name)(url, source_region=source_region)
    return CheckedPins(name, opened)


async def open_mirror_pins(url: str, *, source_region: str | None = None) -> CheckedPins:
    """The mirrors database at ``url`` as a pin source: every mirror's head and candidate of this
    source repository (``source_region``: only mirrors whose source is this region's repository;
    ``None`` takes every mirror of that name, retaining more). Opened through the registry
    (``mirror``, provided by ``lakefs_mirror``), so GC never imports the mirror."""
    return await open_pin_source("mirror", url, source_region=source_region)

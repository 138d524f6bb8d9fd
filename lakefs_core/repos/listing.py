"""Listing a ref's directory: the cursor walk, and the per-process cache of committed directories.

:func:`walk` reads the children of a directory (``prefix``, ``delimiter``) from a seekable entry
cursor: each key with no delimiter after the prefix is an object, every other key's common prefix
(``key`` up to and including the first delimiter after the prefix) is one child, reached once and
skipped by seeking past it (``<common prefix>`` + 1 in its last byte), never by reading the keys
under it. :meth:`~lakefs_core.repos.objects.Objects.list` pages through it with ``after``.

:class:`ListingCache` keeps the complete, sorted children of directories of COMMITTED trees, keyed by
(metarange id, prefix, delimiter). A metarange is content-addressed and immutable, so an entry is
never stale: eviction (least recently used) is the only way one leaves. A listing uses it only when
the staged view adds nothing in the listing's key range (a commit id or a tag has no staging; on a
branch every staging token, live and sealed, has no record in ``[start, end)``): a staged write or a
tombstone under the prefix makes that listing walk the cursors again, and a commit names a new
metarange, hence new keys. A page from an entry is a bisect (``after``) and a slice (``amount``),
with exactly the objects, common prefixes, ``has_more`` and ``next_after`` of the walk.

Bounds: a directory with more than ``max_children`` children (:data:`DEFAULT_MAX_CHILDREN`) is not
cached (remembered as such, so it is not walked twice to find out) and falls back to the walk; the
entries together hold at most ``total_children`` children (the core's ``listing_cache_children``,
by default :data:`DEFAULT_TOTAL_CHILDREN`, about 60 MB at the worst; 0 turns the cache off).
Concurrent first listings of one directory build it once (single flight); a failed or cancelled
build leaves nothing behind, and whoever waited on it walks itself. The cache lives in one
:class:`~lakefs_core.repos.context.RepoContext`, used on its event loop only: no locks.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lakefs_core.format.records import ValueRecord
from lakefs_core.refs.staging import RecordCursor
from lakefs_core.repos.object_values import ListPage, ObjectStat

__all__ = [
    "DEFAULT_MAX_CHILDREN",
    "DEFAULT_TOTAL_CHILDREN",
    "Children",
    "ListingCache",
    "walk",
]

# An object child (its decoded ObjectStat) is about 600 bytes (tracemalloc), a common prefix less:
# 100,000 children are 60 MB at most. The core's configuration sets it (listing_cache_children).
DEFAULT_TOTAL_CHILDREN = 100_000
# A bigger directory is walked each time: building it would cost a one-page listing a walk of the
# whole directory, and one entry would crowd out the many small ones.
DEFAULT_MAX_CHILDREN = 10_000


@dataclass(frozen=True)
class Children:
    """Children of a directory in key order: ``keys[i]`` is an object's key or a common prefix
    (ending with the delimiter); ``items[i]`` the common prefix decoded, or the object's record,
    replaced by its :class:`ObjectStat` the first time a page holds it (decoded once, and only
    when listed: a build decodes nothing)."""

    keys: list[bytes]
    items: list[ObjectStat | ValueRecord | str]
    more: bool  # the walk stopped at its limit with another child after the last

    def page(self, i: int, amount: int) -> ListPage:
        """The listing page of ``amount`` children from index ``i`` (exactly the walk's page)."""
        items, end = self.items, min(i + amount, len(self.keys))
        objects: list[ObjectStat] = []
        prefixes: list[str] = []
        for j in range(i, end):
            item = items[j]
            if isinstance(item, str):
                prefixes.append(item)
                continue
            if isinstance(item, ValueRecord):
                # no await in here: a concurrent page sees the record or its stat, both whole
                item = items[j] = ObjectStat.from_record(item)
            objects.append(item)
        has_more = i + amount < len(self.keys) or (self.more and i + amount == len(self.keys))
        last = self.keys[i + amount - 1].decode("utf-8", "backslashreplace") if has_more else ""
        return ListPage(objects, prefixes, has_more, last)

    def start_index(self, start: bytes) -> int | None:
        """Index of the first child a walk from ``start`` reaches, or None when ``start`` is
        strictly inside a common prefix (whether the walk reaches it depends on the keys under it,
        which are not kept)."""
        keys = self.keys
        i = bisect_left(keys, start)
        if i and isinstance(self.items[i - 1], str) and start.startswith(keys[i - 1]):
            return None  # keys[i-1] < start: start is past the common prefix but under it
        return i


async def walk(cursor: RecordCursor, prefix: bytes, delimiter: bytes, limit: int) -> Children:
    """At most ``limit`` children of the directory from the cursor's position (see the module
    docstring); the cursor reads only keys under ``prefix``, tombstones hidden."""
    keys: list[bytes] = []
    items: list[ObjectStat | ValueRecord | str] = []
    # A common prefix ends with the delimiter, whose last byte (UTF-8) is never 0xff: the key
    # after every key under it is the prefix with that byte incremented.
    delim_next = delimiter[:-1] + bytes((delimiter[-1] + 1,)) if delimiter else b""
    skip, dlen, count = len(prefix), len(delimiter), 0
    while (record := await cursor.next()) is not None:
        if count == limit:
            return Children(keys, items, True)
        count += 1
        key = record.key
        cut = key.find(delimiter, skip) if dlen else -1
        if cut < 0:
            keys.append(key)
            items.append(record)
            continue
        common = key[: cut + dlen]
        keys.append(common)
        items.append(common.decode("utf-8", "backslashreplace"))
        cursor.seek_ge(key[:cut] + delim_next)  # past every key under the common prefix
    return Children(keys, items, False)


_Key = tuple[str, bytes, bytes]  # (metarange id, prefix, delimiter)


class ListingCache:
    """Complete children of committed directories (see the module docstring), LRU-bounded by their
    total number of children."""

    def __init__(
        self, total_children: int = DEFAULT_TOTAL_CHILDREN, max_children: int = DEFAULT_MAX_CHILDREN
    ) -> None:
        self.total_children = total_children
        self.max_children = min(max_children, total_children)
        self._entries: OrderedDict[_Key, Children | None] = OrderedDict()
        self._used = 0
        self._inflight: dict[_Key, asyncio.Future[Children | None]] = {}
        self.builds = 0  # directories walked to build an entry (tests and benchmarks read these)
        self.waits = 0  # listings that waited for another one's build of their directory

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used(self) -> int:
        """The children the entries hold (a directory too big to keep counts 1, as an empty one)."""
        return self._used

    async def children(
        self, key: _Key, open_cursor: Callable[[], Awaitable[RecordCursor]]
    ) -> Children | None:
        """The directory's complete children, walked from ``open_cursor()`` (a cursor over the
        committed tree from the directory's first key) on the first use; None when it has more
        than ``max_children`` (or a concurrent build of it failed), or the cache is off."""
        if self.max_children <= 0:
            return None
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        pending = self._inflight.get(key)
        if pending is not None:
            self.waits += 1
            return await asyncio.shield(pending)
        future: asyncio.Future[Children | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        built: Children | None = None
        try:
            self.builds += 1
            found = await walk(await open_cursor(), key[1], key[2], self.max_children)
            built = None if found.more else found
            self._keep(key, built)
        finally:
            future.set_result(built)  # a failed build: waiters get None and walk themselves
            del self._inflight[key]
        return built

    def _keep(self, key: _Key, entry: Children | None) -> None:
        self._entries[key] = entry
        self._used += _weight(entry)
        while self._used > self.total_children:
            _, victim = self._entries.popitem(last=False)
            self._used -= _weight(victim)


def _weight(entry: Children | None) -> int:
    return 1 if entry is None else max(1, len(entry.keys))

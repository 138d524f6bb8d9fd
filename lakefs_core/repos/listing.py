"""Listing a ref's directory: the cursor walk, and the per-process cache of committed directories.

:func:`walk` reads the children of a directory (``prefix``, ``delimiter``) from a seekable entry
cursor: each key with no delimiter after the prefix is an object, every other key's common prefix
(``key`` up to and including the first delimiter after the prefix) is one child, reached once and
skipped by seeking past it (``<common prefix>`` + 1 in its last byte), never by reading the keys
under it. :meth:`~lakefs_core.repos.objects.Objects.list` pages through it with ``after``.

:class:`ListingCache` keeps the sorted children of directories of COMMITTED trees, keyed by
(metarange id, prefix, delimiter). A metarange is content-addressed and immutable, so an entry is
never stale: eviction (least recently used) is the only way one leaves. A listing uses it only when
the staged view adds nothing in the listing's key range (a commit id or a tag has no staging; on a
branch every staging token, live and sealed, has no record in ``[start, end)``): a staged write or a
tombstone under the prefix makes that listing walk the cursors again, and a commit names a new
metarange, hence new keys. An entry holds the directory's children from its first one on, as far as
listings have read them: a page it holds is a bisect (``after``) and a slice (``amount``), with
exactly the objects, common prefixes, ``has_more`` and ``next_after`` of the walk; a page past them
walks on from the last child held (at least :data:`MIN_WALK` children, or to the directory's end)
and appends what it read, so a directory is walked once however it is paged, and a listing that
reads one page of a big directory walks that page only. An ``after`` strictly inside a common prefix
(not a key a listing answers) walks the cursors: whether the prefix is listed again depends on the
keys under it, which are not kept. Objects are kept as their records and decoded when first listed.

Bounds: an entry holds at most ``max_children`` children (:data:`DEFAULT_MAX_CHILDREN`): pages past
them walk the cursors, as without the cache; the entries together hold at most ``total_children``
(the core's ``listing_cache_children``, by default :data:`DEFAULT_TOTAL_CHILDREN`, about 60 MB at
the worst; 0 turns the cache off), each entry counting its children and one. One listing at a time
extends an entry (its ``asyncio.Lock``): concurrent first listings of a directory walk it once, the
others wait and read what it added. A walk appends its children only once it has all of them, with
no await between that and the page: a failed or cancelled walk adds nothing, and a page never sees
half of one. The cache lives in one :class:`~lakefs_core.repos.context.RepoContext`, used on its
event loop only: no thread locks.
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
    "MIN_WALK",
    "Children",
    "ListingCache",
    "walk",
]

# An object child (its decoded ObjectStat) is about 600 bytes (tracemalloc), a common prefix less:
# 100,000 children are 60 MB at most. The core's configuration sets it (listing_cache_children).
DEFAULT_TOTAL_CHILDREN = 100_000
# Children kept of one directory: pages past them walk the cursors (one huge directory would crowd
# out the many small ones).
DEFAULT_MAX_CHILDREN = 10_000
# A walk extending an entry reads at least this many children (unless the directory ends): a
# listing by small pages (max-keys=1) does not walk once per page.
MIN_WALK = 100


@dataclass(frozen=True)
class Children:
    """Children of a directory in key order: ``keys[i]`` is an object's key or a common prefix
    (ending with the delimiter); ``items[i]`` the common prefix decoded, or the object's record,
    replaced by its :class:`ObjectStat` the first time a page holds it (decoded once, and only
    when listed: a walk decodes nothing)."""

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
Opener = Callable[[bytes], Awaitable[RecordCursor]]  # a committed cursor from a key on


class _Entry:
    """A directory's children from its first on (all of them once ``children.more`` is False), and
    where a walk continues after the last; extended under ``lock``, by one listing at a time."""

    def __init__(self) -> None:
        self.children = Children([], [], True)
        self.resume = b""
        self.lock = asyncio.Lock()

    def serves(self, start: bytes, amount: int) -> tuple[bool, int | None]:
        """(whether the children known answer a page of ``amount`` from ``start``, its index)."""
        children = self.children
        i = children.start_index(start)
        return i is None or not children.more or i + amount <= len(children.keys), i


class ListingCache:
    """Children of committed directories (see the module docstring), LRU-bounded by their total."""

    def __init__(
        self,
        total_children: int = DEFAULT_TOTAL_CHILDREN,
        max_children: int = DEFAULT_MAX_CHILDREN,
        min_walk: int = MIN_WALK,
    ) -> None:
        self.total_children = total_children
        # an entry weighs its children and 1 (an empty one, or one a failed walk left, counts)
        self.max_children = min(max_children, total_children - 1)
        self.min_walk = max(1, min_walk)
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self._used = 0
        self.walks = 0  # walks that extended an entry (tests and benchmarks read these)
        self.waits = 0  # listings that waited for another one's walk of their directory

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used(self) -> int:
        """The children the entries hold, and 1 per entry."""
        return self._used

    async def page(self, key: _Key, start: bytes, amount: int, open_cursor: Opener) -> ListPage | None:
        """The page of ``amount`` children of the directory from ``start`` (exactly the walk's),
        walking (``open_cursor(from)``: a cursor over the committed tree from a key of the
        directory on) only the children not known yet; None when the cache cannot answer: the page
        lies past the first ``max_children`` children, ``start`` is inside a common prefix, or the
        cache is off."""
        if self.max_children <= 0:
            return None
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            self._grown(key, entry, 1)
        else:
            self._entries.move_to_end(key)
        served, i = entry.serves(start, amount)
        if not served:
            if entry.lock.locked():
                self.waits += 1
            async with entry.lock:  # another listing may be extending it: then see what it found
                served, i = await self._extend(key, entry, start, amount, open_cursor)
        return None if i is None or not served else entry.children.page(i, amount)

    async def _extend(
        self, key: _Key, entry: _Entry, start: bytes, amount: int, open_cursor: Opener
    ) -> tuple[bool, int | None]:
        """Walk on from the entry's end until it answers the page, or holds ``max_children``."""
        served, i = entry.serves(start, amount)
        while not served:
            known = entry.children
            room = self.max_children - len(known.keys)
            if room <= 0:
                return False, i
            # what the page needs (a page from past the end: the children up to it first), at least
            # a batch: a listing by small pages does not walk once per page
            want = max((i if i is not None else 0) + amount - len(known.keys), self.min_walk)
            found = await walk(await open_cursor(entry.resume), key[1], key[2], min(want, room))
            self.walks += 1
            known.keys.extend(found.keys)  # no await from here on: a page sees all of it or none
            known.items.extend(found.items)
            entry.children = Children(known.keys, known.items, found.more)
            if found.keys:
                entry.resume = _after(found.keys[-1], isinstance(found.items[-1], str))
            self._grown(key, entry, len(found.keys))
            served, i = entry.serves(start, amount)
        return served, i

    def _grown(self, key: _Key, entry: _Entry, added: int) -> None:
        if self._entries.get(key) is not entry:
            return  # evicted while it was walked: this listing's own now, counted nowhere
        self._used += added
        while self._used > self.total_children and len(self._entries) > 1:
            victim, held = self._entries.popitem(last=False)
            if held is entry:  # the one growing stays (it fits: max_children < total_children)
                self._entries[victim] = held
                continue
            self._used -= len(held.children.keys) + 1


def _after(child: bytes, common: bool) -> bytes:
    """The first key after every key of ``child``: past a common prefix (it ends with the delimiter,
    whose last byte is never 0xff), or just after an object's key."""
    return child[:-1] + bytes((child[-1] + 1,)) if common else child + b"\x00"

"""Reading the ``purged/<address>`` markers audited purges write (:mod:`.purge`): the check a read
does before returning an object's bytes, and the lookup a mirror does for its missing objects.
Imported by the read path, so it stays small (no pydantic, no purge records).

**Repositories that never purged pay (almost) nothing.** A purge first *announces* itself: it
writes the key ``purged`` of the repository (create-only; :func:`announce`) and writes its first
marker only :data:`ANNOUNCE_SECONDS` later. A reader trusts "this repository has no purge" for
:data:`READER_TRUST_SECONDS` (half of that), counted from BEFORE the KV read that told it so
(:meth:`MarkerReads.has_purges`: one scan every half second per process and repository). Why this
never answers "not purged" once a purge's markers are durable: a reader still trusting an answer
at time ``t`` started that read after ``t - READER_TRUST_SECONDS``; had it started before the
announcement was durable, ``t`` would be earlier than the announcement plus
``READER_TRUST_SECONDS``, and the markers came ``ANNOUNCE_SECONDS`` after it (both intervals are
measured on monotonic clocks, which run at the same rate in every process; the margin covers rate
error). So the reader's read saw the announcement, and it looks the marker up. Nothing else is
cached: once a repository has purges (the announcement stays until the repository is deleted),
every read looks its marker up. The announcement sorts just before the markers, so the same scan
also finds the markers of a repository purged before announcements existed.

**Concurrent reads share lookups** (:class:`MarkerReads`): a read finding no lookup of its
repository in flight does its own point read; reads arriving while one is in flight are answered
together by the NEXT lookup, which starts after all of them asked (never by the one in flight).

:func:`lookup_markers` answers "which of these addresses did a purge destroy": a point read per
address for short lists, one paged scan of the markers between the first and last key for long ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from lakefs_core.errors import BadInputError, NotFoundError, PreconditionFailedError
from lakefs_core.kv.base import Expect
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Repository
from lakefs_core.repos.context import HasContext, RepoContext

READER_TRUST_SECONDS = 0.5
ANNOUNCE_SECONDS = 1.0  # >= READER_TRUST_SECONDS, with a wide margin
POINT_READS = 64  # up to this many addresses are looked up one by one; more are merged with a scan
_YIELD_EVERY = 512
MAX_AUDIT_ID_SHOWN = 128  # a marker names an audit id (at most 128 characters when written)

# Partition -> when (monotonic) this process knew the repository's announcement durable.
_announced: dict[bytes, float] = {}


def _audit(raw: bytes) -> str:
    return raw[:MAX_AUDIT_ID_SHOWN].decode("utf-8", "replace")


async def announce(repos: HasContext, repo: Repository) -> None:
    """Make sure every reader looks markers up before this process writes one: write the
    announcement if it is missing, then wait until it has been durable for ``ANNOUNCE_SECONDS``
    (as this process knows it: the first purge of a repository in a process waits once)."""
    known = _announced.get(repo.partition)
    if known is None:
        with contextlib.suppress(PreconditionFailedError):  # present: durable since before now
            await repos.context.kv.set_if(repo.partition, kvkeys.PURGES_ANNOUNCED_KEY, b"1", Expect.ABSENT)
        known = _announced.setdefault(repo.partition, time.monotonic())
    remaining = known + ANNOUNCE_SECONDS - time.monotonic()
    if remaining > 0:
        await asyncio.sleep(remaining)


async def has_purges(ctx: RepoContext, repo: Repository) -> bool:
    """Whether ``repo`` announced a purge (or holds markers from before announcements): one scan."""
    start = kvkeys.PURGES_ANNOUNCED_KEY
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, start, page_size=1)) as items:  # type: ignore[type-var]
        async for item in items:
            return item.key.startswith(start)
    return False


async def any_marker(ctx: RepoContext, repo: Repository) -> bool:
    """Whether any purge ever marked an object of ``repo`` (one KV read)."""
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, kvkeys.PURGED_PREFIX, page_size=1)) as items:  # type: ignore[type-var]
        async for item in items:
            return item.key.startswith(kvkeys.PURGED_PREFIX)
    return False


async def lookup_markers(
    ctx: RepoContext, repo: Repository, addresses: Iterable[str], *, probe: bool = True
) -> dict[str, str]:
    """Relative address -> audit id, for those of ``addresses`` that a purge marked. ``probe``
    first asks whether the repository has any marker (one read: the common case costs only it)."""
    if probe and not await any_marker(ctx, repo):
        return {}
    wanted: dict[bytes, str] = {}
    for n, address in enumerate(addresses, 1):
        if n % _YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a daemon's loop keeps answering while a long list is keyed
        try:
            wanted[kvkeys.purged_key(address)] = address
        except BadInputError:
            continue  # not a name a marker can have: never purged
    if not wanted:
        return {}
    out: dict[str, str] = {}
    if len(wanted) <= POINT_READS:
        for key, address in wanted.items():
            try:
                out[address] = _audit(await ctx.kv.get(repo.partition, key))
            except NotFoundError:
                continue
        return out
    last = max(wanted)
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, min(wanted))) as markers:  # type: ignore[type-var]
        async for item in markers:
            if item.key > last:
                break
            hit = wanted.get(item.key)
            if hit is not None:
                out[hit] = _audit(item.value)
    return out


_Waiting = list[tuple[str, "asyncio.Future[str | None]"]]


class MarkerReads:
    """The marker check of reads (see the module docstring), per process and repository."""

    def __init__(self, repos: HasContext) -> None:
        self.ctx = repos.context
        self._purged: set[bytes] = set()  # partitions known to have purges (never forgotten)
        self._none_since: dict[bytes, float] = {}  # partition -> start of the read that saw none
        self._busy: dict[bytes, asyncio.AbstractEventLoop] = {}  # partition -> loop of its lookup
        self._waiting: dict[bytes, _Waiting] = {}
        self._drains: set[asyncio.Task[None]] = set()

    async def has_purges(self, repo: Repository) -> bool:
        """Whether reads of ``repo`` must look markers up (a fresh answer, or "no" trusted for at
        most ``READER_TRUST_SECONDS`` since the read that gave it started)."""
        partition = repo.partition
        if partition in self._purged:
            return True
        since = self._none_since.get(partition)
        started = time.monotonic()
        if since is not None and started - since < READER_TRUST_SECONDS:
            return False
        if await has_purges(self.ctx, repo):
            self._purged.add(partition)
            return True
        self._none_since[partition] = max(started, self._none_since.get(partition, started))
        return False

    async def audit_of(self, repo: Repository, relative: str) -> str | None:
        """The audit id of the purge that marked ``relative`` (None: none did)."""
        if not await self.has_purges(repo):
            return None
        loop = asyncio.get_running_loop()
        partition = repo.partition
        if self._busy.get(partition) is loop:  # a lookup is in flight: wait for the next one
            future: asyncio.Future[str | None] = loop.create_future()
            self._waiting.setdefault(partition, []).append((relative, future))
            return await future
        self._busy[partition] = loop
        try:
            found = await lookup_markers(self.ctx, repo, [relative], probe=False)
        finally:
            self._hand_over(repo, loop)
        return found.get(relative)

    def _hand_over(self, repo: Repository, loop: asyncio.AbstractEventLoop) -> None:
        """A lookup ended: the reads that arrived meanwhile get the next one, in a task."""
        if not self._waiting.get(repo.partition):
            self._busy.pop(repo.partition, None)
            return
        task = loop.create_task(self._drain(repo), name="purge-marker-lookups")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _drain(self, repo: Repository) -> None:
        try:
            while batch := self._waiting.pop(repo.partition, None):
                await self._answer(repo, batch)
        except BaseException:  # cancelled (the loop is closing): so are the reads still waiting
            for _, future in self._waiting.pop(repo.partition, []):
                future.cancel()
            raise
        finally:
            self._busy.pop(repo.partition, None)

    async def _answer(self, repo: Repository, batch: _Waiting) -> None:
        relatives = [relative for relative, _ in batch]
        try:  # a group: the "any marker?" probe first (announced repositories may have none yet)
            found = await lookup_markers(self.ctx, repo, relatives, probe=len(relatives) > 1)
        except Exception as e:  # each reader raises it (a KV outage is every reader's error)
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        for relative, future in batch:
            if not future.done():  # its reader was cancelled meanwhile
                future.set_result(found.get(relative))


__all__ = [
    "ANNOUNCE_SECONDS",
    "MAX_AUDIT_ID_SHOWN",
    "READER_TRUST_SECONDS",
    "MarkerReads",
    "announce",
    "any_marker",
    "has_purges",
    "lookup_markers",
]

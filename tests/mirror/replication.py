"""A stand-in for S3 Replication between two storage namespaces, plus the mirror's invariant check.

:class:`ReplicationSimulator` copies every object that appears under a source namespace to the same
relative key under a destination namespace, the way S3 Replication (or any asynchronous bucket copy)
does: **asynchronously, in random order, after random delays, and not always**. It runs as an asyncio
task next to the mirroring daemon:

- it LISTs the source every ``poll_interval`` seconds and schedules each new key for delivery after a
  delay drawn uniformly from ``[min_delay, max_delay]`` (so keys arrive in random order, and a commit's
  data objects, ranges and metarange arrive in no particular order relative to each other);
- it DROPS keys: a ``drop_fraction`` of new keys (drawn from the seeded generator), every key for
  which the ``drop`` predicate is true, and keys named later with :meth:`drop_keys` (a key not yet
  delivered is then never delivered). :meth:`release` delivers dropped keys after all;
- :meth:`pause` holds every delivery (discovery goes on) until :meth:`resume`, which lets a test
  decide what to drop after seeing what a burst of commits wrote;
- copies go through :func:`lakefs_core.block.copy_object`, so any pair of block stores works (two
  moto S3 servers, two local directories, ...); at most ``workers`` copies run at once.

Times are on ``time.monotonic``; :attr:`ReplicationSimulator.delivered` maps each delivered key to its
delivery time, which a benchmark can turn into replication lag figures.

:func:`commit_keys` and :func:`missing_keys` state the mirror's invariant independently of the
daemon's own validator: every table (metarange and ranges) and every RELATIVE data object of a commit
must be present, with the entry's size, in a LISTING of the destination namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType

from lakefs_core.block import copy_object
from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.committed.metarange import EMPTY_METARANGE_ID
from lakefs_core.errors import LakeFSError, NotFoundError
from lakefs_core.format.records import decode_entry
from lakefs_core.keys import TABLES_DIR, AddressType
from lakefs_core.repos.graveler import Graveler

__all__ = [
    "ReplicationSimulator",
    "ReplicationStats",
    "commit_keys",
    "list_namespace",
    "missing_keys",
]

log = logging.getLogger(__name__)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key


@dataclass
class ReplicationStats:
    scans: int = 0
    discovered: int = 0
    delivered: int = 0
    dropped: int = 0
    released: int = 0
    copy_errors: int = 0
    lags: list[float] = field(default_factory=list, repr=False)  # discovery -> delivery, seconds

    @property
    def max_lag(self) -> float:
        return max(self.lags, default=0.0)

    @property
    def mean_lag(self) -> float:
        return sum(self.lags) / len(self.lags) if self.lags else 0.0


class ReplicationSimulator:
    """Asynchronous, unordered, lossy copying of ``src``'s namespace into ``dst``'s (see the module doc).

    ``src_prefix``/``dst_prefix`` are the namespaces' key prefixes in their stores (``""`` for a whole
    store, e.g. a local namespace). Keys handled by the simulator are relative to them
    (``data/<slice>/<id>``, ``_lakefs/<id>``). Use it as an async context manager, or call
    :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        src: BlockStore,
        src_prefix: str,
        dst: BlockStore,
        dst_prefix: str,
        *,
        seed: int | None = None,
        min_delay: float = 0.0,
        max_delay: float = 1.0,
        drop_fraction: float = 0.0,
        drop: Callable[[str], bool] | None = None,
        poll_interval: float = 0.1,
        workers: int = 4,
        copy_attempts: int = 3,
    ) -> None:
        if not 0 <= min_delay <= max_delay:
            raise ValueError("need 0 <= min_delay <= max_delay")
        if not 0.0 <= drop_fraction <= 1.0:
            raise ValueError("drop_fraction is a fraction")
        self.src, self.src_prefix = src, src_prefix.strip("/")
        self.dst, self.dst_prefix = dst, dst_prefix.strip("/")
        self.rng = random.Random(seed)
        self.min_delay, self.max_delay = min_delay, max_delay
        self.drop_fraction = drop_fraction
        self.drop = drop
        self.poll_interval = poll_interval
        self.copy_attempts = copy_attempts
        self.stats = ReplicationStats()
        self.discovered: dict[str, float] = {}  # key -> discovery time
        self.delivered: dict[str, float] = {}  # key -> delivery time
        self.dropped: set[str] = set()
        self._pending: set[str] = set()  # scheduled, not delivered, not dropped
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(workers)
        self._running = asyncio.Event()
        self._running.set()
        self._scan_lock = asyncio.Lock()
        self._loop_task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> ReplicationSimulator:
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._loop(), name="replication-simulator")
        return self

    async def stop(self) -> None:
        """Cancel the scanner and every scheduled delivery (nothing is left running)."""
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        self._loop_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._pending.clear()

    async def __aenter__(self) -> ReplicationSimulator:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _loop(self) -> None:
        while True:
            try:
                await self.scan()
            except LakeFSError as e:  # a failed LIST is retried at the next tick
                log.warning("replication simulator: scan failed: %s", e)
            await asyncio.sleep(self.poll_interval)

    # -- controls ---------------------------------------------------------------------------------

    def pause(self) -> None:
        """Hold every delivery (keys are still discovered and scheduled) until :meth:`resume`."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def drop_keys(self, keys: Iterable[str]) -> set[str]:
        """Never deliver ``keys`` (relative keys); returns those actually withheld (not yet delivered)."""
        withheld = set()
        for key in keys:
            if key in self.delivered or key in self.dropped:
                continue
            self.dropped.add(key)
            self._pending.discard(key)
            self.stats.dropped += 1
            withheld.add(key)
        return withheld

    def release(self, keys: Iterable[str] | None = None) -> int:
        """Deliver dropped keys after all (every one by default), after the usual random delays."""
        chosen = set(self.dropped if keys is None else keys) & self.dropped
        for key in sorted(chosen):
            self.dropped.discard(key)
            self.stats.released += 1
            if key in self.discovered:
                self._schedule(key)
        return len(chosen)

    @property
    def pending(self) -> int:
        """Keys scheduled for delivery and not delivered yet (dropped keys excluded)."""
        return len(self._pending)

    async def wait_idle(self, within: float = 30.0) -> None:
        """Scan, then wait until every discovered key not dropped has been delivered.

        Raises :class:`TimeoutError` after ``within`` seconds, or at once if deliveries are paused and
        some are pending.
        """
        deadline = time.monotonic() + within
        while True:
            await self.scan()
            if not self._pending:
                return
            if not self._running.is_set():
                raise TimeoutError(f"{len(self._pending)} deliveries pending while paused")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self._pending)} deliveries still pending after {within} s")
            await asyncio.sleep(0.05)

    # -- work -------------------------------------------------------------------------------------

    async def scan(self) -> int:
        """List the source once and schedule (or drop) every key not seen before; returns how many."""
        async with self._scan_lock:
            self.stats.scans += 1
            base = f"{self.src_prefix}/" if self.src_prefix else ""
            new: list[str] = []
            async for item in self.src.list(base):
                if isinstance(item, ObjectInfo):
                    key = item.key[len(base) :]
                    if key not in self.discovered:
                        new.append(key)
            now = time.monotonic()
            for key in new:
                self.discovered[key] = now
                self.stats.discovered += 1
                if key in self.dropped:
                    continue  # named by drop_keys before it was listed
                if (self.drop is not None and self.drop(key)) or self.rng.random() < self.drop_fraction:
                    self.dropped.add(key)
                    self.stats.dropped += 1
                else:
                    self._schedule(key)
            return len(new)

    def _schedule(self, key: str) -> None:
        self._pending.add(key)
        delay = self.rng.uniform(self.min_delay, self.max_delay)
        task = asyncio.create_task(self._deliver_later(key, delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver_later(self, key: str, delay: float) -> None:
        await asyncio.sleep(delay)
        await self._running.wait()
        if key in self.dropped or key in self.delivered:
            return
        async with self._slots:
            await self._running.wait()
            if key in self.dropped or key in self.delivered:
                return
            for attempt in range(1, self.copy_attempts + 1):
                try:
                    await copy_object(
                        self.src, _join(self.src_prefix, key), self.dst, _join(self.dst_prefix, key)
                    )
                except NotFoundError:
                    log.warning("replication simulator: %s vanished from the source", key)
                    self._pending.discard(key)
                    return
                except LakeFSError as e:
                    self.stats.copy_errors += 1
                    if attempt == self.copy_attempts:
                        log.warning("replication simulator: giving up on %s: %s", key, e)
                        self._pending.discard(key)
                        return
                    await asyncio.sleep(0.05 * attempt)
                else:
                    break
        now = time.monotonic()
        self.delivered[key] = now
        self.stats.delivered += 1
        self.stats.lags.append(now - self.discovered.get(key, now))
        self._pending.discard(key)


# -- the invariant ------------------------------------------------------------------------------------


async def commit_keys(graveler: Graveler, repo_id: str, commit_id: str) -> dict[str, int | None]:
    """What must be in a namespace for ``commit_id`` to be complete there: relative key -> size.

    Tables (``_lakefs/<metarange>``, ``_lakefs/<range>``) map to ``None`` (any size); RELATIVE data
    objects map to their entry's size. FULL (external) addresses are not included. Read from
    ``graveler``'s repository ``repo_id`` (use the source: its tables are always there).
    """
    repo = await graveler.repository(repo_id)
    commit = await graveler.refs.get_commit(repo, commit_id)
    if commit.metarange_id == EMPTY_METARANGE_ID:
        return {}
    metarange = await graveler.metarange(repo, commit.metarange_id)
    keys: dict[str, int | None] = {f"{TABLES_DIR}/{commit.metarange_id}": None}
    keys.update({f"{TABLES_DIR}/{r.id}": None for r in metarange.ranges})
    async for record in metarange:
        entry = decode_entry(record.data)
        if int(entry.address_type) == AddressType.RELATIVE:
            keys[entry.address] = int(entry.size)
    return keys


async def list_namespace(store: BlockStore, prefix: str) -> dict[str, int]:
    """Every object under a namespace prefix, by relative key, with its size (one paged LIST)."""
    prefix = prefix.strip("/")
    base = f"{prefix}/" if prefix else ""
    return {
        item.key[len(base) :]: item.size async for item in store.list(base) if isinstance(item, ObjectInfo)
    }


def missing_keys(required: dict[str, int | None], listing: dict[str, int]) -> list[str]:
    """Required keys absent from ``listing`` (or present with another size), sorted."""
    out = []
    for key, size in required.items():
        got = listing.get(key)
        if got is None or (size is not None and got != size):
            out.append(key)
    return sorted(out)

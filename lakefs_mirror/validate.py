"""Has commit C fully arrived in the destination namespace? (spec section 9)

The mirror promotes a branch only to a commit whose metarange, every range, and every data object are
present (and whose tables are readable) in the DESTINATION storage namespace. S3 Replication copies the
source namespace's keys to the destination under the same layout, asynchronously and in any order, so
"present" is checked in the destination store itself, never inferred from elsewhere.

:meth:`Validator.validate` is hierarchical and pays only for what it does not already know:

1. The metarange. Already in the validated-tables set of the :class:`~lakefs_mirror.presence.PresenceCache`
   (it and everything below it were validated here before): complete, zero requests. Absent: incomplete,
   stop (one GET, or none while a previous "missing" is cooling down). Present but unparsable:
   reported in ``unreadable_tables``, stop.
2. Each range of the metarange that is not in the validated-tables set: absent -> ``missing_ranges``
   (its contents are not looked at); present but corrupt (e.g. a truncated copy) -> ``unreadable_tables``;
   present -> its entries are read.
3. The data objects of the present ranges, read with
   :func:`lakefs_core.committed.addresses.iter_range_entries` and classified by
   :meth:`StorageNamespace.relative_of` against the destination namespace (the classification GC
   uses too). Objects inside it (RELATIVE addresses ``data/<slice>/<id>``, the deprecated by-prefix
   type without a scheme, FULL addresses naming a key inside the destination namespace) are required.
   Objects outside it (FULL addresses elsewhere, e.g. imported data or the source's own namespace) are
   *not* required: namespace replication does not copy them and the mirror cannot make them arrive;
   they are counted and listed in ``external_objects`` so the caller can see them. Objects already
   known present are skipped (no request); objects found missing within ``negative_cooldown`` are
   reported missing without asking again. The rest is asked for by DENSITY: grouped by directory
   (``.../data/<slice>/``), a group of at least ``list_threshold`` keys is answered by one paged LIST
   of that directory starting just before its smallest key and stopping at its largest (page budget
   ``ceil(n / list_threshold)``; keys the budget did not reach are HEADed), a smaller group by one
   HEAD per key. A present object whose size differs from its entry's size is treated as not arrived
   (``size_mismatches``).

A range whose table is readable and whose required objects are all present joins the validated-tables
set, so a later commit reusing it whole costs nothing for it; when everything is present the metarange
joins it too. The cost of validating a commit therefore tracks its NEW content: a commit adding k
objects to a validated parent costs about one GET for the metarange, one per new range, and at most k
HEADs (fewer with LIST) for the objects.

Table reads go through the destination :class:`~lakefs_core.committed.tables.TableStore`'s cache; but a
table served by a cache tier (which may be shared with other namespaces: ids name the same bytes
anywhere) does not prove presence HERE, so unless the presence cache already knows the table is present
in this namespace, its bytes are fetched from the destination and checked (footer, index, block
checksums) before it counts.

Errors: :class:`~lakefs_core.errors.NotFoundError` means missing;
:class:`~lakefs_core.errors.CorruptDataError` (and an entry address that cannot be resolved) means
unreadable. Anything else, notably :class:`~lakefs_core.errors.TransientError`, propagates unchanged and
records nothing: the caller retries later, and doubt is never taken for "valid" nor for "missing".

``ValidationResult.requests`` counts requests by operation (``get``, ``head``, ``list``: one per page).
Concurrency is bounded by an :class:`asyncio.Semaphore` shared by every validation of one validator.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import logging
import pickle
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from lakefs_core.block.base import BlockStore, CommonPrefix, ObjectInfo
from lakefs_core.committed.addresses import iter_range_entries
from lakefs_core.committed.metarange import EMPTY_METARANGE_ID, parse_metarange
from lakefs_core.committed.tables import TableStore, check_table_id
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.format.records import RangeInfo
from lakefs_core.format.sstable.reader import TableReader
from lakefs_core.offloop import run_cpu, run_process
from lakefs_core.repos.graveler import StorageNamespace, table_name
from lakefs_mirror.presence import PresenceCache, namespace_key

__all__ = [
    "DEFAULT_BATCH_OBJECTS",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_LIST_PAGE_SIZE",
    "DEFAULT_LIST_THRESHOLD",
    "DEFAULT_MAX_REPORTED",
    "ValidationResult",
    "Validator",
]

log = logging.getLogger(__name__)

DEFAULT_LIST_THRESHOLD = 8
DEFAULT_CONCURRENCY = 16
DEFAULT_LIST_PAGE_SIZE = 1000
DEFAULT_MAX_REPORTED = 100
DEFAULT_BATCH_OBJECTS = 100_000

_SCAN_BATCH = 8192  # range entries decoded per call in the CPU pool (a cancellation point between)
# Ranges at least this big are decoded in a worker process (offloop.run_process), smaller ones in the
# thread pool: a process round trip costs about a millisecond plus a copy of the table.
PROCESS_SCAN_MIN_BYTES = 256 * 1024
# Objects per pickled chunk coming back from a worker process: unpickling one holds the GIL ~2 ms.
_CHUNK_OBJECTS = 8192
_SORT_SLICE = 8192  # keys sorted in one C call (about 2 ms); see _sorted_in_slices
# Per-object bookkeeping steps on the loop between two yields to it. While the CPU workers hold the
# GIL, such a step was measured at 10-35 ms of wall time (bench/RESULTS.md, mirror API latency).
_YIELD_EVERY = 512

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class ValidationResult:
    """The answer for one metarange in one destination namespace.

    ``complete`` is the only promotion signal: True iff the metarange, every range and every required
    object are present and readable. Lists are sorted and capped at the validator's ``max_reported``;
    the ``*_total`` fields count everything. Objects are named by their RELATIVE address, tables by id.
    """

    metarange_id: str
    namespace: str
    complete: bool = False
    metarange_present: bool = False
    cached: bool = False  # answered from the validated-tables set without any request
    ranges_total: int = 0  # ranges listed by the metarange
    ranges_skipped: int = 0  # already validated in this namespace: not opened at all
    ranges_checked: int = 0  # opened and read in this validation
    missing_ranges: list[str] = field(default_factory=list)
    missing_ranges_total: int = 0
    unreadable_tables: list[str] = field(default_factory=list)  # present but corrupt (metarange or range)
    missing_objects: list[str] = field(default_factory=list)
    missing_objects_total: int = 0
    size_mismatches: int = 0  # present objects whose size differs from the entry (counted as missing)
    external_objects: list[str] = field(default_factory=list)  # FULL addresses: not required
    external_objects_total: int = 0
    objects_referenced: int = 0  # distinct RELATIVE objects of the ranges read
    objects_cached: int = 0  # known present: no request
    objects_cooling: int = 0  # found missing recently: reported missing without a request
    objects_checked: int = 0  # asked about (HEAD or LIST)
    requests: Counter[str] = field(default_factory=Counter)
    timings: dict[str, float] = field(default_factory=dict)  # seconds: metarange, ranges, objects, total

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())

    @property
    def missing_object_count(self) -> int:
        return self.missing_objects_total

    @property
    def missing_table_count(self) -> int:
        """Tables not (usably) present: the metarange if absent, missing ranges, unreadable tables."""
        absent_metarange = 0 if self.metarange_present else 1
        return absent_metarange + self.missing_ranges_total + len(self.unreadable_tables)

    @property
    def external_object_count(self) -> int:
        return self.external_objects_total

    def missing_tables(self) -> list[str]:
        """Ids of the tables still to arrive (metarange if absent, reported missing ranges, unreadable
        tables), e.g. for an active mode that copies them itself."""
        out = [] if self.metarange_present else [self.metarange_id]
        return [*out, *self.missing_ranges, *self.unreadable_tables]


class _Table(enum.Enum):
    PRESENT = "present"
    MISSING = "missing"
    UNREADABLE = "unreadable"


# (address relative to the namespace, store key in the destination store, size): a plain tuple,
# so a worker process's chunks unpickle without a constructor call per object.
_Object = tuple[str, str, int]


@dataclass
class _RangeWork:
    table_id: str
    objects: list[_Object]


@dataclass
class _Run:
    """Mutable state of one validation."""

    res: ValidationResult
    missing_ranges: set[str] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)
    missing_objects: set[str] = field(default_factory=set)
    external: set[str] = field(default_factory=set)

    def time(self, phase: str, started: float) -> None:
        self.res.timings[phase] = self.res.timings.get(phase, 0.0) + time.perf_counter() - started


class Validator:
    """Validates commits' metaranges against one destination storage namespace.

    ``dest_tables`` is the destination namespace's table store (its cache is used for reads);
    ``dest_store`` the block store holding the namespace (``namespace.store_uri``); ``cache`` the
    presence facts, shared with other validators and persisted by its owner; ``incarnation`` (the
    destination repository's ``instance_uid``) keys those facts, see
    :func:`lakefs_mirror.presence.namespace_key`.
    """

    def __init__(
        self,
        dest_tables: TableStore,
        dest_store: BlockStore,
        namespace: StorageNamespace,
        cache: PresenceCache,
        *,
        list_threshold: int = DEFAULT_LIST_THRESHOLD,
        concurrency: int = DEFAULT_CONCURRENCY,
        list_page_size: int = DEFAULT_LIST_PAGE_SIZE,
        max_reported: int = DEFAULT_MAX_REPORTED,
        batch_objects: int = DEFAULT_BATCH_OBJECTS,
        check_size: bool = True,
        incarnation: str = "",
        purged: Callable[[list[str]], Awaitable[Mapping[str, str]]] | None = None,
    ) -> None:
        if dest_tables.namespace.uri != namespace.uri:
            raise BadInputError(
                f"the table store is for {dest_tables.namespace.uri}, not {namespace.uri}",
                field="dest_tables",
            )
        for name, value, low in (
            ("list_threshold", list_threshold, 1),
            ("concurrency", concurrency, 1),
            ("list_page_size", list_page_size, 1),
            ("max_reported", max_reported, 0),
            ("batch_objects", batch_objects, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise BadInputError(f"must be an integer >= {low}", field=name)
        self.tables = dest_tables
        self.store = dest_store
        self.namespace = namespace
        self.cache = cache
        self.list_threshold = list_threshold
        self.concurrency = concurrency
        self.list_page_size = list_page_size
        self.max_reported = max_reported
        self.batch_objects = batch_objects
        self.check_size = check_size
        # Addresses an audited purge destroyed at the source are settled, not missing: they will
        # never arrive, and the mirror's entries keep naming them (reads answer "purged").
        self.purged = purged
        self._sem = asyncio.Semaphore(concurrency)
        # Presence facts are keyed by this incarnation of the namespace (the destination repository's
        # instance uid), so a namespace re-created from scratch never inherits them.
        self._ns = namespace_key(namespace.uri, incarnation)

    # -- entry point ----------------------------------------------------------------------------------

    async def validate(self, metarange_id: str) -> ValidationResult:
        """Check that the metarange ``metarange_id`` and all it references are in the destination."""
        started = time.perf_counter()
        run = _Run(ValidationResult(metarange_id=metarange_id, namespace=self.namespace.uri))
        try:
            await self._validate(metarange_id, run)
            await self._report(run)
        finally:
            run.time("total", started)
        res = run.res
        log.debug(
            "validated %s in %s: complete=%s requests=%s",
            metarange_id,
            self._ns,
            res.complete,
            dict(res.requests),
        )
        return res

    async def _report(self, run: _Run) -> None:
        # Picking the smallest names of up to millions of keys is CPU work: done in the CPU pool
        # (the sets are this run's own, and nothing touches them any more).
        res, cap = run.res, self.max_reported
        res.missing_ranges, res.missing_objects, res.external_objects = await run_cpu(
            _smallest, (run.missing_ranges, run.missing_objects, run.external), cap
        )
        res.missing_ranges_total = len(run.missing_ranges)
        res.unreadable_tables = sorted(run.unreadable)
        res.missing_objects_total = len(run.missing_objects)
        res.external_objects_total = len(run.external)

    async def _validate(self, metarange_id: str, run: _Run) -> None:
        res = run.res
        if metarange_id == EMPTY_METARANGE_ID:  # the empty tree of a repository's first commit
            res.metarange_present = res.complete = True
            return
        check_table_id(metarange_id)
        if self.cache.is_validated(self._ns, metarange_id):
            res.metarange_present = res.complete = res.cached = True
            return
        started = time.perf_counter()
        status, reader = await self._open_table(metarange_id, run)
        ranges: list[RangeInfo] = []
        if status is _Table.PRESENT:
            assert reader is not None
            try:
                ranges = await run_cpu(parse_metarange, reader, metarange_id)
            except CorruptDataError as e:
                log.warning("metarange %s in %s is unreadable: %s", metarange_id, self._ns, e)
                status = _Table.UNREADABLE
        run.time("metarange", started)
        if status is _Table.MISSING:
            return
        res.metarange_present = True
        if status is _Table.UNREADABLE:
            run.unreadable.add(metarange_id)
            return
        res.ranges_total = len(ranges)
        todo: list[RangeInfo] = []
        seen: set[str] = set()
        for info in ranges:
            if info.id in seen:
                continue
            seen.add(info.id)
            if self.cache.is_validated(self._ns, info.id):
                res.ranges_skipped += 1
            else:
                todo.append(info)
        for wave in self._waves(todo):
            await self._validate_wave(wave, run)
        res.complete = not (run.missing_ranges or run.unreadable or run.missing_objects)
        if res.complete:
            self.cache.mark_validated(self._ns, metarange_id)

    def _waves(self, ranges: list[RangeInfo]) -> Iterator[list[RangeInfo]]:
        """Batches of ranges holding about ``batch_objects`` records, to bound memory."""
        wave: list[RangeInfo] = []
        size = 0
        for info in ranges:
            if wave and size + info.count > self.batch_objects:
                yield wave
                wave, size = [], 0
            wave.append(info)
            size += info.count
        if wave:
            yield wave

    # -- ranges -----------------------------------------------------------------------------------

    async def _validate_wave(self, infos: list[RangeInfo], run: _Run) -> None:
        res = run.res
        started = time.perf_counter()
        works = [w for w in await self._map(infos, lambda info: self._read_range(info, run)) if w is not None]
        run.time("ranges", started)

        started = time.perf_counter()
        ns = self._ns
        state: dict[str, bool] = {}  # rel -> known present (True) / missing without asking (False)
        unknown: dict[str, _Object] = {}  # store key -> object to ask about
        steps = 0
        for work in works:
            for obj in work.objects:
                steps += 1
                if steps % _YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # a wave holds up to batch_objects objects
                rel, key, _ = obj
                if rel in state or key in unknown:
                    continue
                res.objects_referenced += 1
                if self.cache.is_present(ns, rel):
                    state[rel] = True
                    res.objects_cached += 1
                elif self.cache.recently_missing(ns, rel):
                    state[rel] = False
                    res.objects_cooling += 1
                else:
                    unknown[key] = obj
        res.objects_checked += len(unknown)
        sizes = await self._resolve(list(unknown), run)
        for steps, (key, (rel, _, expected)) in enumerate(unknown.items(), 1):
            if steps % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            size = sizes[key]
            if size is None:
                arrived = False
            elif self.check_size and size != expected:
                arrived = False
                res.size_mismatches += 1
                log.warning(
                    "%s/%s has size %d, its entry says %d: not counted as arrived", ns, rel, size, expected
                )
            else:
                arrived = True
            state[rel] = arrived
            if arrived:
                self.cache.mark_present(ns, rel)
            else:
                self.cache.mark_missing(ns, rel)
        for work in works:
            await asyncio.sleep(0)  # one range's objects at a time
            missing = [rel for rel, _, _ in work.objects if not state[rel]]
            if missing and self.purged is not None:
                gone = await self.purged(missing)
                missing = [rel for rel in missing if rel not in gone]
            if missing:
                run.missing_objects.update(missing)
            else:
                self.cache.mark_validated(ns, work.table_id)
        run.time("objects", started)

    async def _read_range(self, info: RangeInfo, run: _Run) -> _RangeWork | None:
        status, reader = await self._open_table(info.id, run)
        if status is _Table.MISSING:
            run.missing_ranges.add(info.id)
            return None
        if status is _Table.PRESENT:
            assert reader is not None
            try:
                objects = await self._range_objects(reader, info.id, run)
            except (CorruptDataError, BadInputError) as e:
                log.warning("range %s in %s is unreadable: %s", info.id, self._ns, e)
            else:
                run.res.ranges_checked += 1
                return _RangeWork(info.id, objects)
        run.unreadable.add(info.id)
        return None

    async def _range_objects(self, reader: TableReader, table_id: str, run: _Run) -> list[_Object]:
        """The distinct objects inside the namespace a range references (others go to ``run.external``).

        Decoding is CPU work proportional to the range and pure Python (it holds the GIL): a range
        of at least :data:`PROCESS_SCAN_MIN_BYTES` is decoded in a worker process, which hands the
        objects back in pickled chunks that are unpickled one per call in the CPU thread pool; a
        smaller one is decoded in the thread pool, a batch of entries per call. Either way the loop
        stays free and a cancelled validation stops at the next call.
        """
        name = table_name(table_id)
        if reader.size_bytes >= PROCESS_SCAN_MIN_BYTES:
            data = await run_cpu(reader.to_bytes)
            chunks, external = await run_process(
                scan_range_in_process, data, name, self.namespace.uri, self.tables.cache.max_block_bytes
            )
            objects: list[_Object] = []
            for chunk in chunks:
                objects.extend(await run_cpu(pickle.loads, chunk))  # our own worker's output
            run.external.update(external)
            return objects
        scan = _RangeScan(reader, name, self.namespace)
        while not await run_cpu(scan.step, _SCAN_BATCH):
            pass
        run.external.update(scan.external)
        return scan.objects

    async def _open_table(self, table_id: str, run: _Run) -> tuple[_Table, TableReader | None]:
        """Presence (in THIS namespace) and an open reader for a range or metarange."""
        ns = self._ns
        rel = table_name(table_id)
        key = self.tables.key(table_id)
        known = self.cache.is_present(ns, rel)
        if not known and self.cache.recently_missing(ns, rel):
            return _Table.MISSING, None
        fetched = False

        async def fetch() -> bytes:
            nonlocal fetched
            fetched = True
            return await self._get(key, run)

        reader: TableReader | None = None
        try:
            reader = await self.tables.cache.load(table_id, fetch)
        except NotFoundError:
            if fetched:
                self.cache.mark_missing(ns, rel)
                return _Table.MISSING, None
        except CorruptDataError as e:
            if fetched:
                log.warning("table %s in %s is unreadable: %s", table_id, ns, e)
                self.cache.mark_missing(ns, rel)
                return _Table.UNREADABLE, None
        if reader is None or (not known and not fetched):
            # Served by a cache tier, which may have been filled from another namespace (or failed on
            # someone else's fetch): only this namespace's own bytes prove presence here.
            try:
                data = await self._get(key, run)
            except NotFoundError:
                self.cache.mark_missing(ns, rel)
                return _Table.MISSING, None
            try:
                own = await run_cpu(
                    TableReader,
                    data,
                    name=rel,
                    block_cache_blocks=self.tables.cache.block_cache_blocks,
                    max_block_bytes=self.tables.cache.max_block_bytes,
                )
            except CorruptDataError as e:
                log.warning("table %s in %s is unreadable: %s", table_id, ns, e)
                self.cache.mark_missing(ns, rel)
                return _Table.UNREADABLE, None
            if reader is None:
                reader = own
        self.cache.mark_present(ns, rel)
        return _Table.PRESENT, reader

    # -- objects ----------------------------------------------------------------------------------

    async def _resolve(self, keys: Sequence[str], run: _Run) -> dict[str, int | None]:
        """Size of each store key in the destination, ``None`` if absent: LIST dense directories,
        HEAD the rest."""
        lists, heads = await run_cpu(_plan_requests, keys, self.list_threshold)
        sizes: dict[str, int | None] = {}
        jobs: list[tuple[str, list[str]] | str] = [*lists, *heads]

        async def run_job(job: tuple[str, list[str]] | str) -> list[str]:
            if isinstance(job, str):
                sizes[job] = await self._head(job, run)
                return []
            prefix, members = job
            found, unresolved = await self._list_group(prefix, members, run)
            left = set(unresolved)
            for key in members:
                if key not in left:
                    sizes[key] = found.get(key)
            return unresolved

        leftover = [k for ks in await self._map(jobs, run_job) for k in ks]
        if leftover:  # keys a LIST's page budget did not reach
            for key, size in zip(
                leftover, await self._map(leftover, lambda k: self._head(k, run)), strict=True
            ):
                sizes[key] = size
        return sizes

    async def _list_group(self, prefix: str, keys: list[str], run: _Run) -> tuple[dict[str, int], list[str]]:
        """One paged LIST of ``prefix`` from just before ``keys[0]`` to ``keys[-1]``. Returns the sizes
        of the keys seen, and the keys the page budget did not reach (to be HEADed)."""
        wanted = set(keys)
        last = keys[-1]
        start_after = keys[0][:-1] or None  # sorts before keys[0] (and after nothing we need)
        budget = max(1, -(-len(keys) // self.list_threshold))
        page = self.list_page_size
        found: dict[str, int] = {}
        consumed = pages = 0
        done = False
        last_listed: str | None = None
        async with self._sem:
            items = self.store.list(prefix, start_after=start_after, page_size=page)
            try:
                while True:
                    if consumed % page == 0:  # the next item starts a new page (a new request)
                        if pages >= budget:
                            break
                        pages += 1
                        run.res.requests["list"] += 1
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        done = True
                        break
                    consumed += 1
                    if isinstance(item, CommonPrefix):
                        continue
                    last_listed = item.key
                    if item.key in wanted:
                        found[item.key] = item.size
                    if item.key >= last:
                        done = True
                        break
            finally:
                await _aclose(items)
        if done:
            return found, []
        return found, [k for k in keys if k not in found and (last_listed is None or k > last_listed)]

    async def _head(self, key: str, run: _Run) -> int | None:
        async with self._sem:
            run.res.requests["head"] += 1
            try:
                info: ObjectInfo = await self.store.head(key)
            except NotFoundError:
                return None
        return info.size

    async def _get(self, key: str, run: _Run) -> bytes:
        async with self._sem:
            run.res.requests["get"] += 1
            return await self.store.get(key)

    # -- bounded concurrency --------------------------------------------------------------------------

    async def _map(self, items: Sequence[T], fn: Callable[[T], Awaitable[R]]) -> list[R]:
        """``[await fn(x) for x in items]`` with at most ``concurrency`` running at once. The first
        error cancels the rest and is raised as is (not wrapped in an ExceptionGroup)."""
        if not items:
            return []
        results: dict[int, R] = {}
        feed = iter(enumerate(items))

        async def worker() -> None:
            for i, item in feed:
                results[i] = await fn(item)

        tasks = [asyncio.create_task(worker()) for _ in range(min(self.concurrency, len(items)))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                raise outcome
        return [results[i] for i in range(len(items))]


async def _aclose(items: AsyncIterator[ObjectInfo | CommonPrefix]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


class _RangeScan:
    """The distinct objects a range references, decoded a batch at a time (in the CPU pool).

    One classification for the mirror and GC (:meth:`StorageNamespace.relative_of`): objects inside
    the namespace go to ``objects`` (first occurrence, in key order), others to ``external``. Raises
    :class:`CorruptDataError` (a record that does not decode) or :class:`BadInputError` (an unusable
    address) from :meth:`step`.
    """

    def __init__(self, reader: TableReader, name: str, namespace: StorageNamespace) -> None:
        self._entries = iter_range_entries(reader, name=name)
        self._namespace = namespace
        self._seen: set[str] = set()
        self.objects: list[_Object] = []
        self.external: set[str] = set()

    def step(self, limit: int) -> bool:
        """Decode up to ``limit`` more entries; True when the range is exhausted."""
        ns, seen, objects = self._namespace, self._seen, self.objects
        prefix = f"{ns.prefix}/" if ns.prefix else ""
        for n, entry in enumerate(self._entries, 1):
            rel = ns.relative_of(entry.address, entry.address_type)
            if rel is None:
                self.external.add(entry.address)
            elif rel not in seen:
                seen.add(rel)
                # ``relative_of`` returns only checked relative paths: ns.key(rel) without re-checking
                objects.append((rel, prefix + rel, entry.size))
            if n >= limit:
                return False
        return True


def scan_range_in_process(
    data: bytes, name: str, namespace_uri: str, max_block_bytes: int
) -> tuple[list[bytes], list[str]]:
    """Run in a worker process: the distinct in-namespace objects of the range ``data`` as pickled
    chunks of ``(rel, key, size)`` tuples (each unpickled by the parent in one short call), and the
    external addresses. The table is opened from its bytes with checksums verified; a corrupt table
    or record raises here as on the thread path (the error pickles back with its fields)."""
    reader = TableReader(data, name=name, max_block_bytes=max_block_bytes)
    scan = _RangeScan(reader, name, StorageNamespace(namespace_uri))
    while not scan.step(_SCAN_BATCH):  # compressed blocks can hold more entries than bytes
        pass
    objects = scan.objects
    chunks = [
        pickle.dumps(objects[i : i + _CHUNK_OBJECTS], protocol=pickle.HIGHEST_PROTOCOL)
        for i in range(0, len(objects), _CHUNK_OBJECTS)
    ]
    return chunks, sorted(scan.external)


def _plan_requests(keys: Sequence[str], list_threshold: int) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Store keys grouped by directory, sorted: dense groups (at least ``list_threshold`` keys, to be
    LISTed) and the keys of the others (to be HEADed)."""
    # Grouped first, then each group sorted: one ``sorted`` over a wave's 100k keys would hold the
    # GIL (and so the loop) for tens of ms in one C call; this is Python-level work plus small sorts.
    groups: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        directory, sep, _ = key.rpartition("/")
        groups[directory + sep].append(key)
    lists: list[tuple[str, list[str]]] = []
    heads: list[str] = []
    for prefix in _sorted_in_slices(list(groups)):
        members = _sorted_in_slices(groups[prefix])
        if len(members) >= list_threshold:
            lists.append((prefix, members))
        else:
            heads.extend(members)
    return lists, heads


def _sorted_in_slices(items: list[str]) -> list[str]:
    """``sorted(items)``, without holding the GIL for one long C call: a directory of 50k keys took
    ~14 ms in one ``sorted``; slices are sorted apart and merged by ``heapq.merge``, Python code that
    hands the GIL back to the loop thread between items."""
    if len(items) <= _SORT_SLICE:
        return sorted(items)
    runs = [sorted(items[i : i + _SORT_SLICE]) for i in range(0, len(items), _SORT_SLICE)]
    return list(heapq.merge(*runs))


def _smallest(sets: Sequence[Collection[str]], cap: int) -> list[list[str]]:
    """The ``cap`` smallest members of each set, sorted (``sorted(s)[:cap]`` without sorting it all)."""
    return [heapq.nsmallest(cap, s) for s in sets]

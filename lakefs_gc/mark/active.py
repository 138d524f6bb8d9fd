"""Active commits: lakeFS's retention walk over an on-disk commit map.

Contract (gc.md §1 and §3a step 4; lakeFS ``pkg/graveler/retention/active_commits.go``):

- Input: a stream of :class:`CommitNode` (``Graveler.commit_nodes``), the branch heads (hidden
  branches too), tags, pinned commit ids, the rules (``None`` = no rules), ``now`` (fixed once per
  run) and ``tags_policy``. The caller reads heads, tags and pins *before* streaming the commits:
  commits are immutable and written before any ref points at them, so every ref target is then in
  the stream. A ref or main parent absent from the stream is corrupt history and raises
  :class:`CorruptDataError` (fail closed; lakeFS would fail its KV lookup the same way).
- Starting points: every branch head, with its branch's rule else the default; every *ancestry leaf*
  (a commit that is nobody's main parent) that is not a head, with the default; with
  ``tags_policy="pin"`` (the default) every tag, and always every pin, as heads with the default.
- Threshold = ``now - days``. A head is always active; a leaf only if created after the default
  threshold. Walking main parents (``parents[0]``, ``parents[-1]`` for version-0 commits), a parent
  is active when its child was created after the threshold: every commit newer than the threshold
  plus the first older one. Second parents count only as leaves. No rules: every commit is active.

Deviations from lakeFS's code, each only ever *retaining more*:

1. lakeFS stops a walk at an already-processed parent *before* marking it, so its answer depends on
   the order of starting points (a branch whose old head shares a parent with a fresh head can expire
   that parent). Here the parent is marked first; the result is the union of the full walks, the same
   for any order, and a superset of lakeFS's for every order.
2. Clock skew (a child created before its parent): a commit created after the threshold is active
   even if its child is older. lakeFS would expire it.
3. Tags are pinned unless ``tags_policy="ignore"`` (lakeFS issue #7621); pins always.

Memory: ids and metarange ids live in SQLite in a private temporary directory; the walk keeps three
integer arrays and two flag arrays (about 26 bytes per commit: ~26 MB at 1M commits). All SQLite work
runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
import tempfile
import threading
from array import array
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeVar

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.repos.graveler import CommitNode, is_commit_id
from lakefs_gc.rules import GCRules

TagsPolicy = Literal["pin", "ignore"]
DAY_US = 86_400_000_000
BATCH = 10_000
_METARANGE_ID = re.compile(r"(?:[0-9a-f]{64})?")
_NONE = -1
_UNPROCESSED = 2**63 - 1  # "no walk has passed here": larger than any threshold
# Thresholds are clamped into int64 (a 2**31-day rule reaches past it); every creation time a commit
# can carry (years 1..9999) lies well inside, so clamping changes no comparison.
_MIN_THRESHOLD, _MAX_THRESHOLD = -(2**63) + 1, 2**63 - 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_T = TypeVar("_T")


def epoch_us(when: datetime) -> int:
    """Microseconds since the Unix epoch, exact (no float rounding, correct before 1970)."""
    if when.tzinfo is None:
        raise BadInputError("must be timezone-aware", field="now")
    return (when - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class StartingPoint:
    commit_id: str
    threshold_us: int
    head: bool  # a branch head, tag or pin: active whatever its age
    origin: str  # "branch:<name>", "tag:<name>", "pin", "leaf": for error messages


def _where(commit_id: str) -> str:
    return f"commit {commit_id}"


def _check_node(node: CommitNode) -> tuple[bytes, bytes | None, int, str]:
    if not is_commit_id(node.id):
        raise CorruptDataError(f"commit id {node.id!r} is not 64 lower-case hex digits")
    parent = node.main_parent
    if parent is not None and not is_commit_id(parent):
        raise CorruptDataError(f"main parent {parent!r} is not a commit id", file=_where(node.id))
    if not isinstance(node.creation_us, int) or not isinstance(node.metarange_id, str):
        raise CorruptDataError("malformed commit node", file=_where(node.id))
    if not _METARANGE_ID.fullmatch(node.metarange_id):
        raise CorruptDataError(f"metarange id {node.metarange_id!r} is not hex", file=_where(node.id))
    # 32-byte binary ids (as lakeFS's BinaryCommitID) halve the index and speed up its lookups.
    return (
        bytes.fromhex(node.id),
        None if parent is None else bytes.fromhex(parent),
        node.creation_us,
        node.metarange_id,
    )


class CommitGraph:
    """The on-disk commit map plus the walk. Synchronous; :class:`ActiveCommits` drives it from a
    worker thread. One instance per run; :meth:`close` removes its files."""

    def __init__(self, directory: Path | None = None) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="lakefs-gc-commits-", dir=directory))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self._dir / "commits.sqlite3", check_same_thread=False)
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            "temp_store=FILE",
            "cache_size=-65536",  # 64 MiB: the page cache is most of the driver's memory
            "locking_mode=EXCLUSIVE",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute(
            "CREATE TABLE nodes (idx INTEGER PRIMARY KEY, id BLOB NOT NULL, parent BLOB,"
            " created INTEGER NOT NULL, metarange TEXT NOT NULL)"
        )
        self._db.execute("CREATE TABLE active (idx INTEGER PRIMARY KEY)")
        self._db.execute("CREATE TABLE metaranges (id TEXT PRIMARY KEY) WITHOUT ROWID")
        self.created = array("q")
        self.parent = array("q")
        self.count = 0
        self.num_active = 0
        self._finished = False
        self._walked = False

    # -- building -------------------------------------------------------------------------------

    def add(self, nodes: Iterable[CommitNode]) -> None:
        rows = [_check_node(n) for n in nodes]
        with self._lock:
            try:
                self._db.executemany(
                    "INSERT INTO nodes (id, parent, created, metarange) VALUES (?,?,?,?)", rows
                )
            except OverflowError as e:
                raise CorruptDataError(f"commit creation time out of range: {e}") from e
            self.count += len(rows)

    def finish(self) -> None:
        """Resolve main parents to row numbers and load the walk's arrays."""
        with self._lock:
            try:
                # Built once after loading (a sort) rather than row by row (random B-tree inserts).
                self._db.execute("CREATE UNIQUE INDEX nodes_id ON nodes (id)")
            except sqlite3.IntegrityError as e:
                raise CorruptDataError(f"a commit is listed twice in the commit scan: {e}") from e
            created, parent = array("q", [0]) * (self.count + 1), array("q", [_NONE]) * (self.count + 1)
            cur = self._db.execute(
                "SELECT n.idx, n.created, p.idx, n.parent IS NOT NULL FROM nodes n"
                " LEFT JOIN nodes p ON p.id = n.parent ORDER BY n.idx"
            )
            for idx, when, pidx, has_parent in cur:
                created[idx] = when
                if pidx is not None:
                    parent[idx] = pidx
                elif has_parent:
                    cid, pid = self._db.execute(
                        "SELECT id, parent FROM nodes WHERE idx = ?", (idx,)
                    ).fetchone()
                    msg = f"main parent {bytes(pid).hex()} is not in the repository's commits"
                    raise CorruptDataError(msg, file=_where(bytes(cid).hex()))
            self.created, self.parent = created, parent
            self._finished = True

    def index_of(self, commit_id: str) -> int | None:
        with self._lock:
            sql = "SELECT idx FROM nodes WHERE id = ?"
            row = self._db.execute(sql, (bytes.fromhex(commit_id),)).fetchone()
        return None if row is None else int(row[0])

    # -- the walk -------------------------------------------------------------------------------

    def leaves(self, exclude: set[int]) -> Iterator[int]:
        """Rows that are nobody's main parent (row 0 is unused)."""
        has_child = bytearray(self.count + 1)
        for p in self.parent:
            if p != _NONE:
                has_child[p] = 1
        return (i for i in range(1, self.count + 1) if not has_child[i] and i not in exclude)

    def walk(self, starts: list[tuple[int, int, bool]]) -> None:
        """Mark active rows from ``(row, threshold_us, head)`` starting points (see module docstring).

        ``processed[x] = T`` records that the walk below ``x`` was done with threshold ``T``; a walk
        with ``T' >= T`` reaching ``x`` would mark a subset, so it stops there (after marking ``x``).
        Longest retention first makes later walks stop soonest.
        """
        created, parent = self.created, self.parent
        active = bytearray(self.count + 1)
        processed = array("q", [_UNPROCESSED]) * (self.count + 1)
        for start, threshold, head in sorted(starts, key=lambda s: s[1]):
            x = start
            if head or created[x] > threshold:
                active[x] = 1
            if processed[x] <= threshold:
                continue
            processed[x] = threshold
            while (p := parent[x]) != _NONE:
                if created[x] > threshold or created[p] > threshold:
                    active[p] = 1
                if processed[p] <= threshold:
                    break
                processed[p] = threshold
                x = p
        self._store_active(active)

    def mark_all(self) -> None:
        self._store_active(bytearray(b"\x01") * (self.count + 1))

    def _store_active(self, active: bytearray) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT INTO active (idx) VALUES (?)", ((i,) for i in range(1, self.count + 1) if active[i])
            )
            self._db.execute(
                "INSERT OR IGNORE INTO metaranges (id)"
                " SELECT n.metarange FROM active a JOIN nodes n ON n.idx = a.idx"
            )
            self.num_active = self._db.execute("SELECT count(*) FROM active").fetchone()[0]
        # The arrays are not needed after the walk; free them before the output phase.
        self.created, self.parent = array("q"), array("q")
        self._walked = True

    # -- output ---------------------------------------------------------------------------------

    def page(self, which: Literal["active", "expired"], after: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` ``(commit id, metarange id)`` pairs with id > ``after``, in id order."""
        if not self._walked:
            raise RuntimeError("walk() has not run")
        # Correlated EXISTS walks the id index in order and probes ``active`` by key: O(limit) a page.
        op = "EXISTS" if which == "active" else "NOT EXISTS"
        sql = (
            f"SELECT id, metarange FROM nodes n WHERE id > ? AND {op}"
            " (SELECT 1 FROM active a WHERE a.idx = n.idx) ORDER BY id LIMIT ?"
        )
        with self._lock:
            rows = self._db.execute(sql, (bytes.fromhex(after), limit))
            return [(bytes(a).hex(), str(b)) for a, b in rows]

    def metarange_page(self, after: str | None, limit: int) -> list[str]:
        """Distinct metarange ids of active commits, ascending, after ``after`` (``None``: from start)."""
        if not self._walked:
            raise RuntimeError("walk() has not run")
        with self._lock:
            if after is None:
                rows = self._db.execute("SELECT id FROM metaranges ORDER BY id LIMIT ?", (limit,))
            else:
                rows = self._db.execute(
                    "SELECT id FROM metaranges WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
                )
            return [str(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def resolve_starting_points(
    graph: CommitGraph,
    *,
    branches: Mapping[str, str],
    tags: Mapping[str, str],
    pins: Iterable[str],
    rules: GCRules,
    now_us: int,
    tags_policy: TagsPolicy,
) -> list[tuple[int, int, bool]]:
    """Heads (branches, tags, pins) and non-head leaves as ``(row, threshold_us, head)``."""

    def threshold(days: int) -> int:
        return min(max(now_us - days * DAY_US, _MIN_THRESHOLD), _MAX_THRESHOLD)

    default = threshold(rules.default_retention_days)
    named: list[StartingPoint] = [
        StartingPoint(cid, threshold(rules.retention_days(name)), True, f"branch {name!r}")
        for name, cid in branches.items()
    ]
    if tags_policy == "pin":
        named += [StartingPoint(cid, default, True, f"tag {name!r}") for name, cid in tags.items()]
    named += [StartingPoint(cid, default, True, "pin") for cid in pins]
    out: list[tuple[int, int, bool]] = []
    for sp in named:
        if not is_commit_id(sp.commit_id):
            raise BadInputError(f"{sp.origin} points at {sp.commit_id!r}, not a commit id", field="refs")
        row = graph.index_of(sp.commit_id)
        if row is None:
            msg = f"{sp.origin} points at commit {sp.commit_id}, absent from the commit scan"
            raise CorruptDataError(msg, file=_where(sp.commit_id))
        out.append((row, sp.threshold_us, True))
    heads = {row for row, _, _ in out}
    out += [(row, default, False) for row in graph.leaves(heads)]
    return out


class ActiveCommits:
    """The result of :func:`compute_active`: owns the on-disk map until :meth:`aclose`."""

    def __init__(self, graph: CommitGraph) -> None:
        self._graph = graph

    @property
    def num_commits(self) -> int:
        return self._graph.count

    @property
    def num_active(self) -> int:
        return self._graph.num_active

    async def _pages(self, fetch: Callable[[str], list[_T]], key: Callable[[_T], str]) -> AsyncIterator[_T]:
        after = ""
        while page := await asyncio.to_thread(fetch, after):
            for item in page:
                yield item
            after = key(page[-1])

    def active(self) -> AsyncIterator[tuple[str, str]]:
        """``(commit id, metarange id)`` of every active commit, in commit id order."""
        return self._pages(lambda a: self._graph.page("active", a, BATCH), lambda r: r[0])

    def expired(self) -> AsyncIterator[tuple[str, str]]:
        """``(commit id, metarange id)`` of every expired commit, in commit id order."""
        return self._pages(lambda a: self._graph.page("expired", a, BATCH), lambda r: r[0])

    async def metaranges(self) -> AsyncIterator[str]:
        """Distinct metarange ids of the active commits (``""`` is the empty tree), ascending."""
        after: str | None = None
        while page := await asyncio.to_thread(self._graph.metarange_page, after, BATCH):
            for mr in page:
                yield mr
            after = page[-1]

    async def aclose(self) -> None:
        await asyncio.to_thread(self._graph.close)

    async def __aenter__(self) -> ActiveCommits:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def load_graph(nodes: AsyncIterable[CommitNode], graph: CommitGraph) -> None:
    """Stream ``nodes`` into ``graph`` in batches, each written in a worker thread."""
    batch: list[CommitNode] = []
    async for node in nodes:
        batch.append(node)
        if len(batch) >= BATCH:
            await asyncio.to_thread(graph.add, batch)
            batch = []
    if batch:
        await asyncio.to_thread(graph.add, batch)
    await asyncio.to_thread(graph.finish)


async def compute_active(
    nodes: AsyncIterable[CommitNode],
    *,
    branches: Mapping[str, str],
    tags: Mapping[str, str] | None = None,
    pins: Iterable[str] = (),
    rules: GCRules | None,
    now: datetime,
    tags_policy: TagsPolicy = "pin",
    workdir: Path | None = None,
) -> ActiveCommits:
    """Run the retention walk; the caller must ``aclose()`` the result (or use ``async with``)."""
    if tags_policy not in ("pin", "ignore"):
        raise BadInputError(f"{tags_policy!r} is not 'pin' or 'ignore'", field="tags_policy")
    now_us = epoch_us(now)
    graph = CommitGraph(workdir)
    try:
        await load_graph(nodes, graph)
        if rules is None:
            # No rules: nothing expires (HEAD lakeFS would yield an empty committed set instead).
            await asyncio.to_thread(graph.mark_all)
        else:
            starts = await asyncio.to_thread(
                resolve_starting_points,
                graph,
                branches=branches,
                tags=tags or {},
                pins=list(pins),
                rules=rules,
                now_us=now_us,
                tags_policy=tags_policy,
            )
            await asyncio.to_thread(graph.walk, starts)
    except BaseException:
        await asyncio.to_thread(graph.close)
        raise
    return ActiveCommits(graph)

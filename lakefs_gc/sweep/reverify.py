"""Re-verification: what became live again since the mark (gc.md §3b), checked before and during a
sweep so a revived object is rescued instead of deleted.

A mark's delete set excludes everything live at mark time. Between the mark and a delete, a ref can
move to an old commit (a branch or tag created at it, a reset, a revert re-adding old entries, a
mirror promotion pinning it). :class:`Reverifier` keeps an on-disk set of addresses that are live
NOW but that the mark may not have protected:

- the pins are read again (a source that cannot answer aborts the sweep);
- staging is scanned again (first, for the same reason as in the mark);
- the active commits are recomputed with the MARK's ``now`` and tags policy, fresh refs, and the
  wider of the mark's rules and the rules stored NOW (:func:`~lakefs_gc.rules.widest_rules`): a
  retention lengthened (or rules removed) after the mark is honoured before anything is deleted,
  while a retention shortened after it never deletes more than the mark chose. Only metaranges that
  neither the mark (``commits.csv``) nor an earlier re-verification saw are opened; of their ranges,
  only those absent from the mark's ``ranges.txt`` are read (the mark already protected the others'
  addresses). Both files are trusted only as the run record in the KV binds them: their parts must
  be the recorded ones and each file's SHA-256, taken on the bytes loaded, the recorded one
  (:mod:`.verify`; :class:`~lakefs_core.errors.TamperedError` otherwise, before anything is
  used). Unreadable current rules abort the round (fail closed).

:meth:`Reverifier.live_among` answers which addresses of a batch are in that set. The set only
grows during a sweep (retaining more is always safe). Every table read is fail-closed like the
mark's. SQLite work runs in a worker thread; the files live in a private temporary directory
removed by :meth:`Reverifier.aclose`.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from types import TracebackType

from lakefs_core.committed.ranges import metarange_range_ids, range_addresses
from lakefs_core.repos.graveler import Graveler
from lakefs_gc.mark.active import compute_active
from lakefs_gc.mark.uncommitted import staged_relative
from lakefs_gc.pins import PinSource, pinned_now
from lakefs_gc.rules import load_rules, widest_rules
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import file_name, read_lines
from lakefs_gc.runs.record import Digester, RunRecord
from lakefs_gc.runs.reports import RunManifest, read_commits_csv
from lakefs_gc.sweep.verify import check_digest, expected, parsed_as_recorded, trusted_record, verify_parts

BATCH = 5000


class _Sets:
    """Three string sets in SQLite: seen metaranges, known ranges, live addresses."""

    def __init__(self, directory: Path | None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lakefs-gc-reverify-", dir=directory))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.dir / "sets.sqlite3", check_same_thread=False)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE"):
            self._db.execute(f"PRAGMA {pragma}")
        for table in ("metaranges", "ranges", "live", "pending", "pending_ranges"):
            self._db.execute(f"CREATE TABLE {table} (v TEXT PRIMARY KEY) WITHOUT ROWID")

    def commit_pending(self) -> None:
        """The mark's verified metaranges and ranges become seen."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO metaranges SELECT v FROM pending")
            self._db.execute("INSERT OR IGNORE INTO ranges SELECT v FROM pending_ranges")
            self._db.execute("DELETE FROM pending")
            self._db.execute("DELETE FROM pending_ranges")

    def add(self, table: str, values: Iterable[str]) -> int:
        """Insert ``values``; returns how many were new."""
        with self._lock:
            before = self._db.total_changes
            self._db.executemany(f"INSERT OR IGNORE INTO {table} (v) VALUES (?)", ((v,) for v in values))
            return self._db.total_changes - before

    def missing(self, table: str, values: list[str]) -> list[str]:
        """The values absent from ``table``, in order (duplicates kept once)."""
        with self._lock:
            out, seen = [], set()
            for v in values:
                if v in seen:
                    continue
                seen.add(v)
                if self._db.execute(f"SELECT 1 FROM {table} WHERE v = ?", (v,)).fetchone() is None:
                    out.append(v)
            return out

    def present(self, table: str, values: list[str]) -> set[str]:
        with self._lock:
            return {
                v for v in values if self._db.execute(f"SELECT 1 FROM {table} WHERE v = ?", (v,)).fetchone()
            }

    def close(self) -> None:
        with self._lock:
            self._db.close()
        shutil.rmtree(self.dir, ignore_errors=True)


async def _batched(items: AsyncIterator[str], size: int = BATCH) -> AsyncIterator[list[str]]:
    batch: list[str] = []
    async for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class Reverifier:
    """The live-again set of one mark, refreshed by :meth:`verify`."""

    def __init__(
        self,
        graveler: Graveler,
        repo_id: str,
        layout: RunLayout,
        manifest: RunManifest,
        *,
        pins: PinSource | None = None,
        workdir: Path | None = None,
        record: RunRecord | None = None,
    ) -> None:
        self._g = graveler
        self._repo = repo_id
        self._layout = layout
        self._manifest = manifest
        self._pins = pins
        self._record = record  # None: read from the KV (it must be complete)
        self._workdir = workdir
        self._sets = _Sets(workdir)
        self._loaded = False
        self.rounds = 0
        self.ranges_read = 0

    async def _load_mark(self) -> None:
        """The mark's metaranges (``commits.csv``) and ranges (``ranges.txt``) count as seen."""
        ns = self._layout.ns
        store = await self._g.namespace_store(ns)
        record = self._record
        if record is None:
            record = (await trusted_record(self._g, self._repo, self._layout.run_id))[1]
        csv_key = self._layout.commits_csv
        want = expected(record, ns, store, csv_key)
        digester = Digester()

        async def metaranges() -> AsyncIterator[str]:
            rows = read_commits_csv(store, csv_key, digester=digester)
            async for _commit, _expired, metarange_id in rows:
                yield metarange_id

        # Loaded into a scratch table first: nothing counts as seen before its digest is checked.
        async with parsed_as_recorded(store, csv_key, want):
            async for batch in _batched(metaranges()):
                await asyncio.to_thread(self._sets.add, "pending", batch)
        check_digest(digester.result(), want, file_name(store, csv_key))
        for key in await verify_parts(store, ns, record, self._layout.ranges, digests=False):
            digester, want = Digester(), expected(record, ns, store, key)
            async with parsed_as_recorded(store, key, want):
                async for lines in read_lines(store, key, digester=digester):
                    await asyncio.to_thread(self._sets.add, "pending_ranges", lines)
            check_digest(digester.result(), want, file_name(store, key))
        await asyncio.to_thread(self._sets.commit_pending)
        self._loaded = True

    async def verify(self) -> int:
        """One re-verification round; returns how many addresses became known-live in it."""
        if not self._loaded:
            await self._load_mark()
        ns = self._layout.ns
        added = 0
        pins = set(self._manifest.pins)
        pins |= await pinned_now(self._pins, self._repo)
        async for batch in _batched(staged_relative(self._g, self._repo, ns)):
            added += await asyncio.to_thread(self._sets.add, "live", batch)
        branches = {b.id: b.commit_id async for b in self._g.list_branches(self._repo)}
        tags = {t.id: t.commit_id async for t in self._g.list_tags(self._repo)}
        store = await self._g.namespace_store(ns)
        rules = widest_rules(self._manifest.rules, await load_rules(store, ns))
        active = await compute_active(
            self._g.commit_nodes(self._repo),
            branches=branches,
            tags=tags,
            pins=pins,
            rules=rules,
            now=self._manifest.now,
            tags_policy=self._manifest.tags_policy,
            workdir=self._workdir,
        )
        async with active:
            async for batch in _batched(active.metaranges()):
                added += await self._read_new(batch)
        self.rounds += 1
        return added

    async def _read_new(self, metaranges: list[str]) -> int:
        new = await asyncio.to_thread(self._sets.missing, "metaranges", metaranges)
        if not new:
            return 0
        ns = self._layout.ns
        store = await self._g.namespace_store(ns)
        added = 0
        for metarange_id in new:
            range_ids = await metarange_range_ids(store, ns, metarange_id)
            for range_id in await asyncio.to_thread(self._sets.missing, "ranges", range_ids):
                addresses = await range_addresses(store, ns, range_id)
                added += await asyncio.to_thread(self._sets.add, "live", addresses)
                await asyncio.to_thread(self._sets.add, "ranges", [range_id])
                self.ranges_read += 1
            # Marked seen only once all its ranges are in: an error midway re-reads it next round.
            await asyncio.to_thread(self._sets.add, "metaranges", [metarange_id])
        return added

    async def live_among(self, addresses: list[str]) -> set[str]:
        """The addresses of ``addresses`` that are live again (to be rescued, not deleted)."""
        return await asyncio.to_thread(self._sets.present, "live", addresses)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._sets.close)

    async def __aenter__(self) -> Reverifier:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

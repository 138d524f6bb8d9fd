"""A model-based test of GC run record retirement (hypothesis RuleBasedStateMachine).

A real Graveler over a memory KV (wrapped to inject an unknown swap outcome) and a settable clock;
three runs whose records move as a mark and a sweep move them. Rules: start a run (its first
record), checkpoint, complete (``swept``), start a read (the pointer read) and finish it later
(the chunks read), move the clock, retention (keep 1 or 2 newest; a run whose sweep is unfinished
is protected, as the daemon protects the sweeps it runs), a stale writer losing its swap, and
crashes between steps: after the chunks before the swap, after the swap before the retirement,
and a swap whose answer is lost (TransientError).

Invariants, after every step:

- nothing referenced is deleted: every pointer names a whole record matching its digest;
- a reader never sees a missing chunk of the pointer it read when it reads within the grace (a
  later reader re-reads the pointer and gets the current record or none, never a corrupt one);
- the KV's pointers are the model's;
- the number of stored records stays bounded: after a collection, at most the pointers, the
  records retired within the grace, and the records crashes leaked (never tombstoned).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lakefs_core.errors import PreconditionFailedError, TransientError
from lakefs_core.kv.base import Expect
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.kv.ranges import prefix_end
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_gc.runs.record import RECORD_GRACE, FileDigest, RunRecord, RunRecords
from lakefs_gc.runs.retention import retire_old_runs
from tests.repos.support import Clock, HookedKV, fast_settings
from tests.support.profiles import examples

T = TypeVar("T")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
RUNS = [f"20261101T00000{i}000Z-0123456789abcdef" for i in range(3)]
FEW_RUNS = st.sampled_from(RUNS[:2]) | st.sampled_from(RUNS)  # mostly two: more moves per run
GRACE = RECORD_GRACE.total_seconds()


@dataclass
class Reader:
    run_id: str
    pointer: str
    at: datetime


@dataclass
class Run:
    pointer: str
    record: RunRecord
    swept: bool = False
    history: tuple[str, ...] = ()  # every pointer it had (a stale writer's)


class RunRecordMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.kv = HookedKV(MemoryKVStore())
        self.clock = Clock(T0)
        self.g = Graveler(self.kv, StoreRegistry(), fast_settings(), clock=self.clock)  # type: ignore[arg-type]
        self.run(self.g.create_repository("repo", "mem://runrecords/repo"))
        self.partition = self.run(self.g.repository("repo")).partition
        self.records = RunRecords(self.g, "repo")
        self.runs: dict[str, Run] = {}
        self.retired_runs: set[str] = set()
        self.readers: list[Reader] = []
        self.retirements: list[datetime] = []  # when each record was tombstoned
        self.leaked = 0  # records no tombstone names (crashes, unknown outcomes)
        self.versions = itertools.count(1)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    def record(self, run_id: str, state: str = "complete") -> RunRecord:
        n = next(self.versions)
        return RunRecord(
            run_id=run_id,
            repository="repo",
            state=state,  # type: ignore[arg-type]
            start_time=T0,
            end_time=T0,
            rules=None,
            files={f"_lakefs/retention/gc/unified/{run_id}/run.json": FileDigest(sha256="ab" * 32, size=n)},
            checkpoint=FileDigest(sha256=f"{n:064x}", size=n),
        )

    def moved(self, run_id: str, record: RunRecord, pointer: str) -> None:
        old = self.runs.get(run_id)
        history = () if old is None else (*old.history, old.pointer)
        self.runs[run_id] = Run(pointer, record, swept=record.state == "swept", history=history)

    def writable(self, run_id: str) -> bool:
        run = self.runs.get(run_id)
        return run_id not in self.retired_runs and (run is None or not run.swept)

    # -- writers -------------------------------------------------------------------------------------

    @rule(run_id=FEW_RUNS, state=st.sampled_from(["complete", "complete", "swept"]))
    def write(self, run_id: str, state: str) -> None:
        """A mark's first record, a checkpoint, or the sweep's end."""
        if not self.writable(run_id):
            return
        old = self.runs.get(run_id)
        record = self.record(run_id, state)
        pointer = self.run(self.records.write(record, replacing=None if old is None else old.pointer))
        if old is not None:
            self.retirements.append(self.clock())
        self.moved(run_id, record, pointer)

    @rule(run_id=FEW_RUNS, same=st.booleans())
    def stale_writer_loses(self, run_id: str, same: bool) -> None:
        """A writer that read an older pointer loses its swap; with ``same`` it wrote the winner's
        very bytes, so it tombstones the record the pointer names (which must survive)."""
        run = self.runs.get(run_id)
        if run is None or not run.history or not self.writable(run_id):
            return
        record = run.record if same else self.record(run_id)
        try:
            self.run(self.records.write(record, replacing=run.history[-1]))
        except PreconditionFailedError:
            self.retirements.append(self.clock())  # the loser's own record (or the winner's)
        else:
            raise AssertionError("a swap from a stale pointer succeeded")

    @rule(run_id=FEW_RUNS, crash=st.sampled_from(["after-chunks", "after-swap", "unknown"]))
    def crashed_write(self, run_id: str, crash: str) -> None:
        run = self.runs.get(run_id)
        if run is None or not self.writable(run_id):
            return
        record = self.record(run_id)
        raw = record.to_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        if crash == "unknown":

            def lost(op: str, partition: bytes, key: bytes) -> None:
                if op == "set_if" and key == kvkeys.gc_run_key(run_id):
                    raise TransientError("the answer was lost")

            self.kv.after.append(lost)
            try:
                self.run(self.records.write(record, replacing=run.pointer))
            except TransientError:
                pass
            finally:
                self.kv.after.remove(lost)
            self.leaked += 1  # the record replaced: never retired (the writer could not know)
            self.moved(run_id, record, digest)
            return
        self.run(self.records._store_chunks(self.partition, digest, raw))
        if crash == "after-chunks":
            self.leaked += 1  # the new record: no pointer, no tombstone
            return
        key = kvkeys.gc_run_key(run_id)
        self.run(self.kv.set_if(self.partition, key, digest.encode(), Expect.equals(run.pointer.encode())))
        self.leaked += 1  # the record replaced: the writer died before retiring it
        self.moved(run_id, record, digest)

    # -- readers, clock, retention ---------------------------------------------------------------------

    @rule(run_id=FEW_RUNS)
    def start_read(self, run_id: str) -> None:
        pointer = self.run(self.records.pointer(run_id))
        if pointer is not None:
            self.readers.append(Reader(run_id, pointer, self.clock()))

    @precondition(lambda self: self.readers)
    @rule(data=st.data())
    def finish_read(self, data: st.DataObject) -> None:
        reader = self.readers.pop(data.draw(st.integers(0, len(self.readers) - 1)))
        if self.clock() - reader.at < RECORD_GRACE:
            raw = self.run(self.records._whole(self.partition, reader.pointer, "model"))
            assert raw is not None and hashlib.sha256(raw).hexdigest() == reader.pointer
        else:  # stalled past the grace: a real read re-reads the pointer
            found = self.run(self.records.read(reader.run_id))
            run = self.runs.get(reader.run_id)
            if reader.run_id in self.retired_runs:
                assert found is None
            else:
                assert run is not None and found == (run.pointer, run.record)

    @rule(seconds=st.sampled_from([10, GRACE / 2, GRACE + 1]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(keep=st.integers(1, 2))
    def retention(self, keep: int) -> None:
        active = {r for r, run in self.runs.items() if not run.swept and r not in self.retired_runs}
        live = sorted((r for r in self.runs if r not in self.retired_runs), reverse=True)
        retired = self.run(retire_old_runs(self.records, keep=keep, protected=lambda: active))
        assert set(retired) == {r for r in live[keep:] if r not in active}
        self.retired_runs.update(retired)
        self.retirements.extend(self.clock() for _ in retired)
        self.check_bound()

    @rule()
    def collect(self) -> None:
        self.run(self.records.collect())
        self.check_bound()

    def check_bound(self) -> None:
        """Right after a collection: the pointers, those retired within the grace, the leaks."""
        cutoff = self.clock() - RECORD_GRACE
        recent = sum(1 for at in self.retirements if at > cutoff)
        pointers = len(self.live_pointers())
        stored = self.run(self.stored())
        assert len(stored) <= pointers + recent + self.leaked, (len(stored), pointers, recent, self.leaked)

    # -- invariants ------------------------------------------------------------------------------------

    def live_pointers(self) -> dict[str, str]:
        return {r: run.pointer for r, run in self.runs.items() if r not in self.retired_runs}

    async def stored(self) -> set[str]:
        start = kvkeys.GC_RUN_RECORDS_PREFIX
        keys = [e.key async for e in self.kv.scan(self.partition, start, end=prefix_end(start))]
        return {k[len(start) :].decode() for k in keys if b"/" not in k[len(start) :]}

    @invariant()
    def pointers_are_the_models_and_name_whole_records(self) -> None:
        assert self.run(self.records.run_ids()) == sorted(self.live_pointers(), reverse=True)
        for run_id, pointer in self.live_pointers().items():
            assert self.run(self.records.pointer(run_id)) == pointer
            raw = self.run(self.records._whole(self.partition, pointer, "model"))
            assert raw is not None and hashlib.sha256(raw).hexdigest() == pointer

    @invariant()
    def readers_within_the_grace_find_their_chunks(self) -> None:
        for reader in self.readers:
            if self.clock() - reader.at < RECORD_GRACE:
                raw = self.run(self.records._whole(self.partition, reader.pointer, "model"))
                assert raw is not None and hashlib.sha256(raw).hexdigest() == reader.pointer


RunRecordMachine.TestCase.settings = settings(
    max_examples=examples(2),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRunRecordModel = RunRecordMachine.TestCase

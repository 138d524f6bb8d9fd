"""GC run records do not grow the KV forever, on the persistent KV drivers (SQLite, PostgreSQL,
DynamoDB on moto_server; the memory store is the model test's, ``test_run_record_model.py``).

- A checkpoint's swap retires the record it replaced; the chunks stay for the grace (a reader that
  read the old pointer can still read them), then the next write's collection deletes them, after
  re-reading the pointer.
- A swap that definitely failed retires the loser's record, never the winner's (same bytes too); an
  unknown outcome (TransientError) retires nothing.
- A reader whose chunks were collected under it (stalled past the grace) re-reads the moved pointer.
- Retention keeps the newest runs, never a protected one; retired runs' chunks go after the grace.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from lakefs_core.errors import PreconditionFailedError, TransientError
from lakefs_core.kv import open_kv
from lakefs_core.kv.ranges import prefix_end
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_gc.runs.record import CHUNK_BYTES, RECORD_GRACE, FileDigest, RunRecord, RunRecords
from lakefs_gc.runs.retention import retire_old_runs
from tests.repos.support import Clock, HookedKV, fast_settings, unique
from tests.support.kv import kv_url_for

T0 = datetime(2026, 11, 1, tzinfo=UTC)
RUN = "20261101T000000000Z-0123456789abcdef"
PAST_GRACE = RECORD_GRACE.total_seconds() + 1


class Env:
    def __init__(self, g: Graveler, kv: HookedKV, clock: Clock, repo: str) -> None:
        self.g, self.kv, self.clock, self.repo = g, kv, clock, repo
        self.records = RunRecords(g, repo)

    def rec(self, run_id: str = RUN, files: int = 2, n: int = 0) -> RunRecord:
        return record_of(run_id, files, n, self.repo)

    async def partition(self) -> bytes:
        return (await self.g.repository(self.repo)).partition

    async def keys(self, prefix: bytes) -> list[bytes]:
        p = await self.partition()
        return [e.key async for e in self.kv.scan(p, prefix, end=prefix_end(prefix))]

    async def chunk_sets(self) -> set[str]:
        """The digests of every record stored (its first chunk present)."""
        start = kvkeys.GC_RUN_RECORDS_PREFIX
        return {k[len(start) :].decode() for k in await self.keys(start) if b"/" not in k[len(start) :]}


@pytest.fixture(params=["sqlite", "postgres", "dynamodb"])  # memory: the model test
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """A fresh store's URL (resolved synchronously; PostgreSQL: the session database, whose
    repositories' partitions are new per test)."""
    return kv_url_for(request.param, request, sqlite_url)


@pytest.fixture
async def env(kv_url: str, tmp_path: object) -> AsyncIterator[Env]:
    kv = HookedKV(await open_kv(kv_url))
    clock = Clock(T0)
    g = Graveler(kv, StoreRegistry(), fast_settings(), clock=clock)  # type: ignore[arg-type]
    try:
        repo = unique()  # PostgreSQL: the session's database
        await g.create_repository(repo, f"local://{tmp_path}/ns")
        yield Env(g, kv, clock, repo)
    finally:
        await kv.inner.close()


def record_of(run_id: str = RUN, files: int = 2, n: int = 0, repo: str = "") -> RunRecord:
    digest = FileDigest(sha256="ab" * 32, size=123_456)
    return RunRecord(
        run_id=run_id,
        repository=repo,
        state="complete",
        start_time=T0,
        end_time=T0,
        rules=None,
        files={
            f"_lakefs/retention/gc/unified/{run_id}/deleted.text/part-{i:05d}": digest for i in range(files)
        },
        checkpoint=None if n == 0 else FileDigest(sha256=f"{n:064x}", size=n),
    )


async def test_checkpoints_keep_the_current_record_and_those_within_the_grace(env: Env) -> None:
    big = 1500  # 2 chunks: the later one goes too
    pointer = await env.records.write(env.rec(files=big), replacing=None)
    first = pointer
    # A reader reads the pointer now and its chunks after the next checkpoint (within the grace).
    for n in range(1, 4):
        pointer = await env.records.write(env.rec(files=big, n=n), replacing=pointer)
        env.clock.advance(60)
    assert len(await env.chunk_sets()) == 4  # all superseded within the grace: kept
    assert len(env.rec(files=big).to_bytes()) > CHUNK_BYTES
    assert await env.records._whole(await env.partition(), first, "test") == env.rec(files=big).to_bytes()
    env.clock.advance(PAST_GRACE)
    previous = pointer
    pointer = await env.records.write(env.rec(files=big, n=9), replacing=pointer)
    # The 4 retired before the grace are collected, each with its chunks; the one just replaced stays.
    assert await env.chunk_sets() == {previous, pointer}
    assert await env.keys(kvkeys.GC_RUN_GARBAGE_PREFIX) == [kvkeys.gc_run_garbage_key(previous)]
    env.clock.advance(PAST_GRACE)
    assert await env.records.collect() == 1
    assert await env.chunk_sets() == {pointer}
    stored = await env.keys(kvkeys.GC_RUN_RECORDS_PREFIX)
    assert len(stored) == 2 and all(k.startswith(kvkeys.gc_run_record_key(pointer)) for k in stored)
    assert await env.keys(kvkeys.GC_RUN_GARBAGE_PREFIX) == []
    assert await env.records.read(RUN) == (pointer, env.rec(files=big, n=9))


async def test_a_stalled_reader_re_reads_the_moved_pointer(env: Env) -> None:
    old = await env.records.write(env.rec(), replacing=None)
    stalled: list[bool] = []
    new = ""

    async def stall(op: str, partition: bytes, key: bytes) -> None:
        nonlocal new
        # The reader read the pointer; before it reads the chunks, the record moves and (past the
        # grace) the old one is collected under it.
        if op == "get" and key == kvkeys.gc_run_key(RUN) and not stalled:
            stalled.append(True)
            new = await env.records.write(env.rec(n=1), replacing=old)
            env.clock.advance(PAST_GRACE)
            await env.records.collect()

    env.kv.after.append(stall)
    found = await env.records.read(RUN)
    assert old not in await env.chunk_sets()  # it was collected under the reader
    assert found == (new, env.rec(n=1))  # never "no record", never corrupt


async def test_a_lost_swap_retires_the_losers_record_not_the_winners(env: Env) -> None:
    base = await env.records.write(env.rec(), replacing=None)
    winner = await env.records.write(env.rec(n=1), replacing=base)
    # A stale writer (it read base) writes other bytes: it loses, its record is garbage.
    with pytest.raises(PreconditionFailedError):
        await env.records.write(env.rec(n=2), replacing=base)
    # A stale writer of the winner's very bytes loses too, and retires them: the pointer keeps them.
    with pytest.raises(PreconditionFailedError):
        await env.records.write(env.rec(n=1), replacing=base)
    env.clock.advance(PAST_GRACE)
    assert await env.records.collect() == 2  # base and the loser's
    assert await env.chunk_sets() == {winner}
    assert await env.records.read(RUN) == (winner, env.rec(n=1))


async def test_an_unknown_swap_outcome_retires_nothing(env: Env) -> None:
    base = await env.records.write(env.rec(), replacing=None)

    def unknown(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and key == kvkeys.gc_run_key(RUN):
            raise TransientError("the swap's answer was lost")

    env.kv.after.append(unknown)  # the swap happened; the writer cannot know
    with pytest.raises(TransientError):
        await env.records.write(env.rec(n=1), replacing=base)
    env.kv.after.clear()
    assert await env.keys(kvkeys.GC_RUN_GARBAGE_PREFIX) == []
    env.clock.advance(PAST_GRACE)
    assert await env.records.collect() == 0
    new = hashlib.sha256(env.rec(n=1).to_bytes()).hexdigest()
    assert await env.chunk_sets() == {base, new}
    assert await env.records.read(RUN) == (new, env.rec(n=1))


async def test_retention_keeps_the_newest_runs_and_protected_ones(env: Env) -> None:
    runs = [f"2026110{d}T000000000Z-0123456789abcdef" for d in range(1, 6)]
    pointers = {}
    for run in runs:
        p = await env.records.write(env.rec(run), replacing=None)
        pointers[run] = await env.records.write(env.rec(run, n=1), replacing=p)
    protected = runs[1]
    retired = await retire_old_runs(env.records, keep=2, protected=lambda: {protected})
    assert sorted(retired) == [runs[0], runs[2]]
    assert await env.records.run_ids() == sorted([*runs[3:], protected], reverse=True)
    assert len(await env.chunk_sets()) == 2 * len(runs)  # nothing deleted within the grace
    env.clock.advance(PAST_GRACE)
    await retire_old_runs(env.records, keep=2, protected=lambda: {protected})
    assert await env.chunk_sets() == {pointers[r] for r in [*runs[3:], protected]}
    for run in [*runs[3:], protected]:
        assert await env.records.read(run) == (pointers[run], env.rec(run, n=1))
    assert await env.records.read(runs[0]) is None


async def test_a_retired_record_named_again_is_not_deleted(env: Env) -> None:
    base = await env.records.write(env.rec(), replacing=None)
    await env.records.write(env.rec(n=1), replacing=base)  # base retired
    # A pointer names base again (an equal record written again): its tombstone must not delete it.
    partition = await env.partition()
    stone = await env.kv.get(partition, kvkeys.gc_run_garbage_key(base))
    moved = await env.records.write(env.rec(), replacing=await env.records.pointer(RUN))
    assert moved == base
    await env.kv.set(partition, kvkeys.gc_run_garbage_key(base), stone)  # as if retired just before
    env.clock.advance(PAST_GRACE)
    await env.records.collect()
    assert await env.records.read(RUN) == (base, env.rec())
    assert base in await env.chunk_sets()
    assert await env.keys(kvkeys.GC_RUN_GARBAGE_PREFIX) == []

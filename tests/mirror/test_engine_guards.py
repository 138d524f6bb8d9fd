"""The mirroring engine's last-line safety checks, each shown to matter on real drivers.

- The region lease is re-checked right before a promotion: a daemon that stalled past its lease's
  TTL in mid-pass, while another daemon took the lease over, must not move a mirror branch (two
  daemons promoting at once could move it backwards). The take-over happens on the real SQL lease;
  only its timing is arranged, by a wrapper around the engine's lease contender.
- A source commit record whose fields do not hash to its id is never copied: not as the root commit
  that seeds a new mirror repository (which is stored without the facade's own check), and not in
  the middle of a history (then nothing of that history is copied).

Real stores throughout (memory KV and block stores, the SQLite mirrors database); clocks are
injected, and the corruption is written straight into the source's KV, as a bad disk or a buggy
writer would leave it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakefs_core.errors import NotFoundError
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Commit
from lakefs_core.service.lease import Lease, LeaseState
from tests.mirror.test_engine import World, add_mirror, open_world, write_commit
from tests.repos.support import Clock

START = datetime(2026, 1, 1, tzinfo=UTC)
TTL = 30.0


async def corrupt_source_commit(w: World, commit_id: str) -> Commit:
    """Rewrite a stored source commit's message in place: its fields no longer hash to its id."""
    repo = await w.src.repository("origin")
    stored = await w.src.get_commit_by_id("origin", commit_id)
    forged = replace(stored, message=stored.message + " (rewritten)", raw=None)
    assert forged.id == commit_id and forged.computed_id() != commit_id
    await w.src.kv.set(repo.partition, kvkeys.commit_key(commit_id), forged.to_bytes())
    return forged


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with open_world(tmp_path, Clock(START)) as w:  # the engines' wall clock: lease expiry
        yield w


# -- the lease re-check before promotion -------------------------------------------------------------


class TakenOverMidPass:
    """The engine's real lease contender; right after its first successful acquire (the start of a
    pass), this daemon stalls past the TTL and ``rival`` takes the lease over. Later calls go to the
    real lease, which now answers for itself."""

    def __init__(self, inner: Lease, rival: Lease, clock: Clock) -> None:
        self.inner, self.rival, self.clock = inner, rival, clock
        self.acquires = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def holder(self) -> str:
        return self.inner.holder

    async def try_acquire(self, now: datetime | float | None = None) -> bool:
        got = await self.inner.try_acquire(now)
        self.acquires += 1
        if self.acquires == 1 and got:
            self.clock.advance(TTL + 1)  # a long GC pause, a slow store...
            assert await self.rival.try_acquire(self.clock())  # the standby takes over
        return got

    async def renew(self, now: datetime | float | None = None) -> bool:
        return await self.inner.renew(now)

    async def release(self) -> bool:
        return await self.inner.release()

    async def current(self) -> LeaseState | None:
        return await self.inner.current()


async def test_a_daemon_that_lost_its_lease_mid_pass_does_not_promote(world: World) -> None:
    w = world
    head = await write_commit(w.src, 5, "a")
    mid = await add_mirror(w)
    await w.replicate()  # the head is complete in the mirror's namespace: promotable on sight
    a, b = w.engine("daemon-a", lease_ttl_seconds=TTL), w.engine("daemon-b", lease_ttl_seconds=TTL)
    assert isinstance(w.clock, Clock)
    a.lease = TakenOverMidPass(a.lease, b.lease, w.clock)

    report = await a.step()
    assert report.active  # it held the lease when the pass began
    assert report.promotions == 0, report
    assert any("lost the region lease" in e for e in report.errors), report.errors
    assert a.lease.acquires == 2  # the start of the pass, and the re-check before promoting
    root = (await w.src.get_commit("origin", "main~1")).id
    assert (await w.dst.branch("mirror", "main")).commit_id == root != head
    status = {s.branch: s for s in await w.db.list_status(mid)}["main"]
    assert status.mirror_head == root and status.candidate == head
    assert status.last_error is not None and "lost the region lease" in status.last_error
    assert status.last_promotion_at is None
    holder = await w.db.lease("eu")
    assert holder is not None and holder.holder == "daemon-b"

    # The new holder promotes; the old one stays on standby.
    assert (await b.step()).promotions == 1
    assert (await w.dst.branch("mirror", "main")).commit_id == head
    assert not (await a.step()).active


# -- commit records that do not hash to their ids ----------------------------------------------------


async def test_a_corrupt_source_root_commit_does_not_seed_the_mirror(world: World) -> None:
    """The root commit seeds the mirror repository through create_repository, which stores it
    verbatim (no facade check): only the engine's own check stands between it and the mirror."""
    w = world
    await write_commit(w.src, 2, "a")
    root = (await w.src.get_commit("origin", "main~1")).id
    forged = await corrupt_source_commit(w, root)
    await add_mirror(w)
    await w.replicate()

    report = await w.engine("daemon-a", lease_ttl_seconds=TTL).step()
    assert report.active and report.promotions == 0 and report.commits_copied == 0
    assert any("does not hash" in e and root in e for e in report.errors), report.errors
    with pytest.raises(NotFoundError):
        await w.dst.repository("mirror")  # not created around the forged record
    async for repo in w.dst.list_repositories():
        assert not await w.dst.has_commit(repo.id, forged.id), repo.id


async def test_a_corrupt_commit_in_the_history_stops_the_whole_copy(world: World) -> None:
    """A forged commit in the middle of a history: the engine refuses it while walking, before it
    writes anything, so no commit of that history (not even its intact ancestors) is copied and the
    mirror branch stays put."""
    w = world
    await add_mirror(w)
    engine = w.engine("daemon-a", lease_ttl_seconds=TTL)
    assert (await engine.step()).promotions == 0  # the mirror repository exists, seeded with root
    root = (await w.dst.branch("mirror", "main")).commit_id
    c1 = await write_commit(w.src, 2, "one")
    c2 = await write_commit(w.src, 2, "two")
    c3 = await write_commit(w.src, 2, "three")
    await corrupt_source_commit(w, c2)
    await w.replicate()

    report = await engine.step()
    assert report.promotions == 0 and report.commits_copied == 0, report
    assert any(f"source commit {c2} does not hash" in e for e in report.errors), report.errors
    for cid in (c1, c2, c3):
        assert not await w.dst.has_commit("mirror", cid), cid
    assert (await w.dst.branch("mirror", "main")).commit_id == root

"""Crash safety of the real daemon: ``kill -9`` at random moments, and two daemons for one region.

Both tests run ``python -m lakefs_mirror run --config FILE`` as subprocesses (each in its own process
group, killed by group in ``finally``) over the embedded default: two "regions" that are local
directories with a SQLite KV store each, and one SQLite mirrors database. The mirror is in ``active``
mode with a 0.5 s grace, so the daemon itself copies what is still missing after it; a
:class:`~tests.mirror.replication.ReplicationSimulator` delivers (and drops) keys concurrently, the
way S3 Replication would, so both copy paths race. A writer in the test process keeps committing to
the source repository throughout.

The daemons the kill -9 test kills are forked from a pre-imported ``lakefs-mirror``
(:mod:`tests.support.zygote`): real processes in their own session running ``lakefs_mirror.cli.main``
whose ~0.85 s of imports happened once before the fork; its last daemon, which runs to the end and
stops on SIGTERM, and the two-daemon test's (without address randomisation) are fresh processes.

The invariant is checked from outside the daemon, from the KV store and a LISTING of the destination
directory: whenever the mirror branch head is seen to move (polled every 0.1 s), after every kill,
and at the end, every metarange, range and data object of the head is present with the right size,
and the new head descends from the previous one (the mirror never goes backwards).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from lakefs_core.block import LocalBlockStore
from lakefs_core.errors import NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.db import MirrorsDB
from tests.mirror.replication import ReplicationSimulator, commit_keys, list_namespace, missing_keys
from tests.support.moto import free_port
from tests.support.timing import scaled
from tests.support.zygote import ForkedPopen, Zygote

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC, DST = "us-east-1", "eu-west-1"
REPO, MIRROR = "origin", "origin-mirror"
API_KEY, API_SECRET = "AKIACRASHTEST", "crash-test-secret"


@functools.cache
def no_aslr_prefix() -> tuple[str, ...]:
    """``setarch -R`` when it works here: with address randomisation off, per-process values derived
    from object addresses repeat across processes (two daemons must still get distinct lease holders)."""
    exe = shutil.which("setarch")
    if exe is None:
        return ()
    try:
        done = subprocess.run([exe, "-R", "true"], capture_output=True, timeout=scaled(10), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (exe, "-R") if done.returncode == 0 else ()


class Daemon:
    """One ``lakefs_mirror run`` subprocess in its own process group; stderr appended to ``log_path``."""

    def __init__(
        self, name: str, config: Path, log_path: Path, *, no_aslr: bool = False, zygote: Zygote | None = None
    ) -> None:
        self.name = name
        self.config = config
        self.log_path = log_path
        self.port = free_port()
        self.no_aslr = no_aslr
        self.zygote = zygote  # the daemons to kill fork from it; start(fresh=True) does not
        self.proc: subprocess.Popen[bytes] | ForkedPopen | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, fresh: bool = False) -> None:
        assert not self.alive
        env = dict(os.environ, LAKEFS_MIRROR__LISTEN=f"127.0.0.1:{self.port}")
        prefix = no_aslr_prefix() if self.no_aslr else ()
        cmd = [*prefix, sys.executable, "-m", "lakefs_mirror", "run", "--config", str(self.config)]
        with self.log_path.open("ab") as err:
            err.write(f"---- start #{self.starts} of {self.name}\n".encode())
            err.flush()
            if self.zygote is not None and not fresh:
                with open(os.devnull, "wb") as out:
                    self.proc = self.zygote.popen(
                        ["lakefs-mirror", "run", "--config", str(self.config)],
                        env,
                        stdout=out.fileno(),
                        stderr=err.fileno(),
                        cwd=str(REPO_ROOT),
                    )
            else:
                self.proc = subprocess.Popen(
                    cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
                )
        self.starts += 1

    def kill(self, sig: int = signal.SIGKILL, timeout: float = scaled(15.0)) -> int | None:
        """Signal the daemon's process group (only while the daemon is unreaped, so the group id is
        still its own) and reap it; returns its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=scaled(10))
        return proc.returncode

    async def metrics(self, http: aiohttp.ClientSession) -> dict[str, float] | None:
        """``lease_held`` and the sum of ``promotions_total`` from ``GET /metrics``; None if unreachable."""
        if not self.alive:
            return None
        try:
            async with http.get(f"{self.base}/metrics", timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status != 200:
                    return None
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        out = {"lease_held": 0.0, "promotions": 0.0}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "lakefs_mirror_lease_held":
                    out["lease_held"] = sample.value
                elif sample.name == "lakefs_mirror_promotions_total":
                    out["promotions"] += sample.value
        return out

    async def wait_healthy(self, http: aiohttp.ClientSession, within: float = scaled(60)) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not self.alive:
                raise AssertionError(f"{self.name} exited: {self.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(f"{self.base}/_health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} did not become healthy: {self.log_tail()}")

    async def wait_active(self, http: aiohttp.ClientSession, within: float) -> None:
        """Until this daemon holds the lease; ``within`` (scaled here) bounds a daemon that never takes it."""
        within = scaled(within)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            m = await self.metrics(http)
            if m is not None and m["lease_held"] == 1:
                return
            if not self.alive:
                raise AssertionError(f"{self.name} exited: {self.log_tail()}")
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} did not take the lease in {within} s: {self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Rig:
    """Two local regions, the source writer, the mirror observer and the invariant checks."""

    root: Path
    src: Graveler
    dst: Graveler
    db: MirrorsDB
    src_store: LocalBlockStore
    dst_store: LocalBlockStore
    config: Path
    heads: list[str] = field(default_factory=list)
    moved: asyncio.Event = field(default_factory=asyncio.Event)  # set whenever a new head is recorded
    checks: int = 0
    commits: int = 0

    async def write_commit(self, rng: random.Random) -> str:
        """Two new objects and a rewrite of one of a few "hot" paths, committed."""
        objects = Objects(self.src)
        n = self.commits
        for i in range(2):
            await objects.upload(REPO, "main", f"log/{n:04d}-{i}", f"entry {n} {i}\n".encode() * (1 + n % 5))
        await objects.upload(REPO, "main", f"hot/{rng.randrange(3)}", f"state {n}\n".encode() * (1 + n % 9))
        self.commits += 1
        return (await self.src.commit(REPO, "main", committer="crash", message=f"c{n}")).id

    async def source_head(self) -> str:
        return (await self.src.branch(REPO, "main")).commit_id

    async def mirror_head(self) -> str | None:
        try:
            return (await self.dst.branch(MIRROR, "main")).commit_id
        except NotFoundError:
            return None

    async def assert_history_in_mirror(self, head: str) -> None:
        """Every ancestor of the mirror head is in the mirror's own KV store (copied before promotion)."""
        repo = await self.dst.repository(MIRROR)
        stack, seen = [head], set()
        while stack:
            cid = stack.pop()
            if cid not in seen:
                seen.add(cid)
                stack.extend((await self.dst.refs.get_commit(repo, cid)).parents)

    async def descends(self, commit_id: str, ancestor_id: str) -> bool:
        repo = await self.src.repository(REPO)
        stack, seen = [commit_id], set()
        while stack:
            cid = stack.pop()
            if cid == ancestor_id:
                return True
            if cid in seen:
                continue
            seen.add(cid)
            stack.extend((await self.src.refs.get_commit(repo, cid)).parents)
        return False

    async def check(self, when: str) -> str | None:
        """THE invariant for the current mirror head; records it if new (and checks it moved forward)."""
        head = await self.mirror_head()
        if head is None:
            return None
        listing = await list_namespace(self.dst_store, "")
        missing = missing_keys(await commit_keys(self.src, REPO, head), listing)
        self.checks += 1
        assert not missing, f"{when}: mirror head {head[:12]} lacks {len(missing)} key(s): {missing[:5]}"
        await self.assert_history_in_mirror(head)
        if not self.heads or self.heads[-1] != head:
            if self.heads:
                assert await self.descends(head, self.heads[-1]), f"{when}: the mirror went backwards"
            self.heads.append(head)
            self.moved.set()
        return head

    async def watch(self, stop: asyncio.Event) -> None:
        """Check the invariant at every observed head move until ``stop``."""
        while not stop.is_set():
            head = await self.mirror_head()
            if head is not None and (not self.heads or head != self.heads[-1]):
                await self.check("after an observed promotion")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    async def assert_same_history(self) -> None:
        mirrored = [c.id async for c in self.dst.log(MIRROR, "main")]
        assert mirrored == [c.id async for c in self.src.log(REPO, "main")]


@asynccontextmanager
async def rig(tmp_path: Path, *, lease_ttl: float) -> AsyncIterator[Rig]:
    storage = {r: tmp_path / r / "storage" for r in (SRC, DST)}
    for path in storage.values():
        path.mkdir(parents=True)
    kv_urls = {r: f"sqlite:///{tmp_path / r / 'kv.sqlite3'}" for r in (SRC, DST)}
    src_ns, dst_ns = storage[SRC] / REPO, storage[DST] / MIRROR
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'mirrors.sqlite3'}"
    config = {
        "region": DST,
        "regions": {r: {"kv_url": kv_urls[r], "local_roots": [str(storage[r])]} for r in (SRC, DST)},
        "mirrors_db_url": db_url,
        "listen": "127.0.0.1:0",
        "access_keys": [{"access_key_id": API_KEY, "secret_access_key": API_SECRET}],
        "poll_interval_seconds": 0.05,
        "negative_cooldown_seconds": 0,
        "active_copy_grace_seconds": 0.5,  # what replication drops is copied by the daemon after 0.5 s
        "lease_ttl_seconds": lease_ttl,
        "state_dir": str(tmp_path / DST / "state"),
        "log_level": "INFO",
    }
    config_path = tmp_path / "mirror.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    kvs: list[KVStore] = []
    closers: list[Any] = []
    try:
        for r in (SRC, DST):
            kvs.append(await open_kv(kv_urls[r]))
        src = Graveler(kvs[0], StoreRegistry())
        dst = Graveler(kvs[1], StoreRegistry())
        closers += [src.stores, dst.stores]
        await src.create_repository(REPO, f"local://{src_ns}")
        dst_ns.mkdir()
        db = await MirrorsDB.open(db_url)
        closers.append(db)
        await db.create_mirror(
            source_repo=REPO,
            source_region=SRC,
            name=MIRROR,
            region=DST,
            storage_namespace=f"local://{dst_ns}",
            mode="active",
        )
        src_store, dst_store = LocalBlockStore(src_ns), LocalBlockStore(dst_ns)
        closers += [src_store, dst_store]
        yield Rig(tmp_path, src, dst, db, src_store, dst_store, config_path)
    finally:
        for closer in reversed(closers):
            await closer.close()
        for kv in kvs:
            await kv.close()


@asynccontextmanager
async def background(
    rig: Rig, seed: int, *, commit_every: tuple[float, float]
) -> AsyncIterator[asyncio.Event]:
    """The writer, the replication simulator and the head watcher, until the yielded event is set
    (the writer alone stops at ``stop_writer``: set it, then the rest winds down on exit).

    The writer's gaps are drawn from ``commit_every``; some must exceed the 0.5 s grace plus a pass,
    since the engine validates only the newest head: a source that always commits faster than
    missing objects arrive starves the mirror (each newest head has an object still in flight)."""
    stop_writer = asyncio.Event()
    stop_watch = asyncio.Event()
    rng = random.Random(seed)

    async def writer() -> None:
        while not stop_writer.is_set():
            await rig.write_commit(rng)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_writer.wait(), rng.uniform(*commit_every))

    sim = ReplicationSimulator(
        rig.src_store, "", rig.dst_store, "", seed=seed, max_delay=1.0, drop_fraction=0.3, workers=4
    )
    async with sim:
        tasks = [asyncio.create_task(writer()), asyncio.create_task(rig.watch(stop_watch))]
        try:
            yield stop_writer
        finally:
            stop_writer.set()
            stop_watch.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    log.info("writer: %d commits; replication: %s", rig.commits, sim.stats)


async def catch_up(rig: Rig, daemon: Daemon, within: float = scaled(60)) -> str:
    head = await rig.source_head()
    deadline = time.monotonic() + within
    while await rig.mirror_head() != head:
        if time.monotonic() > deadline or not daemon.alive:
            raise AssertionError(
                f"the mirror did not reach {head[:12]} in {within} s (at {await rig.mirror_head()}): "
                f"{daemon.log_tail()}"
            )
        await asyncio.sleep(0.1)
    await rig.check("at the end")
    await rig.assert_same_history()
    return head


def now_utc() -> datetime:
    return datetime.now(UTC)


# -- kill -9 at random moments ---------------------------------------------------------------------------


KILLS = 8
# What ``lakefs-mirror run`` imports, for the zygote the killed daemons fork from.
MIRROR_MODULES = (
    "lakefs_mirror.commands",
    "lakefs_mirror.service",
    "lakefs_core.sqlengine",
    "lakefs_core.repos.objects",
    "lakefs_core.repos.committing",
    "lakefs_core.repos.importing",
    "lakefs_core.repos.purge",
    "lakefs_core.kv.sqlite",
    "aiosqlite",
    "uvloop",
    "yaml",
)


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    with Zygote("lakefs_mirror.cli:main", MIRROR_MODULES) as z:
        yield z


async def test_kill9_during_validation_and_promotion_keeps_the_invariant(
    tmp_path: Path, zygote: Zygote
) -> None:
    """Eight SIGKILLs of the daemon process group while commits keep landing: half at a random moment
    of an active daemon's work (copying commits, validating, healing), half right after a promotion
    is observed (status recording, the next validation). After every kill the mirror head is complete
    in the destination; at the end a restarted daemon catches up to the source head."""
    rng = random.Random(2024)
    started = time.monotonic()
    after_promotion = 0  # kills that followed an observed promotion
    async with rig(tmp_path, lease_ttl=1.0) as r, aiohttp.ClientSession() as http:
        daemon = Daemon("daemon", r.config, tmp_path / "daemon.log", zygote=zygote)
        try:
            async with background(r, seed=7, commit_every=(0.1, 1.2)):
                for n in range(KILLS):
                    daemon.start()
                    await daemon.wait_healthy(http)
                    await daemon.wait_active(http, within=30)  # the killed one's lease must expire first
                    if n % 2 == 0:
                        await asyncio.sleep(rng.uniform(0.05, 1.0))
                    else:
                        r.moved.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(r.moved.wait(), scaled(20))
                        after_promotion += r.moved.is_set()
                    assert daemon.kill() == -signal.SIGKILL
                    await r.check(f"after kill {n + 1}")
                # Let the writer stop, then a daemon runs undisturbed to the end.
            daemon.start(fresh=True)
            await daemon.wait_healthy(http)
            await daemon.wait_active(http, within=30)  # also: its SIGTERM handler is installed by now
            await catch_up(r, daemon)
            assert daemon.kill(signal.SIGTERM) == 0, daemon.log_tail()
        finally:
            daemon.kill()
        log.info(
            "%d kills (%d right after a promotion), %d heads seen, %d invariant checks, %.1f s",
            KILLS,
            after_promotion,
            len(r.heads),
            r.checks,
            time.monotonic() - started,
        )
        assert after_promotion >= KILLS // 4, "the mirror hardly moved between kills"
        assert "Traceback" not in daemon.log_path.read_text(), daemon.log_tail(60)


# -- two daemons for one region ----------------------------------------------------------------------------


async def test_two_daemons_one_region_only_the_lease_holder_promotes(tmp_path: Path) -> None:
    """Two daemons for the same region, same configuration (different listen ports), started together
    (under ``setarch -R`` when possible). Scraped from each one's ``/metrics`` every 0.1 s: never both
    hold the lease, and only one ever promotes. SIGKILL the active one: the standby takes over, but
    only after the dead one's lease (2 s) has expired; the restarted daemon stays on standby."""
    async with rig(tmp_path, lease_ttl=2.0) as r, aiohttp.ClientSession() as http:
        daemons = [
            Daemon(f"daemon-{i}", r.config, tmp_path / f"daemon-{i}.log", no_aslr=True) for i in (0, 1)
        ]
        samples: list[tuple[float, list[dict[str, float] | None]]] = []
        leases: list[tuple[datetime, str, datetime]] = []  # (seen at, holder, expires at)

        async def poll(stop: asyncio.Event) -> None:
            while not stop.is_set():
                ms = list(await asyncio.gather(*(d.metrics(http) for d in daemons)))
                samples.append((time.monotonic(), ms))
                lease = await r.db.lease(DST)
                if lease is not None:
                    leases.append((now_utc(), lease.holder, lease.expires_at))
                both = [m for m in ms if m is not None and m["lease_held"] == 1]
                assert len(both) <= 1, f"two daemons hold the lease at once: {ms}"
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.1)

        async def promotions(i: int) -> float:
            m = await daemons[i].metrics(http)
            return -1.0 if m is None else m["promotions"]

        stop_poll = asyncio.Event()
        poller = asyncio.create_task(poll(stop_poll))
        try:
            async with background(r, seed=3, commit_every=(0.1, 1.0)):
                for d in daemons:
                    d.start()
                for d in daemons:
                    await d.wait_healthy(http)
                deadline = time.monotonic() + scaled(60)
                while max(await promotions(0), await promotions(1)) < 3:
                    assert time.monotonic() < deadline, [d.log_tail() for d in daemons]
                    await asyncio.sleep(0.1)
                counts = [await promotions(0), await promotions(1)]
                active = 0 if counts[0] > 0 else 1
                standby = 1 - active
                assert counts[standby] == 0, counts
                before = await r.db.lease(DST)
                assert before is not None
                await asyncio.sleep(0.5)

                # The active daemon dies: the standby waits for the lease to expire, then takes over.
                old = await r.db.lease(DST)
                assert old is not None and old.holder == before.holder
                killed_at = now_utc()
                assert daemons[active].kill() == -signal.SIGKILL
                await daemons[standby].wait_active(http, within=30)
                deadline = time.monotonic() + scaled(30)
                while await promotions(standby) < 1:
                    assert time.monotonic() < deadline, daemons[standby].log_tail()
                    await asyncio.sleep(0.05)
                # The poller samples the lease every ~0.1 s: wait for it to record the new holder.
                deadline = time.monotonic() + scaled(30)
                while not (took_over := [seen for seen, holder, _ in leases if holder != old.holder]):
                    assert time.monotonic() < deadline, leases[-3:]
                    await asyncio.sleep(0.05)
                last_old = max(expires for _, holder, expires in leases if holder == old.holder)
                assert took_over[0] >= last_old, (took_over[0], last_old)
                log.info(
                    "takeover %.2f s after the kill (lease expired %.2f s after it)",
                    (took_over[0] - killed_at).total_seconds(),
                    (last_old - killed_at).total_seconds(),
                )

                # The killed daemon comes back as the standby and never promotes.
                daemons[active].start()
                await daemons[active].wait_healthy(http)
                await asyncio.sleep(1.5)
            await catch_up(r, daemons[standby])
            assert await promotions(active) == 0
            back = await daemons[active].metrics(http)
            assert back is not None and back["lease_held"] == 0
        finally:
            stop_poll.set()
            with contextlib.suppress(Exception):
                await poller
            for d in daemons:
                d.kill()
        failure = poller.exception() if poller.done() and not poller.cancelled() else None
        if failure is not None:
            raise failure
        # Over the whole run, per poll interval, at most one daemon's promotion counter went up.
        for (_, prev), (_, cur) in itertools.pairwise(samples):
            rising = []
            for was, now in zip(prev, cur, strict=True):
                if was is not None and now is not None and now["promotions"] > was["promotions"]:
                    rising.append(now)
            assert len(rising) <= 1, (prev, cur)
        for d in daemons:
            assert "Traceback" not in d.log_path.read_text(), d.log_tail(60)

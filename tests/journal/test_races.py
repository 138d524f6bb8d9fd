"""An upload and the reconciler cannot both win (issue 32, item 5): an upload stalled right before its
staging write (held by a hook of its KV connection, after its PUTs) races the hard-delete reconciler
(another Graveler on another connection, its clock past the upload's pending timeout), many rounds,
single and batch uploads, in every order: the reconciler's whole pass before the staging write, the
staging write before the pass, the staging write let go right before or right after the
reconciler's claim (hooks of the reconciler's connection), and both at once. Each round exactly one
wins: either the upload returned, its entries are staged and every object is there, or the upload
failed (ConflictError), nothing of it is staged and the reconciler deleted its objects. Never an
entry staged whose object is gone, never an object deleted whose entry is staged.

Also the issue's own case: a stall longer than the grace (10 s) and shorter than the pending
timeout: the reconciler leaves the upload alone and the upload wins (on c5cbe05 it deleted the
object, and the upload staged an entry whose data was missing).

On memory, SQLite + local, PostgreSQL + S3 (moto) and DynamoDB + S3 (moto).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from lakefs_core.errors import ConflictError
from lakefs_core.format.records import decode_entry
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.reconcile import ReconcileOptions, ReconcileReport, reconcile_repository
from tests.block.conftest import create_bucket, s3_settings
from tests.repos.support import Clock, HookedKV, fast_settings, unique
from tests.support.kv import kv_url_for
from tests.support.moto import MotoServer
from tests.support.timing import scaled

GRACE = 10.0
PENDING = 3600.0
ROUNDS = 6  # per order and upload kind
ORDERS = ("pass-first", "stage-first", "claim-then-stage", "stage-then-claim", "together")


@dataclass
class Env:
    kv: KVStore
    stores: StoreRegistry
    namespace: Callable[[str], str]  # repo id -> its namespace URI


@pytest.fixture(params=["memory", "sqlite", "postgres-s3", "dynamodb-s3"])
def backend(request: pytest.FixtureRequest, sqlite_url: str) -> tuple[str, MotoServer | None]:
    """The KV URL, and a moto server for S3 namespaces (resolved synchronously)."""
    driver = str(request.param).removesuffix("-s3")
    server = request.getfixturevalue("moto")("us-east-1") if request.param.endswith("-s3") else None
    return kv_url_for(driver, request, sqlite_url), server


@pytest.fixture
async def env(backend: tuple[str, MotoServer | None], local_root: Path) -> AsyncIterator[Env]:
    url, server = backend
    kv = await open_kv(url)  # other tests' rows (PostgreSQL's session database) do not matter: fresh repos
    if server is None:
        stores, namespace = StoreRegistry(), lambda repo: f"local://{local_root / repo}"
    else:
        bucket = f"races-{unique()}"
        await create_bucket(server, bucket)
        stores = StoreRegistry(s3=s3_settings(server.endpoint))
        namespace = lambda repo: f"s3://{bucket}/{repo}"  # noqa: E731
    try:
        yield Env(kv, stores, namespace)
    finally:
        await stores.close()
        await kv.close()


@dataclass
class Round:
    uploader: Graveler
    reconciler: Graveler
    up_kv: HookedKV
    rec_kv: HookedKV
    repo: str
    ns: StorageNamespace
    clock: Clock


async def new_round(env: Env) -> Round:
    clock = Clock()
    up_kv, rec_kv = HookedKV(env.kv), HookedKV(env.kv)
    settings = fast_settings(hard_delete_journal=True)
    uploader = Graveler(up_kv, env.stores, settings, clock=clock)
    reconciler = Graveler(rec_kv, env.stores, settings, clock=clock)
    repo = unique()
    ns = StorageNamespace(env.namespace(repo))
    await uploader.create_repository(repo, ns.uri)
    return Round(uploader, reconciler, up_kv, rec_kv, repo, ns, clock)


def _staging_write(op: str, partition: bytes, repo_partition: bytes) -> bool:
    """A write of staged entries (whatever the protocol: c5cbe05 staged with set and set_many)."""
    return op in ("set", "set_many", "set_many_if") and partition != repo_partition


async def run_round(env: Env, order: str, batch: bool, seed: int, *, ahead: float) -> str:
    """One race; returns the winner ("upload" or "reconciler") after checking the round."""
    r = await new_round(env)
    rng = random.Random(seed)
    repo_partition = (await r.uploader.repository(r.repo)).partition
    held, release = asyncio.Event(), asyncio.Event()

    async def hold_staging(op: str, partition: bytes, key: bytes) -> None:
        if _staging_write(op, partition, repo_partition) and not held.is_set():
            held.set()  # the PUTs are done; the staging write waits here
            await release.wait()

    r.up_kv.before.append(hold_staging)
    objects = Objects(r.uploader)
    paths = [f"p{i}" for i in range(3 if batch else 1)]
    if batch:
        upload = objects.upload_many(r.repo, "main", [UploadItem(p, p.encode()) for p in paths])
    else:
        upload = objects.upload(r.repo, "main", paths[0], b"body")
    task = asyncio.ensure_future(upload)
    async with asyncio.timeout(scaled(60)):
        await asyncio.wait([task, asyncio.ensure_future(held.wait())], return_when=asyncio.FIRST_COMPLETED)
    assert held.is_set(), f"the upload never reached its staging write: {task}"
    journal = await r.uploader.journal(r.repo)
    addresses = sorted([i.address async for i in journal.intents()])
    assert len(addresses) == len(paths)

    async def let_go() -> None:
        release.set()
        await asyncio.wait([task])

    if order in ("claim-then-stage", "stage-then-claim"):

        async def at_claim(op: str, partition: bytes, key: bytes) -> None:
            claim = (op == "delete" and key.startswith(kvkeys.GC_SETTLED_PREFIX)) or (
                op == "set_if" and key.startswith(kvkeys.GC_INTENTS_PREFIX)
            )
            if claim:  # the first claim lets the upload go; every claim waits until it ended
                await let_go()

        (r.rec_kv.after if order == "claim-then-stage" else r.rec_kv.before).append(at_claim)

    store = await r.reconciler.namespace_store(r.ns)
    options = ReconcileOptions(
        grace_seconds=GRACE, pending_timeout_seconds=PENDING, now=r.clock() + timedelta(seconds=ahead)
    )

    async def reconcile() -> ReconcileReport:
        if order == "together":
            await asyncio.sleep(rng.random() * 0.002)
        return await reconcile_repository(r.reconciler, r.repo, deleter=store_deleter(store), options=options)

    if order == "stage-first":
        await let_go()
    if order == "together":
        report, _ = await asyncio.gather(reconcile(), let_go())
    else:
        report = await reconcile()
    await let_go()  # pass-first: the upload goes on only now
    return await check_round(r, task, addresses, report)


async def check_round(
    r: Round, task: asyncio.Future[object], addresses: Sequence[str], report: ReconcileReport
) -> str:
    store = await r.uploader.namespace_store(r.ns)
    present = {a for a in addresses if await store.exists(r.ns.key(a))}
    staged = {decode_entry(rec.data).address async for rec in r.uploader.list_entries(r.repo, "main")}
    # Never an entry staged whose object is gone:
    assert staged <= present, f"staged without its object: {sorted(staged - present)}"
    error = task.exception()
    if error is None:
        # The upload won: everything staged and there; the reconciler deleted nothing of it.
        assert staged == set(addresses) == present, (staged, present)
        assert report.deleted == 0
        return "upload"
    assert isinstance(error, ConflictError) and "lost to the hard-delete reconciler" in str(error), error
    # The reconciler won: nothing of the upload staged, its objects deleted.
    assert staged == set() and present == set(), (staged, present)
    assert report.deleted == len(addresses)
    return "reconciler"


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_an_upload_and_the_reconciler_never_both_win(env: Env, batch: bool) -> None:
    winners: dict[str, set[str]] = {}
    for order in ORDERS:
        for seed in range(ROUNDS):
            winner = await run_round(env, order, batch, seed, ahead=PENDING + 1)
            winners.setdefault(order, set()).add(winner)
    # The orders that fix the winner: the pass first (or a claim before the staging write), the
    # reconciler; the staging write first (or before the claim), the upload.
    assert winners["pass-first"] == winners["claim-then-stage"] == {"reconciler"}
    assert winners["stage-first"] == winners["stage-then-claim"] == {"upload"}


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_a_stall_longer_than_the_grace_leaves_the_upload_alone(env: Env, batch: bool) -> None:
    """Issue 32's reproduction: grace 10 s, a 25 s stall between the PUT and the staging write."""
    assert await run_round(env, "pass-first", batch, 0, ahead=25.0) == "upload"

"""The hard-delete reconciler on DynamoDB + S3 (both moto): one pass deletes the garbage of every
kind (overwritten, deleted, reset away, left on a deleted branch, never staged) and keeps every staged
and committed object; then a deleted repository's ``data/`` is purged after the grace period."""

from __future__ import annotations

from collections.abc import Callable

from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects
from lakefs_core.service.deleter import KeyDeleter, store_deleter
from lakefs_gc.reconcile import ReconcileOptions, reconcile_deleted_repositories, reconcile_repository
from tests.block.conftest import create_bucket, s3_settings
from tests.repos.support import Clock, fast_settings
from tests.support.moto import MotoServer

GRACE = 3600.0


async def test_reconcile_on_dynamodb_and_s3(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    await create_bucket(server, "rec-bucket")
    kv = await open_kv(f"dynamodb://?region=us-east-1&endpoint={server.endpoint}")
    clock = Clock()
    stores = StoreRegistry(s3=s3_settings(server.endpoint))
    g = Graveler(kv, stores, fast_settings(hard_delete_journal=True), clock=clock)
    objects = Objects(g)
    ns = StorageNamespace("s3://rec-bucket/repos/one")
    try:
        await g.create_repository("one", ns.uri)
        store = await g.namespace_store(ns)

        async def up(path: str, body: bytes, branch: str = "main") -> str:
            return (await objects.upload("one", branch, path, body)).physical_address

        committed = await up("c", b"c")
        overwritten = await up("o", b"1")
        await g.commit("one", "main", committer="t", message="m")
        newer = await up("o", b"2")  # ``overwritten`` is still in the commit
        gone = await up("d", b"d")
        await objects.delete("one", "main", "d")
        staged = await up("s", b"s")
        await g.create_branch("one", "dev", "main")
        reset = await up("r", b"r", "dev")
        await g.reset_branch("one", "dev")
        on_deleted = await up("x", b"x", "dev")
        await g.delete_branch("one", "dev")
        garbage, live = [gone, reset, on_deleted], [committed, overwritten, newer, staged]
        clock.advance(GRACE)
        report = await reconcile_repository(
            g, "one", deleter=store_deleter(store), options=ReconcileOptions(grace_seconds=GRACE)
        )
        assert (report.deleted, report.failed, report.rescued) == (3, 0, 0)
        assert (report.committed, report.staged) == (2, 2)  # the committed intents, then the staged
        for address in garbage:
            assert not await store.exists(ns.key(address)), address
        for address in live:
            assert await store.exists(ns.key(address)), address
        assert await objects.read_all("one", "main", "o") == b"2"

        await g.delete_repository("one")
        clock.advance(GRACE)

        async def deleter_for(namespace: StorageNamespace) -> KeyDeleter:
            return store_deleter(await g.namespace_store(namespace))

        [purge] = await reconcile_deleted_repositories(g, deleter_for=deleter_for)
        assert (purge.deleted, purge.failed) == (4, 0)
        assert [k async for k in store.list_keys(ns.data_prefix())] == []
        assert await store.exists(ns.dummy_key())  # _lakefs/ is never purged
        assert [r async for r in g.deleted_repositories()] == []
    finally:
        await stores.close()
        await kv.close()

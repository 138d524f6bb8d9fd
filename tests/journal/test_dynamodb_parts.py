"""A journalled batch upload on DynamoDB (moto), whose conditional batches (``TransactWriteItems``)
take 100 items: the batch is journalled and settled in parts of 98 entries (plus the settle and the
branch expectation), each part all or nothing; a part the reconciler claimed first fails the upload
with nothing of that part staged, the parts before it staying staged with their objects."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from lakefs_core.errors import ConflictError
from lakefs_core.format.records import decode_entry
from lakefs_core.kv import open_kv
from lakefs_core.kv.dynamodb import TRANSACT_ITEMS
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects, UploadItem
from tests.block.conftest import create_bucket, s3_settings
from tests.repos.support import Clock, HookedKV, fast_settings, unique
from tests.support.moto import MotoServer

PART = TRANSACT_ITEMS - 2


@pytest.fixture
async def world(moto: Callable[[str], MotoServer]) -> AsyncIterator[tuple[Graveler, HookedKV, str]]:
    server = moto("us-east-1")
    bucket = f"parts-{unique()}"
    await create_bucket(server, bucket)
    kv = HookedKV(await open_kv(f"dynamodb://?region=us-east-1&endpoint={server.endpoint}"))
    stores = StoreRegistry(s3=s3_settings(server.endpoint))
    g = Graveler(kv, stores, fast_settings(hard_delete_journal=True), clock=Clock())
    repo = unique()
    await g.create_repository(repo, f"s3://{bucket}/{repo}")
    try:
        yield g, kv, repo
    finally:
        await stores.close()
        await kv.close()


async def test_a_batch_is_settled_in_parts_that_fit_one_transaction(
    world: tuple[Graveler, HookedKV, str],
) -> None:
    g, kv, repo = world
    items = [UploadItem(f"f/{i:03d}", b"%d" % i) for i in range(2 * PART + 10)]
    stats = await Objects(g).upload_many(repo, "main", items)
    assert len([r async for r in g.list_entries(repo, "main")]) == len(items)
    settles = [k for op, _, k in kv.ops if op == "set_many_if" and k.startswith(kvkeys.GC_SETTLED_PREFIX)]
    assert len(settles) == 3 == len(set(settles))  # one conditional batch per part, each its own record
    journal = await g.journal(repo)
    intents = [i async for i in journal.intents()]
    assert len({i.batch for i in intents}) == 3
    assert {(await journal.effective(i)).state for i in intents} == {"stored"}
    assert await Objects(g).read_all(repo, "main", stats[-1].path) == b"%d" % (len(items) - 1)


async def test_a_claimed_part_fails_the_upload_and_stages_nothing_of_it(
    world: tuple[Graveler, HookedKV, str],
) -> None:
    g, kv, repo = world
    parts: list[bytes] = []

    async def claim_the_second_part(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and key.startswith(kvkeys.GC_SETTLED_PREFIX):
            parts.append(key)
            if len(parts) == 2:  # the reconciler's claim of a pending intent of that part
                journal = await g.journal(repo)
                batch = key[len(kvkeys.GC_SETTLED_PREFIX) :].decode()
                intent = next(iter([i async for i in journal.intents() if i.batch == batch]))
                await journal.claim(intent)

    kv.before.append(claim_the_second_part)
    items = [UploadItem(f"f/{i:03d}", b"x") for i in range(2 * PART)]
    with pytest.raises(ConflictError, match="lost to the hard-delete reconciler"):
        await Objects(g).upload_many(repo, "main", items)
    kv.before.clear()
    staged = [decode_entry(r.data).address async for r in g.list_entries(repo, "main")]
    assert len(staged) == PART  # the first part, whole; nothing of the second
    ns = StorageNamespace((await g.repository(repo)).storage_namespace)
    store = await g.namespace_store(ns)
    for address in staged:
        assert await store.exists(ns.key(address))

"""Guards found by mutation testing of the KV and block drivers: each test fails when one small piece
of driver logic (an input check, an error classification, a page bound) is removed.

The fixtures are the suites' own, on real servers: ``kv`` (memory, SQLite, PostgreSQL, moto
DynamoDB) from ``tests/kv/test_contract.py``; ``scripted`` (a moto DynamoDB client with injected
failures) from ``tests/kv/test_dynamodb_faults.py``; ``s3_server`` / ``proxy`` (moto S3 and a fault
proxy in front of it) from ``tests/block/conftest.py``.
"""

from __future__ import annotations

from contextlib import aclosing

import pytest

from lakefs_core.errors import BadInputError, StorageFullError, TransientError, UnreachableError
from lakefs_core.kv import Expect, KVStore
from lakefs_core.kv.dynamodb import DynamoKVStore, classify
from lakefs_core.testing.kv import collect, kv
from tests.block.conftest import proxy, s3_server
from tests.block.faults import Fault, FaultProxy, is_method
from tests.block.test_s3 import proxied
from tests.kv.test_contract import dynamodb_session, kv_driver, kv_url
from tests.kv.test_dynamodb_faults import ScriptedClient, client_error, reset_after_send, scripted

__all__ = [
    "dynamodb_session",
    "kv",
    "kv_driver",
    "kv_url",
    "proxy",
    "s3_server",
    "scripted",
]  # fixtures, re-exported for pytest

P = b"partition"
Scripted = tuple[DynamoKVStore, ScriptedClient]


# -- kv/_common input checks -------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [True, False, 1.5, -1])
async def test_scan_page_size_must_be_a_real_positive_int(kv: KVStore, page_size: object) -> None:
    await kv.set(P, b"k", b"v")
    with pytest.raises(BadInputError) as info:
        await collect(kv.scan(P, page_size=page_size))  # type: ignore[arg-type]
    assert info.value.field == "page_size"


# -- DynamoDB: what is retried, what an exhausted failure becomes ------------------------------------


@pytest.mark.parametrize(
    "code", ["RequestLimitExceeded", "TransactionConflictException", "LimitExceededException", "Throttling"]
)
async def test_dynamodb_every_throttling_code_is_retried_even_for_cas(scripted: Scripted, code: str) -> None:
    """Throttling proves the write was not applied, so even a conditional write retries it."""
    store, client = scripted
    assert classify(client_error(code)) == "not_applied"
    await store.set(b"p", b"k", b"v1")
    client.fail("put_item", client_error(code), client_error(code))
    await store.set_if(b"p", b"k", b"v2", Expect.equals(b"v1"))
    assert await store.get(b"p", b"k") == b"v2"
    assert client.calls["put_item"] == 4  # the set, two throttled attempts, the one that landed


@pytest.mark.parametrize("op", ["put_item", "delete_item"])
async def test_dynamodb_write_losing_its_connection_is_an_unknown_outcome(
    scripted: Scripted, op: str
) -> None:
    """A reset after sending: a read would be unreachable, but a write's outcome is unknown."""
    store, client = scripted
    client.fail(op, *(reset_after_send() for _ in range(4)))
    with pytest.raises(TransientError) as info:
        if op == "put_item":
            await store.set(b"p", b"k", b"v")
        else:
            await store.delete(b"p", b"k")
    assert not isinstance(info.value, UnreachableError)
    assert "outcome unknown" in str(info.value)
    assert info.value.retryable
    assert client.calls[op] == 4


# -- S3: page size and retry classification -------------------------------------------------------


async def test_s3_list_asks_for_pages_of_page_size(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        for i in range(5):
            await store.put(f"k{i}", b"x")
        proxy.clear()
        async with aclosing(store.list(page_size=2)) as items:
            keys = [item.key async for item in items]  # type: ignore[union-attr]
        assert keys == [f"k{i}" for i in range(5)]
        assert proxy.count("GET", "list-type") == 3


async def test_s3_http_429_with_an_unknown_code_is_retried(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        await store.put("k", b"data")
        proxy.clear()
        proxy.fail(Fault(429, "SomeVendorRateLimit"), times=2, when=is_method("GET"))
        assert await store.get("k") == b"data"
        assert proxy.count("GET") == 3


async def test_s3_insufficient_storage_is_final_not_retried(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        proxy.fail(Fault(507, "InsufficientStorage", "disk full"), times=None, when=is_method("PUT"))
        with pytest.raises(StorageFullError) as info:
            await store.put("k", b"data")
        assert not info.value.retryable
        assert proxy.count("PUT") == 1

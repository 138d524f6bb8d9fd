"""DynamoKVStore guards: error classes the retry policy must get right, beyond test_dynamodb_faults.

The scripted stand-in client of ``test_dynamodb_faults`` injects botocore failures in front of a real
moto-backed client; an unreachable endpoint is a real closed port on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from lakefs_core.block.aws_session import new_session
from lakefs_core.errors import LakeFSError, PreconditionFailedError, TransientError, UnreachableError
from lakefs_core.kv import Expect
from lakefs_core.kv.dynamodb import DynamoKVStore
from tests.kv.test_dynamodb_faults import ScriptedClient, client_error, connect_timeout, reset_after_send
from tests.support.moto import MotoServer, free_port

if TYPE_CHECKING:
    from aiobotocore.session import ClientCreatorContext
    from types_aiobotocore_dynamodb.client import DynamoDBClient


def dynamo_client(server: MotoServer) -> ClientCreatorContext[DynamoDBClient]:
    """A plain aioboto3 DynamoDB client on ``server``."""
    kw = server.client_kwargs()
    return new_session().client(
        "dynamodb",
        endpoint_url=kw["endpoint_url"],
        region_name=kw["region_name"],
        aws_access_key_id=kw["aws_access_key_id"],
        aws_secret_access_key=kw["aws_secret_access_key"],
    )


@pytest.fixture
async def scripted(moto: Callable[[str], MotoServer]) -> AsyncIterator[tuple[DynamoKVStore, ScriptedClient]]:
    server = moto("us-east-1")
    async with dynamo_client(server) as real:
        client = ScriptedClient(real)
        store = DynamoKVStore(client, attempts=4, backoff_initial=0.001, backoff_max=0.01)  # type: ignore[arg-type]
        await store.create_table()
        try:
            yield store, client
        finally:
            await store.close()


@pytest.mark.parametrize("code", ["TransactionConflictException", "RequestLimitExceeded"])
async def test_rejections_before_applying_are_retried_even_for_cas(
    scripted: tuple[DynamoKVStore, ScriptedClient], code: str
) -> None:
    """DynamoDB refused these before applying anything: safe to retry a conditional write."""
    store, client = scripted
    await store.set(b"p", b"k", b"v1")
    client.fail("put_item", client_error(code), client_error(code))
    await store.set_if(b"p", b"k", b"v2", Expect.equals(b"v1"))
    assert await store.get(b"p", b"k") == b"v2"
    assert client.calls["put_item"] == 4  # the set, then two rejected attempts and the one that landed


async def test_cas_http_500_with_an_unknown_code_is_an_unknown_outcome(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    """Any 5xx, 500 included, may have been applied: a conditional write is not retried, and the
    caller is told the outcome is unknown (retryable), not handed a final error."""
    store, client = scripted
    await store.set(b"p", b"k", b"v1")
    client.fail("put_item", client_error("SomeNewServerFault", 500), applied=True)
    with pytest.raises(TransientError) as info:
        await store.set_if(b"p", b"k", b"v2", Expect.equals(b"v1"))
    assert not isinstance(info.value, PreconditionFailedError)
    assert info.value.retryable
    assert "outcome unknown" in str(info.value)
    assert client.calls["put_item"] == 2  # the set, then one conditional attempt
    assert await store.get(b"p", b"k") == b"v2"  # it had landed: the caller re-reads to find out


async def test_cas_http_500_internal_server_error_says_outcome_unknown(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    store, client = scripted
    client.fail("put_item", client_error("InternalServerError", 500))
    with pytest.raises(TransientError) as info:
        await store.set_if(b"p", b"k", b"v", Expect.ABSENT)
    assert "outcome unknown" in str(info.value)


async def test_idempotent_write_losing_connections_is_unknown_outcome_not_unreachable(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    """Resets after sending, on every attempt of a ``set``: the write may have landed."""
    store, client = scripted
    client.fail("put_item", *(reset_after_send() for _ in range(4)))
    with pytest.raises(TransientError) as info:
        await store.set(b"p", b"k", b"v")
    assert type(info.value) is TransientError, repr(info.value)
    assert "outcome unknown" in str(info.value)
    assert client.calls["put_item"] == 4


async def test_idempotent_write_never_connecting_is_unreachable(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    """Connect timeouts on every attempt: nothing was sent, the backend is unreachable."""
    store, client = scripted
    client.fail("delete_item", *(connect_timeout() for _ in range(4)))
    with pytest.raises(UnreachableError):
        await store.delete(b"p", b"k")
    assert client.calls["delete_item"] == 4


async def test_cas_against_a_closed_port_is_unreachable_after_retries() -> None:
    """A refused TCP connection proves the conditional write was never sent: it is retried and ends
    as UnreachableError, not as an "outcome unknown" TransientError after one attempt."""
    port = free_port()  # nothing listens here
    store = await DynamoKVStore.open(
        endpoint_url=f"http://127.0.0.1:{port}",
        region="us-east-1",
        create=False,
        attempts=2,
        backoff_initial=0.001,
        backoff_max=0.01,
        connect_timeout=1.0,
        read_timeout=1.0,
    )
    try:
        with pytest.raises(UnreachableError) as info:
            await store.set_if(b"p", b"k", b"v", Expect.ABSENT)
        assert "outcome unknown" not in str(info.value)
    finally:
        await store.close()


async def test_scan_skips_items_without_a_value(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    """An item without ``ItemValue`` is absent (as ``get`` and the conditions see it), also to a scan,
    and does not break it."""
    store, client = scripted
    await store.set(b"p", b"a", b"1")
    await client.real.put_item(
        TableName="kvstore", Item={"PartitionKey": {"B": b"p"}, "ItemKey": {"B": b"b"}, "Other": {"S": "x"}}
    )
    await store.set(b"p", b"c", b"3")
    assert [(e.key, e.value) async for e in store.scan(b"p", page_size=1)] == [(b"a", b"1"), (b"c", b"3")]


class UpdatingTableClient(ScriptedClient):
    """Reports the table as UPDATING for the first ``updating`` DescribeTable calls."""

    def __init__(self, real: Any, updating: int) -> None:
        super().__init__(real)
        self.updating = updating

    async def describe_table(self, **kwargs: Any) -> Any:
        resp = await self.real.describe_table(**kwargs)
        if self.updating:
            self.updating -= 1
            resp["Table"]["TableStatus"] = "UPDATING"
        return resp


async def test_open_waits_for_an_updating_table(moto: Callable[[str], MotoServer]) -> None:
    """A table being updated (e.g. a capacity change) is usable soon: wait, do not fail."""
    server = moto("us-east-1")
    async with dynamo_client(server) as real:
        first = DynamoKVStore(real)
        await first.create_table()
        client = UpdatingTableClient(real, updating=2)
        store = DynamoKVStore(client)  # type: ignore[arg-type]
        await store.create_table(active_within=10, max_poll_interval=0.01)
        assert client.updating == 0
        await store.set(b"p", b"k", b"v")
        assert await store.get(b"p", b"k") == b"v"


async def test_unknown_table_status_is_not_waited_for(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    async with dynamo_client(server) as real:
        await DynamoKVStore(real).create_table()

        class Deleting(ScriptedClient):
            async def describe_table(self, **kwargs: Any) -> Any:
                resp = await self.real.describe_table(**kwargs)
                resp["Table"]["TableStatus"] = "DELETING"
                return resp

        with pytest.raises(LakeFSError) as info:
            await DynamoKVStore(Deleting(real)).create_table(active_within=1)  # type: ignore[arg-type]
        assert "DELETING" in str(info.value)

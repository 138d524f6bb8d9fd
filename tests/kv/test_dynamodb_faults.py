"""DynamoKVStore retry policy: what is retried, and what an unknown outcome turns into.

A scripted stand-in client injects botocore failures in front of a real moto-backed client, so the
requests that do go through hit a real (moto) DynamoDB table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from lakefs_core.block.aws_session import new_session
from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv import Expect
from lakefs_core.kv.dynamodb import DynamoKVStore, classify, should_retry
from tests.support.moto import MotoServer

URL = "http://dynamodb.test"


def client_error(code: str, status: int = 400, op: str = "PutItem") -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"injected {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        op,
    )


def read_timeout() -> ReadTimeoutError:
    return ReadTimeoutError(endpoint_url=URL, error=TimeoutError("injected"))


def reset_after_send() -> EndpointConnectionError:
    return EndpointConnectionError(
        endpoint_url=URL, error=aiohttp.ClientOSError(104, "Connection reset by peer")
    )


def connect_timeout() -> ConnectTimeoutError:
    return ConnectTimeoutError(endpoint_url=URL, error=TimeoutError("injected"))


class ScriptedClient:
    """Raises the scripted failures for an operation before delegating to the real client."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.script: dict[str, list[BaseException]] = {}
        self.calls: dict[str, int] = {}
        self.applied_before_failure: set[str] = set()

    def fail(self, op: str, *errors: BaseException, applied: bool = False) -> None:
        self.script.setdefault(op, []).extend(errors)
        if applied:
            self.applied_before_failure.add(op)

    def __getattr__(self, op: str) -> Callable[..., Any]:
        real_method = getattr(self.real, op)

        async def call(**kwargs: Any) -> Any:
            self.calls[op] = self.calls.get(op, 0) + 1
            pending = self.script.get(op)
            if pending:
                error = pending.pop(0)
                if op in self.applied_before_failure:
                    await real_method(**kwargs)  # the request landed; only the answer was lost
                raise error
            return await real_method(**kwargs)

        return call


@pytest.fixture
async def scripted(moto: Callable[[str], MotoServer]) -> AsyncIterator[tuple[DynamoKVStore, ScriptedClient]]:
    server = moto("us-east-1")
    async with new_session().client("dynamodb", **server.client_kwargs()) as real:
        client = ScriptedClient(real)
        store = DynamoKVStore(client, attempts=4, backoff_initial=0.001, backoff_max=0.01)  # type: ignore[arg-type]
        await store.create_table()
        try:
            yield store, client
        finally:
            await store.close()


def test_classification() -> None:
    assert classify(client_error("ProvisionedThroughputExceededException")) == "not_applied"
    assert classify(client_error("ThrottlingException")) == "not_applied"
    assert classify(client_error("InternalServerError", 500)) == "unknown"
    assert classify(client_error("ServiceUnavailable", 503)) == "unknown"
    assert classify(client_error("SomethingNew", 502)) == "unknown"
    assert classify(client_error("ConditionalCheckFailedException")) == "final"
    assert classify(client_error("ValidationException")) == "final"
    assert classify(connect_timeout()) == "not_applied"
    assert classify(read_timeout()) == "unknown"
    assert classify(reset_after_send()) == "unknown"
    assert classify(ConnectionClosedError(endpoint_url=URL)) == "unknown"
    # Conditional writes retry only what certainly did not apply.
    assert should_retry(client_error("ThrottlingException"), "cas")
    assert not should_retry(read_timeout(), "cas")
    assert not should_retry(client_error("InternalServerError", 500), "cas")
    assert should_retry(read_timeout(), "read")
    assert should_retry(read_timeout(), "idempotent")


async def test_cas_with_unknown_outcome_is_transient_not_a_false_precondition(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    store, client = scripted
    # The put lands, but the answer is lost. A blind retry would now fail its condition.
    client.fail("put_item", read_timeout(), applied=True)
    with pytest.raises(TransientError) as info:
        await store.set_if(b"p", b"k", b"mine", Expect.ABSENT)
    assert not isinstance(info.value, PreconditionFailedError)
    assert "outcome unknown" in str(info.value)
    assert client.calls["put_item"] == 1  # not retried
    assert await store.get(b"p", b"k") == b"mine"  # the caller can re-read and see it applied


@pytest.mark.parametrize(
    "error",
    [
        reset_after_send,
        lambda: client_error("InternalServerError", 500),
        lambda: ConnectionClosedError(endpoint_url=URL),
    ],
)
async def test_cas_unknown_outcome_kinds_are_not_retried(
    scripted: tuple[DynamoKVStore, ScriptedClient], error: Callable[[], BaseException]
) -> None:
    store, client = scripted
    await store.set(b"p", b"k", b"v1")
    client.fail("put_item", error())
    with pytest.raises(TransientError):
        await store.set_if(b"p", b"k", b"v2", Expect.equals(b"v1"))
    assert client.calls["put_item"] == 2  # the set, then one conditional attempt


async def test_cas_retries_what_certainly_did_not_apply(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    store, client = scripted
    await store.set(b"p", b"k", b"v1")
    client.fail("put_item", client_error("ProvisionedThroughputExceededException"), connect_timeout())
    await store.set_if(b"p", b"k", b"v2", Expect.equals(b"v1"))
    assert await store.get(b"p", b"k") == b"v2"
    assert client.calls["put_item"] == 4


async def test_precondition_failure_is_not_retried(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, client = scripted
    await store.set(b"p", b"k", b"v1")
    with pytest.raises(PreconditionFailedError):
        await store.set_if(b"p", b"k", b"v2", Expect.ABSENT)
    assert client.calls["put_item"] == 2


async def test_idempotent_writes_and_reads_retry_unknown_outcomes(
    scripted: tuple[DynamoKVStore, ScriptedClient],
) -> None:
    store, client = scripted
    client.fail("put_item", read_timeout(), applied=True)
    client.fail("put_item", client_error("InternalServerError", 500))
    await store.set(b"p", b"k", b"v")
    assert client.calls["put_item"] == 3
    client.fail("get_item", read_timeout(), reset_after_send())
    assert await store.get(b"p", b"k") == b"v"
    assert client.calls["get_item"] == 3
    client.fail("query", client_error("ThrottlingException", op="Query"))
    assert [e.key async for e in store.scan(b"p")] == [b"k"]
    client.fail("delete_item", read_timeout(), applied=True)
    await store.delete(b"p", b"k")
    assert [e.key async for e in store.scan(b"p")] == []


async def test_retries_are_bounded(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, client = scripted
    client.fail("get_item", *(connect_timeout() for _ in range(10)))
    with pytest.raises(UnreachableError):
        await store.get(b"p", b"k")
    assert client.calls["get_item"] == 4
    client.script.clear()
    client.fail("put_item", *(client_error("ThrottlingException") for _ in range(10)))
    with pytest.raises(TransientError) as info:
        await store.set(b"p", b"k", b"v")
    assert not isinstance(info.value, UnreachableError)
    assert client.calls["put_item"] == 4


async def test_read_losing_connection_is_unreachable(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, client = scripted
    client.fail("get_item", *(read_timeout() for _ in range(4)))
    with pytest.raises(UnreachableError):
        await store.get(b"p", b"k")


async def test_validation_and_auth_errors_are_final(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, client = scripted
    client.fail("put_item", client_error("ValidationException"))
    with pytest.raises(BadInputError):
        await store.set(b"p", b"k", b"v")
    client.fail("put_item", client_error("UnrecognizedClientException"))
    with pytest.raises(LakeFSError) as info:
        await store.set(b"p", b"k", b"v")
    assert not info.value.retryable
    assert client.calls["put_item"] == 2


async def test_oversized_item_is_bad_input(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, _client = scripted
    with pytest.raises(BadInputError):
        await store.set(b"p", b"k", b"x" * 500_000)


async def test_missing_table_is_unreachable(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, client = scripted
    await client.real.delete_table(TableName="kvstore")
    with pytest.raises(UnreachableError) as info:
        await store.get(b"p", b"k")
    assert "table not found" in str(info.value)


async def test_foreign_items_in_the_table(scripted: tuple[DynamoKVStore, ScriptedClient]) -> None:
    store, client = scripted
    key = {"PartitionKey": {"B": b"p"}, "ItemKey": {"B": b"no-value"}}
    await client.real.put_item(TableName="kvstore", Item={**key, "Other": {"S": "x"}})
    with pytest.raises(NotFoundError):  # no ItemValue: absent, exactly as attribute_not_exists sees it
        await store.get(b"p", b"no-value")
    await store.set_if(b"p", b"no-value", b"v", Expect.ABSENT)
    assert await store.get(b"p", b"no-value") == b"v"
    await client.real.put_item(
        TableName="kvstore",
        Item={"PartitionKey": {"B": b"p"}, "ItemKey": {"B": b"text"}, "ItemValue": {"S": "not bytes"}},
    )
    with pytest.raises(CorruptDataError):
        await store.get(b"p", b"text")


class PartialBatchClient(ScriptedClient):
    """Applies only the first ``take`` items of each ``BatchWriteItem`` (on the real moto table) and
    hands the rest back as ``UnprocessedItems``, as a throttled DynamoDB does."""

    def __init__(self, real: Any, take: int, stuck: bool = False) -> None:
        super().__init__(real)
        self.take = take
        self.stuck = stuck  # never process anything (after the first call)
        self.batch_sizes: list[int] = []

    async def batch_write_item(self, **kwargs: Any) -> Any:
        ((table, requests),) = kwargs["RequestItems"].items()
        self.batch_sizes.append(len(requests))
        take = 0 if self.stuck and len(self.batch_sizes) > 1 else self.take
        if requests[:take]:
            await self.real.batch_write_item(RequestItems={table: requests[:take]})
        rest = requests[take:]
        return {"UnprocessedItems": {table: rest} if rest else {}}


@pytest.fixture
async def real_client(moto: Callable[[str], MotoServer]) -> AsyncIterator[Any]:
    server = moto("us-east-1")
    async with new_session().client("dynamodb", **server.client_kwargs()) as real:
        yield real


async def test_set_many_resends_unprocessed_items(real_client: Any) -> None:
    client = PartialBatchClient(real_client, take=7)
    store = DynamoKVStore(client, attempts=6, backoff_initial=0.001, backoff_max=0.01)  # type: ignore[arg-type]
    await store.create_table()
    try:
        await store.set_many([(b"p", b"k%02d" % i, b"v%d" % i) for i in range(30)])
        # 25 + 5 items: each request at most 25, the unprocessed rest re-sent until empty.
        assert max(client.batch_sizes) == 25
        assert client.batch_sizes == [25, 18, 11, 4, 5]
        assert [e.key async for e in store.scan(b"p")] == [b"k%02d" % i for i in range(30)]
        assert await store.get(b"p", b"k29") == b"v29"
    finally:
        await store.close()


async def test_set_many_items_that_stay_unprocessed_are_transient(real_client: Any) -> None:
    client = PartialBatchClient(real_client, take=3, stuck=True)
    store = DynamoKVStore(client, attempts=3, backoff_initial=0.001, backoff_max=0.01)  # type: ignore[arg-type]
    await store.create_table()
    try:
        with pytest.raises(TransientError) as info:
            await store.set_many([(b"p", b"k%02d" % i, b"v") for i in range(10)])
        assert info.value.retryable
        assert "7 items stayed unprocessed" in str(info.value)
        assert len(client.batch_sizes) == 3  # bounded by attempts
    finally:
        await store.close()

"""DynamoDB KV store through aioboto3, laid out exactly as lakeFS does (spec section 6).

Table (default ``kvstore``, PAY_PER_REQUEST, created on demand and awaited until ACTIVE): hash key
``PartitionKey`` (B), range key ``ItemKey`` (B), value attribute ``ItemValue`` (B). All reads are
``ConsistentRead``. Conditional writes: ABSENT = ``attribute_not_exists(ItemValue)``, EXISTS =
``attribute_exists(ItemValue)``, equals = ``ItemValue = :pred``. Scan = ``Query`` on ``PartitionKey``
(with ``ItemKey >= :start`` when a start key is given, ``BETWEEN :start AND :end`` or ``< :end``
with an end key, whose own row is dropped), ``Limit`` = page size, paged with
``LastEvaluatedKey``; DynamoDB orders binary range keys bytewise (unsigned).

``set_many`` = ``BatchWriteItem`` of ``PutRequest`` items, 25 per request (DynamoDB's limit); the
``UnprocessedItems`` a request hands back (throttled shards) are re-sent with exponential backoff
and full jitter, at most ``attempts`` times each, then :class:`TransientError`. A batch is not atomic
on DynamoDB: a failed call may have stored any subset (the items are upserts; re-sending is safe).

``set_many_if`` = ONE ``TransactWriteItems``: a ``Put`` per item (with the key's condition when it is
also expected) and a ``ConditionCheck`` per expectation on a key not written, at most
:data:`TRANSACT_ITEMS` actions (:attr:`DynamoKVStore.max_conditional_items`; more is
:class:`BadInputError` before anything is sent). A cancellation naming ``ConditionalCheckFailed``
is :class:`PreconditionFailedError` (nothing applied); one naming only ``TransactionConflict`` (a
concurrent transaction on an item) was not applied and is retried like throttling; an unknown
outcome is never retried (a conditional write, as ``set_if``).

One aiobotocore client is opened by :meth:`DynamoKVStore.open` and kept for the store's life;
:meth:`DynamoKVStore.close` exits it.

Retries and unknown outcomes
----------------------------
botocore's own retries are switched off (``total_max_attempts=1``): botocore would retry a
conditional ``PutItem`` after a read timeout, and if the first attempt had in fact been applied the
retry would fail its condition and we would report a *false* precondition failure (e.g. "the branch
moved" when it was our own move). Instead every call goes through one bounded tenacity loop
(``attempts``, default 5, exponential backoff with full jitter) that classifies each failure:

* **not applied** - the request certainly did not take effect: the TCP connection could not be
  established (connect refused / DNS / connect timeout), or DynamoDB rejected it before applying it
  (``ProvisionedThroughputExceededException``, ``ThrottlingException``, ``RequestLimitExceeded``,
  ``TransactionConflictException``). Retried for every operation.
* **unknown outcome** - the request may have been applied: read timeouts, connections closed or
  reset after sending, HTTP 5xx (``InternalServerError``, ``ServiceUnavailable``).
  Retried for reads (``GetItem``, ``Query``) and for idempotent writes (unconditional ``PutItem`` =
  ``set``, and ``DeleteItem``: re-applying them leaves the same result). **Never retried for a
  conditional write**: it surfaces at once as :class:`~lakefs_core.errors.TransientError` whose
  message says the outcome is unknown. The caller, who knows what it wanted, re-reads and decides
  (its own value present = applied). We deliberately do not retry-and-disambiguate inside the driver
  (e.g. treating a ConditionalCheckFailed after an unknown attempt as success when the stored value
  equals ours): that is unsound under ABA and when another writer stores identical bytes.
  Consequently a :class:`~lakefs_core.errors.PreconditionFailedError` from this driver is always
  definite: every earlier attempt of the same call provably did not apply.

After the attempts are exhausted: connection failures raise :class:`UnreachableError`, throttling and
5xx raise :class:`TransientError` (both retryable). ``ConditionalCheckFailedException`` raises
:class:`PreconditionFailedError`, ``ValidationException`` (e.g. an item over 400 KB) raises
:class:`BadInputError`, a missing table raises :class:`UnreachableError`, credential and access
errors raise a plain non-retryable :class:`LakeFSError`.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import aioboto3
import aiohttp
from aiobotocore.config import AioConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from lakefs_core.block.aws_session import SharedTLSSession, new_session
from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv._common import (
    as_bytes,
    check_end,
    check_expect,
    check_expectations,
    check_items,
    check_key,
    check_page_size,
    check_partition,
    check_ranges,
    closed_error,
    precondition_message,
)
from lakefs_core.kv.base import Expect, KeyRange, KVEntry, KVExpectation, KVItem

RANGE_QUERIES = 16  # concurrent Queries of one scan_ranges call
BATCH_GET_KEYS = 100  # keys of one BatchGetItem (DynamoDB's limit)

if TYPE_CHECKING:
    from types_aiobotocore_dynamodb.client import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import (
        BatchGetItemOutputTypeDef,
        BatchWriteItemOutputTypeDef,
        PutItemInputTypeDef,
        QueryInputTypeDef,
        QueryOutputTypeDef,
        UniversalAttributeValueTypeDef,
    )

T = TypeVar("T")

DEFAULT_TABLE = "kvstore"
BATCH_WRITE_ITEMS = 25  # DynamoDB's BatchWriteItem limit
TRANSACT_ITEMS = 100  # DynamoDB's TransactWriteItems limit (actions per call)
PARTITION_ATTR = "PartitionKey"
KEY_ATTR = "ItemKey"
VALUE_ATTR = "ItemValue"

Kind = Literal["read", "idempotent", "cas"]
Failure = Literal["not_applied", "unknown", "final"]

_THROTTLING = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "LimitExceededException",
    }
)
# TransactWriteItems cancellation reasons after which the same call may succeed
_THROTTLING_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
_SERVER_UNKNOWN = frozenset({"InternalServerError", "InternalFailure", "ServiceUnavailable"})
_AUTH = frozenset(
    {
        "UnrecognizedClientException",
        "AccessDeniedException",
        "InvalidSignatureException",
        "ExpiredTokenException",
        "MissingAuthenticationTokenException",
        "IncompleteSignature",
    }
)


def _error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _http_status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _never_sent(e: BaseException) -> bool:
    """True when the HTTP request certainly never reached DynamoDB (no connection was made)."""
    if isinstance(e, ConnectTimeoutError):
        return True
    if isinstance(e, EndpointConnectionError):
        # aiobotocore maps every aiohttp ClientConnectionError here, including resets *after*
        # sending; only a failure to connect proves the request was not sent.
        inner = getattr(e, "kwargs", {}).get("error")
        return isinstance(inner, (aiohttp.ClientConnectorError, socket.gaierror))
    return False


def _cancellation_codes(e: ClientError) -> set[str]:
    """The reason codes of a cancelled ``TransactWriteItems`` (one per action; "None": fine)."""
    reasons = e.response.get("CancellationReasons") or []
    return {str(r.get("Code", "")) for r in reasons if isinstance(r, dict)}


def classify(e: BaseException) -> Failure:
    """Sort a botocore failure into not-applied / unknown-outcome / final (not retryable)."""
    if isinstance(e, ClientError):
        code = _error_code(e)
        if code in _THROTTLING:
            return "not_applied"
        if code == "TransactionCanceledException":
            # Cancelled: nothing applied. Worth another attempt only when no condition failed.
            codes = _cancellation_codes(e) - {"None", ""}
            return "not_applied" if codes and codes <= _THROTTLING_REASONS else "final"
        if code in _SERVER_UNKNOWN or _http_status(e) >= 500:
            return "unknown"
        return "final"
    if _never_sent(e):
        return "not_applied"
    if isinstance(e, (BotoConnectionError, HTTPClientError)):  # timeouts, resets, closed connections
        return "unknown"
    return "final"


def should_retry(e: BaseException, kind: Kind) -> bool:
    failure = classify(e)
    if failure == "not_applied":
        return True
    return failure == "unknown" and kind != "cas"


def _is_connection_failure(e: BaseException) -> bool:
    return isinstance(e, (BotoConnectionError, HTTPClientError))


def _b(value: bytes) -> UniversalAttributeValueTypeDef:
    return {"B": value}


class DynamoKVStore:
    """A :class:`~lakefs_core.kv.base.KVStore` on one DynamoDB table. Open with :meth:`open`."""

    max_conditional_items: int | None = TRANSACT_ITEMS

    def __init__(
        self,
        client: DynamoDBClient,
        table: str = DEFAULT_TABLE,
        *,
        attempts: int = 5,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        exit_stack: AsyncExitStack | None = None,
        display: str | None = None,
    ) -> None:
        if attempts < 1:
            raise BadInputError("must be at least 1", field="attempts")
        self._client = client
        self._table = table
        self._attempts = attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._stack = exit_stack
        self._display = display or f"dynamodb table {table}"
        self._closed = False

    @classmethod
    async def open(
        cls,
        table: str = DEFAULT_TABLE,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        session: aioboto3.Session | None = None,
        create: bool = True,
        attempts: int = 5,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        connect_timeout: float = 5.0,
        read_timeout: float = 20.0,
        max_pool_connections: int = 50,
        create_timeout: float = 300.0,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
    ) -> DynamoKVStore:
        """Open one client (credentials from the standard AWS chain unless given) and the table."""
        if not table:
            raise BadInputError("must not be empty", field="table")
        config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_pool_connections=max_pool_connections,
            http_session_cls=SharedTLSSession,  # one TLS context per process, not per client
        )
        session = session or new_session()
        stack = AsyncExitStack()
        where = f"dynamodb table {table}" + (f" at {endpoint_url}" if endpoint_url else "")
        try:
            client = await stack.enter_async_context(
                session.client(
                    "dynamodb",
                    region_name=region,
                    endpoint_url=endpoint_url,
                    config=config,
                    aws_access_key_id=aws_access_key_id,
                    aws_secret_access_key=aws_secret_access_key,
                )
            )
        except NoRegionError as e:
            await stack.aclose()
            raise BadInputError("no AWS region configured for DynamoDB", field="region") from e
        except BaseException:
            await stack.aclose()
            raise
        store = cls(
            client,
            table,
            attempts=attempts,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            exit_stack=stack,
            display=where,
        )
        if create:
            try:
                await store.create_table(active_within=create_timeout)
            except BaseException:
                await store.close()
                raise
        return store

    async def __aenter__(self) -> DynamoKVStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _translate(self, e: BaseException, kind: Kind, expected: Expect | None = None) -> LakeFSError:
        where = self._display
        if isinstance(e, ClientError):
            code = _error_code(e)
            message = str(e.response.get("Error", {}).get("Message", "")) or code
            if code == "ConditionalCheckFailedException" or (
                code == "TransactionCanceledException" and "ConditionalCheckFailed" in _cancellation_codes(e)
            ):
                return PreconditionFailedError(
                    precondition_message(expected) if expected is not None else message
                )
            if code == "TransactionCanceledException" and classify(e) == "not_applied":
                return TransientError(f"{where}: temporarily unavailable ({code}: {message})")
            if code == "ResourceNotFoundException":
                return UnreachableError(f"{where}: table not found ({message})")
            if code == "ValidationException":
                return BadInputError(f"{where} rejected the request: {message}")
            if code in _AUTH:
                return LakeFSError(f"{where}: access refused ({code}: {message})")
            failure = classify(e)
            if failure == "unknown" and kind == "cas":
                return TransientError(f"{where}: conditional write outcome unknown ({code}: {message})")
            if failure != "final":
                return TransientError(f"{where}: temporarily unavailable ({code}: {message})")
            return LakeFSError(f"{where}: {code}: {message}")
        if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
            return LakeFSError(f"{where}: no usable AWS credentials ({type(e).__name__})")
        if isinstance(e, BotoCoreError) and _is_connection_failure(e):
            reason = f"{type(e).__name__}: {e}"
            if _never_sent(e):
                return UnreachableError(f"cannot reach {where}: {reason}")
            if kind == "read":
                return UnreachableError(f"lost connection to {where}: {reason}")
            return TransientError(f"lost connection to {where} during a write; outcome unknown: {reason}")
        return LakeFSError(f"{where}: {type(e).__name__}: {e}")

    async def _call(self, fn: Callable[[], Awaitable[T]], kind: Kind, expected: Expect | None = None) -> T:
        if self._closed:
            raise closed_error("DynamoDB")
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_random_exponential(multiplier=self._backoff_initial, max=self._backoff_max),
            retry=retry_if_exception(lambda e: should_retry(e, kind)),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    result = await fn()
        except (ClientError, BotoCoreError) as e:
            raise self._translate(e, kind, expected) from e
        return result

    def _binary(self, item: Mapping[str, Any], attr: str) -> bytes:
        value = item.get(attr, {}).get("B")
        if not isinstance(value, (bytes, bytearray)):
            raise CorruptDataError(f"attribute {attr} is not binary", file=self._display)
        return bytes(value)

    def _key(self, partition: bytes, key: bytes) -> dict[str, UniversalAttributeValueTypeDef]:
        return {PARTITION_ATTR: _b(partition), KEY_ATTR: _b(key)}

    # -- schema ---------------------------------------------------------------------------------

    async def create_table(self, *, active_within: float = 300.0, max_poll_interval: float = 2.0) -> None:
        """Create the table when missing (PAY_PER_REQUEST) and wait until it is ACTIVE.

        Safe to race with other processes doing the same (``ResourceInUseException`` means someone
        else created it; we then wait for ACTIVE like they do).
        """
        client = self._client
        deadline = time.monotonic() + active_within
        interval = 0.05
        while True:
            try:
                desc = await self._call(lambda: client.describe_table(TableName=self._table), "read")
                status: str = desc["Table"].get("TableStatus", "ACTIVE")
            except UnreachableError as e:
                cause = e.__cause__
                if not (isinstance(cause, ClientError) and _error_code(cause) == "ResourceNotFoundException"):
                    raise
                status = await self._create_missing_table()
            if status == "ACTIVE":
                return
            if status not in ("CREATING", "UPDATING"):
                raise UnreachableError(f"{self._display} is {status}")
            if time.monotonic() > deadline:
                raise TransientError(f"{self._display} did not become ACTIVE within {active_within:.0f}s")
            await asyncio.sleep(interval)
            interval = min(interval * 2, max_poll_interval)

    async def _create_missing_table(self) -> str:
        """Issue CreateTable; the new table's status (``CREATING`` when another process won)."""
        client = self._client

        async def create() -> str:
            resp = await client.create_table(
                TableName=self._table,
                KeySchema=[
                    {"AttributeName": PARTITION_ATTR, "KeyType": "HASH"},
                    {"AttributeName": KEY_ATTR, "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": PARTITION_ATTR, "AttributeType": "B"},
                    {"AttributeName": KEY_ATTR, "AttributeType": "B"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            return str(resp.get("TableDescription", {}).get("TableStatus", "CREATING"))

        try:
            # Retrying after an unknown outcome is safe: a repeat only finds ResourceInUseException.
            return await self._call(create, "idempotent")
        except LakeFSError as e:
            cause = e.__cause__
            if not (isinstance(cause, ClientError) and _error_code(cause) == "ResourceInUseException"):
                raise
            return "CREATING"  # another process created it first; wait for ACTIVE

    # -- KVStore --------------------------------------------------------------------------------

    async def get(self, partition: bytes, key: bytes) -> bytes:
        p, k = check_key(partition, key)
        client = self._client
        resp = await self._call(
            lambda: client.get_item(TableName=self._table, Key=self._key(p, k), ConsistentRead=True),
            "read",
        )
        item = resp.get("Item")
        if item is None or VALUE_ATTR not in item:  # no ItemValue = absent, as the conditions see it
            raise NotFoundError("key not found in KV partition")
        return self._binary(item, VALUE_ATTR)

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        client = self._client
        item = {**self._key(p, k), VALUE_ATTR: _b(v)}

        async def put() -> None:
            await client.put_item(TableName=self._table, Item=item)

        await self._call(put, "idempotent")

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        exp = check_expect(expected)
        client = self._client
        request: PutItemInputTypeDef = {
            "TableName": self._table,
            "Item": {**self._key(p, k), VALUE_ATTR: _b(v)},
        }
        if exp.kind == "absent":
            request["ConditionExpression"] = f"attribute_not_exists({VALUE_ATTR})"
        elif exp.kind == "exists":
            request["ConditionExpression"] = f"attribute_exists({VALUE_ATTR})"
        else:
            request["ConditionExpression"] = f"{VALUE_ATTR} = :pred"
            request["ExpressionAttributeValues"] = {":pred": _b(exp.value)}

        async def put() -> None:
            await client.put_item(**request)

        await self._call(put, "cas", exp)

    async def set_many(self, items: Iterable[KVItem]) -> None:
        batch = check_items(items)
        for i in range(0, len(batch), BATCH_WRITE_ITEMS):
            await self._batch_write(batch[i : i + BATCH_WRITE_ITEMS])

    async def set_many_then_get(self, items: Iterable[KVItem], partition: bytes, key: bytes) -> bytes:
        # No transaction spans BatchWriteItem: the two calls, in this order (a strongly consistent
        # read after every item is stored), which is the contract's guarantee by definition.
        check_key(partition, key)
        await self.set_many(items)
        return await self.get(partition, key)

    async def set_many_if(self, items: Iterable[KVItem], expected: Sequence[KVExpectation]) -> None:
        batch = check_items(items)
        checks = check_expectations(expected, batch)
        conditions = {(p, k): self._condition(exp) for p, k, exp in checks}
        actions: list[Any] = []
        for p, k, v in batch:
            put: dict[str, Any] = {"TableName": self._table, "Item": {**self._key(p, k), VALUE_ATTR: _b(v)}}
            put.update(conditions.pop((p, k), {}))
            actions.append({"Put": put})
        for (p, k), condition in conditions.items():  # expected, not written
            actions.append(
                {"ConditionCheck": {"TableName": self._table, "Key": self._key(p, k), **condition}}
            )
        if len(actions) > TRANSACT_ITEMS:
            raise BadInputError(
                f"a conditional batch on DynamoDB takes at most {TRANSACT_ITEMS} items and "
                f"expectations ({len(actions)} given)",
                field="items",
            )
        if not actions:
            return
        client = self._client

        async def transact() -> None:
            await client.transact_write_items(TransactItems=actions)

        await self._call(transact, "cas")

    def _condition(self, exp: Expect) -> dict[str, Any]:
        """The ``ConditionExpression`` (and its value) of an expectation."""
        if exp.kind == "absent":  # only on a key the batch writes (checked): its Put's condition
            return {"ConditionExpression": f"attribute_not_exists({VALUE_ATTR})"}
        if exp.kind == "exists":
            return {"ConditionExpression": f"attribute_exists({VALUE_ATTR})"}
        return {
            "ConditionExpression": f"{VALUE_ATTR} = :pred",
            "ExpressionAttributeValues": {":pred": _b(exp.value)},
        }

    async def _batch_write(self, chunk: Sequence[KVItem]) -> None:
        """One ``BatchWriteItem`` of at most 25 puts, re-sending unprocessed items with backoff."""
        client = self._client
        pending: list[Any] = [
            {"PutRequest": {"Item": {**self._key(p, k), VALUE_ATTR: _b(v)}}} for p, k, v in chunk
        ]
        for attempt in range(self._attempts):
            if attempt:
                cap = min(self._backoff_max, self._backoff_initial * 2**attempt)
                await asyncio.sleep(random.uniform(0, cap))  # full jitter, as the retry loop uses

            async def write(requests: list[Any] = pending) -> BatchWriteItemOutputTypeDef:
                return await client.batch_write_item(RequestItems={self._table: requests})

            resp = await self._call(write, "idempotent")
            pending = list(resp.get("UnprocessedItems", {}).get(self._table, []))
            if not pending:
                return
        raise TransientError(
            f"{self._display}: {len(pending)} items stayed unprocessed after {self._attempts} batch writes"
        )

    async def delete(self, partition: bytes, key: bytes) -> None:
        p, k = check_key(partition, key)
        client = self._client

        async def remove() -> None:
            await client.delete_item(TableName=self._table, Key=self._key(p, k))

        await self._call(remove, "idempotent")

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        p = check_partition(partition)
        begin = as_bytes(start, "start")
        size = check_page_size(page_size)
        stop = check_end(end)
        if stop is not None and stop <= begin:
            return
        # One condition on the range key: BETWEEN is inclusive, so the end key itself is dropped
        # (an empty start cannot be a key value: "< :end" alone then).
        condition, values = f"{PARTITION_ATTR} = :p", {":p": p}
        if begin and stop is not None:
            condition += f" AND {KEY_ATTR} BETWEEN :start AND :end"
            values.update({":start": begin, ":end": stop})
        elif stop is not None:
            condition += f" AND {KEY_ATTR} < :end"
            values[":end"] = stop
        elif begin:
            condition += f" AND {KEY_ATTR} >= :start"
            values[":start"] = begin
        async for entry in self._query(condition, values, size):
            if stop is not None and entry.key >= stop:
                return
            yield entry

    async def _query(self, condition: str, values: dict[str, bytes], size: int) -> AsyncIterator[KVEntry]:
        """The entries of a paged, consistent Query (``size`` items a page)."""
        client = self._client
        request: QueryInputTypeDef = {
            "TableName": self._table,
            "ConsistentRead": True,
            "Limit": size,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": {name: _b(v) for name, v in values.items()},
        }

        async def query() -> QueryOutputTypeDef:
            return await client.query(**request)

        while True:
            resp = await self._call(query, "read")
            for item in resp.get("Items", []):
                if VALUE_ATTR in item:
                    yield KVEntry(self._binary(item, KEY_ATTR), self._binary(item, VALUE_ATTR))
            last = resp.get("LastEvaluatedKey")
            if not last:
                return
            request["ExclusiveStartKey"] = last

    async def scan_ranges(
        self, ranges: Sequence[KeyRange], *, page_size: int = 1000
    ) -> AsyncIterator[tuple[int, KVEntry]]:
        """By chunks of ``BATCH_GET_KEYS`` ranges: the one-key ranges of a chunk in one
        ``BatchGetItem``, each other range one Query (DynamoDB queries one partition at a time),
        ``RANGE_QUERIES`` in flight. A chunk's entries are held until it is read (a range is one
        page of up to 1 MB unless it is bigger than that)."""
        todo = [r for r in check_ranges(ranges) if r[2] < r[3]]
        size = check_page_size(page_size)
        slots = asyncio.Semaphore(RANGE_QUERIES)

        async def query(p: bytes, start: bytes, end: bytes) -> list[KVEntry]:
            async with slots:
                return await self._range(p, start, end, size)

        for first in range(0, len(todo), BATCH_GET_KEYS):
            chunk = todo[first : first + BATCH_GET_KEYS]
            points = {(p, s) for _, p, s, e in chunk if e == s + b"\x00"}
            wide = [(i, p, s, e) for i, p, s, e in chunk if e != s + b"\x00"]
            got, found = await asyncio.gather(
                self._batch_get(points), asyncio.gather(*(query(p, s, e) for _, p, s, e in wide))
            )
            by_index = dict(zip((r[0] for r in wide), found, strict=True))
            for index, p, start, _ in chunk:
                if index in by_index:
                    for entry in by_index[index]:
                        yield index, entry
                elif (p, start) in got:
                    yield index, KVEntry(start, got[(p, start)])

    async def _batch_get(self, keys: Iterable[tuple[bytes, bytes]]) -> dict[tuple[bytes, bytes], bytes]:
        """One ``BatchGetItem`` (consistent reads) of at most 100 keys, re-sending unprocessed keys
        with backoff; the values of the keys that exist."""
        client = self._client
        out: dict[tuple[bytes, bytes], bytes] = {}
        pending: list[Any] = [self._key(p, k) for p, k in keys]
        for attempt in range(self._attempts):
            if not pending:
                return out
            if attempt:
                cap = min(self._backoff_max, self._backoff_initial * 2**attempt)
                await asyncio.sleep(random.uniform(0, cap))  # full jitter, as the retry loop uses

            async def read(request: list[Any] = pending) -> BatchGetItemOutputTypeDef:
                return await client.batch_get_item(
                    RequestItems={self._table: {"Keys": request, "ConsistentRead": True}}
                )

            resp = await self._call(read, "read")
            for item in resp.get("Responses", {}).get(self._table, []):
                if VALUE_ATTR in item:
                    key = (self._binary(item, PARTITION_ATTR), self._binary(item, KEY_ATTR))
                    out[key] = self._binary(item, VALUE_ATTR)
            unprocessed: Mapping[str, Any] = resp.get("UnprocessedKeys", {}).get(self._table) or {}
            pending = list(unprocessed.get("Keys", []))
        if not pending:
            return out
        raise TransientError(
            f"{self._display}: {len(pending)} keys stayed unprocessed after {self._attempts} batch reads"
        )

    async def _range(self, partition: bytes, start: bytes, end: bytes, size: int) -> list[KVEntry]:
        """Every entry with ``start <= key < end`` (BETWEEN is inclusive: ``end`` itself is dropped)."""
        condition = f"{PARTITION_ATTR} = :p AND {KEY_ATTR} BETWEEN :s AND :e"
        values = {":p": partition, ":s": start, ":e": end}
        return [entry async for entry in self._query(condition, values, size) if entry.key < end]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._stack is not None:
            await self._stack.aclose()

"""The test infrastructure itself: moto regions are real and independent, PostgreSQL is real."""

from __future__ import annotations

from collections.abc import Callable

import aioboto3
import asyncpg
import pytest
from botocore.exceptions import ClientError

from tests.support.moto import MotoServer
from tests.support.pg import PgDatabase


async def test_two_regions_are_independent(moto: Callable[[str], MotoServer]) -> None:
    east, west = moto("us-east-1"), moto("eu-west-1")
    assert east.port != west.port
    session = aioboto3.Session()
    async with (
        session.client("s3", **east.client_kwargs()) as s3_east,
        session.client("s3", **west.client_kwargs()) as s3_west,
    ):
        await s3_east.create_bucket(Bucket="only-in-east")
        east_names = [b["Name"] for b in (await s3_east.list_buckets())["Buckets"]]
        west_names = [b["Name"] for b in (await s3_west.list_buckets())["Buckets"]]
    assert "only-in-east" in east_names
    assert "only-in-east" not in west_names


async def test_reset_isolates_tests_first(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    async with aioboto3.Session().client("s3", **server.client_kwargs()) as s3:
        await s3.create_bucket(Bucket="leftover")
    server.reset()
    async with aioboto3.Session().client("s3", **server.client_kwargs()) as s3:
        assert (await s3.list_buckets())["Buckets"] == []


async def test_s3_conditional_put_if_none_match(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    async with aioboto3.Session().client("s3", **server.client_kwargs()) as s3:
        await s3.create_bucket(Bucket="cas")
        await s3.put_object(Bucket="cas", Key="k", Body=b"first", IfNoneMatch="*")
        with pytest.raises(ClientError) as info:
            await s3.put_object(Bucket="cas", Key="k", Body=b"second", IfNoneMatch="*")
        assert info.value.response["Error"]["Code"] == "PreconditionFailed"
        body = await (await s3.get_object(Bucket="cas", Key="k"))["Body"].read()
    assert body == b"first"


async def test_dynamodb_conditional_put(moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    async with aioboto3.Session().client("dynamodb", **server.client_kwargs()) as ddb:
        await ddb.create_table(
            TableName="kvstore",
            KeySchema=[
                {"AttributeName": "PartitionKey", "KeyType": "HASH"},
                {"AttributeName": "ItemKey", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "PartitionKey", "AttributeType": "B"},
                {"AttributeName": "ItemKey", "AttributeType": "B"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        item = {"PartitionKey": {"B": b"p"}, "ItemKey": {"B": b"k"}, "ItemValue": {"B": b"v1"}}
        cond = "attribute_not_exists(ItemValue)"
        await ddb.put_item(TableName="kvstore", Item=item, ConditionExpression=cond)
        with pytest.raises(ClientError) as info:
            await ddb.put_item(
                TableName="kvstore", Item={**item, "ItemValue": {"B": b"v2"}}, ConditionExpression=cond
            )
        assert info.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
        key = {"PartitionKey": {"B": b"p"}, "ItemKey": {"B": b"k"}}
        got = await ddb.get_item(TableName="kvstore", Key=key, ConsistentRead=True)
    assert got["Item"]["ItemValue"]["B"] == b"v1"


async def test_postgres_is_a_real_server(pg_database: PgDatabase) -> None:
    a = await asyncpg.connect(pg_database.url)
    b = await asyncpg.connect(pg_database.url)
    try:
        assert await a.fetchval("SELECT pg_backend_pid()") != await b.fetchval("SELECT pg_backend_pid()")
        await a.execute("CREATE TABLE seen (v int)")
        async with a.transaction():
            await a.execute("INSERT INTO seen VALUES (1)")
            # Not yet committed: the other connection must not see it.
            assert await b.fetchval("SELECT count(*) FROM seen") == 0
        assert await b.fetchval("SELECT count(*) FROM seen") == 1
        await b.execute("INSERT INTO seen VALUES (2)")
        assert await a.fetchval("SELECT sum(v) FROM seen") == 3
    finally:
        await a.close()
        await b.close()

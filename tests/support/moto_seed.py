"""Seeding a moto bucket with many small objects cheaply: test set-up, never the code under test.

A test that needs thousands of objects in a moto bucket before it runs (a sweep of three
``DeleteObjects`` batches needs ~3,000 keys) spent most of its CPU writing them: through a block
store each PUT costs ~6 ms of client CPU in botocore (endpoint-ruleset resolution, SigV4 signing,
the user-agent string), as much again as moto's own handling of it. :func:`seed_objects` sends plain
HTTP PUTs instead (~1 ms of client CPU each: 1,000 PUTs took 5.8 s of client CPU through the store,
1.2 s here, moto's share unchanged at ~6.5 s). moto does not check signatures; the request carries a
SigV4-shaped ``Authorization`` header only so that moto routes it to S3 from its credential scope
(an unsigned request is routed by parsing its body). The objects are ordinary S3 objects: the code
under test lists, reads and deletes them through its real client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from urllib.parse import quote

import aiohttp

from tests.support.moto import ACCESS_KEY, MotoServer

PARALLEL = 8  # moto handles one request at a time (moto_serialized.py): more only queues


def _routing_header(region: str) -> dict[str, str]:
    scope = f"{ACCESS_KEY}/20240101/{region}/s3/aws4_request"
    return {"Authorization": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=0"}


async def seed_objects(
    server: MotoServer, bucket: str, keys: Iterable[str], body: bytes | None = None
) -> None:
    """PUT every key of ``keys`` into ``bucket`` (which must exist) on ``server``; the body is
    ``body``, or the key's own bytes when ``None``. Raises ``AssertionError`` naming the first
    key moto refused."""
    headers = _routing_header(server.region)
    gate = asyncio.Semaphore(PARALLEL)
    async with aiohttp.ClientSession() as http:

        async def put(key: str) -> None:
            async with gate:
                url = f"{server.endpoint}/{bucket}/{quote(key, safe='/')}"
                data = key.encode() if body is None else body
                async with http.put(url, data=data, headers=headers) as resp:
                    text = await resp.text()
                    assert resp.status == 200, f"seeding {bucket}/{key}: HTTP {resp.status}: {text[:500]}"

        await asyncio.gather(*(put(k) for k in keys))

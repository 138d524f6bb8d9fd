"""Seeding a moto bucket with many small objects cheaply: test set-up, never the code under test.

A test that needs thousands of objects in a moto bucket before it runs (a sweep of three
``DeleteObjects`` batches needs ~3,000 keys) spent most of its CPU writing them: through a block
store each PUT costs ~6 ms of client CPU in botocore (endpoint-ruleset resolution, SigV4 signing,
the user-agent string), and as much again in moto parsing and answering it. :func:`seed_objects`
sends the keys in a few requests to the seeding endpoint of the suite's moto server
(``tests/support/moto_serialized.py``), which stores each object with moto's own ``put_object``
(3,000 objects: ~20 s of moto's and the client's CPU by plain PUTs, well under a second this way).
The objects are ordinary moto S3 objects: the code under test lists, reads and deletes them through
its real client.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

import aiohttp

from tests.support.moto import MotoServer

# moto_serialized.py's SEED_PATH (that module patches moto when imported: the server's, not ours).
SEED_PATH = "/_lakefs-test/seed-objects"

CHUNK = 5000  # keys per request (a few hundred KB of JSON)


async def seed_objects(
    server: MotoServer, bucket: str, keys: Iterable[str], body: bytes | None = None
) -> None:
    """Store every key of ``keys`` in ``bucket`` (which must exist) on ``server``; the body is
    ``body``, or the key's own bytes when ``None``. Raises ``AssertionError`` with moto's answer
    when it refuses."""
    keys = list(keys)
    encoded = None if body is None else base64.b64encode(body).decode()
    async with aiohttp.ClientSession() as http:
        for i in range(0, len(keys), CHUNK):
            request = {"bucket": bucket, "keys": keys[i : i + CHUNK], "body": encoded}
            async with http.post(f"{server.endpoint}{SEED_PATH}", json=request) as resp:
                text = await resp.text()
                assert resp.status == 200, f"seeding {bucket}: HTTP {resp.status}: {text[:500]}"

"""lakeFS's REST API for the tests: a real ``lakefs-server run`` process (the gateway's harness,
:mod:`tests.server.harness`) on SQLite + local namespaces or PostgreSQL + S3 (moto), reached at
``<endpoint>/api/v1`` with the admin's keys."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.server.harness import ADMIN, ENCRYPT_SECRET, Server, _seed
from tests.support.moto import ACCESS_KEY as MOTO_KEY
from tests.support.moto import SECRET_KEY as MOTO_SECRET
from tests.support.pg import create_database, drop_database

ACCESS_KEY = ADMIN.access_key_id
SECRET_KEY = ADMIN.secret_access_key


@dataclass
class RestServer:
    endpoint: str  # http://127.0.0.1:PORT (the clients add /api/v1)
    namespace_root: str  # where repositories' namespaces go: local:///... or s3://bucket/...
    process: Server

    @property
    def api(self) -> str:
        return self.endpoint + "/api/v1"

    def namespace(self, name: str) -> str:
        return f"{self.namespace_root.rstrip('/')}/{name}"


@contextmanager
def rest_server(
    tmp: Path, core: dict[str, Any] | None = None, namespace_root: str | None = None, **kw: Any
) -> Iterator[RestServer]:
    """A seeded server (the harness's users and repository ``repo``) until the block ends."""
    if core is None:
        (tmp / "ns").mkdir(parents=True, exist_ok=True)
        core = {"kv_url": f"sqlite:///{tmp / 'kv.sqlite3'}"}
    root = namespace_root or f"local://{tmp / 'ns'}"
    asyncio.run(_seed(core, f"{root}/repo"))
    # The auth cache on, as deployed: without it every request decrypts its credential again.
    auth = {"encrypt": {"secret_key": ENCRYPT_SECRET}, "cache_seconds": 20}
    server = Server(tmp, core, extra={"auth": auth}, **kw).start()
    try:
        yield RestServer(server.endpoint, root, server)
    finally:
        server.stop()


def pg_s3_core(request: pytest.FixtureRequest, name: str) -> tuple[dict[str, Any], str]:
    """Core settings on a PostgreSQL database of its own (dropped at the end of the fixture) and a
    namespace root in a new moto bucket ``name-<random>``. Skips locally / fails in CI when
    PostgreSQL is unreachable. A database of its own: the session's is shared by every module of
    this worker, and another module (the CLI's auth tests) may already have set its installation up."""
    request.getfixturevalue("pg_database")
    pg = create_database()
    request.addfinalizer(lambda: drop_database(pg))
    moto = request.getfixturevalue("moto_regions").get("us-east-1")
    bucket = f"{name}-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", **moto.client_kwargs()).create_bucket(Bucket=bucket)
    s3 = {
        "endpoint_url": moto.endpoint,
        "region": "us-east-1",
        "access_key_id": MOTO_KEY,
        "secret_access_key": MOTO_SECRET,
        "addressing_style": "path",
    }
    return {"kv_url": pg.sqlalchemy_url, "s3": s3}, f"s3://{bucket}/repos"

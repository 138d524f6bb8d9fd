"""lakeFS's REST API for the tests: a real ``lakefs-server run`` process (the gateway's harness,
:mod:`tests.server.harness`) on SQLite + local namespaces or PostgreSQL + S3 (moto), reached at
``<endpoint>/api/v1`` with the admin's keys."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.server.harness import ADMIN, ENCRYPT_SECRET, Server, _seed

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

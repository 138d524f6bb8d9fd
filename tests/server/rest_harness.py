"""A REST server for the tests: lakeFS's API on a real socket (127.0.0.1, a free port), its event
loop in a thread of the test process, over a fresh SQLite KV and local namespaces (or the KV and
S3 a test names). The clients under test (lakefs-sdk, lakefs, lakefs-spec) are synchronous, so they
run on the test's own thread against it."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.setup import setup
from lakefs_core.auth.store import AuthStore
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from lakefs_server.rest import Authenticator, RestDeps, StorageInfo, build_api_app

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SIGNING_SECRET = "test-signing-secret-0123456789"


@dataclass
class RestServer:
    endpoint: str  # http://127.0.0.1:PORT (the clients add /api/v1)
    namespace_root: str  # where repositories' namespaces go: local:///... or s3://bucket/...
    loop: asyncio.AbstractEventLoop
    deps: RestDeps

    def namespace(self, name: str) -> str:
        return f"{self.namespace_root.rstrip('/')}/{name}"

    def run(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def rest_server(
    tmp: Path,
    *,
    kv_url: str | None = None,
    namespace_root: str | None = None,
    settings: CoreSettings | None = None,
    storage: StorageInfo | None = None,
) -> Iterator[RestServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    core_settings = settings or CoreSettings(kv_url=kv_url or f"sqlite+aiosqlite:///{tmp}/kv.db")
    root = namespace_root or f"local://{tmp}/ns"
    info = storage or StorageInfo("local", "local://path/to/namespace")

    async def start() -> tuple[web.AppRunner, RestDeps, int]:
        core = await open_core(core_settings)
        store = AuthStore(core.kv, SecretStore(SIGNING_SECRET))
        await setup(store, "admin", access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
        deps = RestDeps(core.graveler, core.objects, Authenticator(store, SIGNING_SECRET.encode()), info)
        deps.imports["core"] = core
        root_app = web.Application()
        root_app.add_subapp("/api/v1", build_api_app(deps))
        runner = web.AppRunner(root_app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner, deps, port

    runner, deps, port = asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    server = RestServer(f"http://127.0.0.1:{port}", root, loop, deps)
    try:
        yield server
    finally:

        async def stop() -> None:
            await runner.cleanup()
            await deps.imports["core"].aclose()  # type: ignore[attr-defined]

        asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

"""A counting, throttling S3 reverse proxy (aiohttp, real sockets on 127.0.0.1) for moto_server.

moto never throttles, so tests and benchmarks of the GC sweep put :class:`ThrottlingProxy` in front of
it: the S3 client talks to the proxy as if it were S3. The proxy

- forwards every request unchanged and counts it by S3 operation (:attr:`ThrottlingProxy.requests`,
  e.g. ``"DeleteObjects"``, ``"ListObjectsV2"``, ``"PutObject"``), and counts the keys each
  ``DeleteObjects`` named (:attr:`ThrottlingProxy.delete_keys_sent`);
- answers ``503 SlowDown`` (S3's XML error body, plus ``Retry-After`` when ``retry_after`` is set)
  WITHOUT forwarding to a share ``throttle_share`` of the ``DeleteObjects`` requests (a seeded random
  choice, so a run is reproducible), and to the next ``throttle_next`` ones whatever the share;
- can answer the next ``DeleteObjects`` with a scripted response (:meth:`ThrottlingProxy.script`), to
  check how a client reads per-key errors S3 sends but moto does not.

Use ``async with ThrottlingProxy(moto.endpoint, ...) as proxy:`` and point the client at
``proxy.endpoint``.
"""

from __future__ import annotations

import io
import random
import re
import socket
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType

import aiohttp
from aiohttp import web

_HOP_BY_HOP = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "expect",
    "te",
    "trailer",
    "upgrade",
}
_KEY_TAG = re.compile(rb"<Key>")

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>throttling-proxy</RequestId></Error>"
)


@dataclass(frozen=True)
class Scripted:
    """A canned answer: status, body, extra headers."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def operation(request: web.Request) -> str:
    """The S3 operation of ``request`` (path-style addressing), as the counters name it."""
    q, m = request.query, request.method
    has_key = request.path.strip("/").count("/") >= 1
    if m == "POST" and "delete" in q:
        return "DeleteObjects"
    if m == "GET" and not has_key:
        return "ListObjectsV2" if q.get("list-type") == "2" else "ListObjects"
    if "uploadId" in q or "uploads" in q:
        return f"Multipart{m}"
    return (
        {"GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject", "DELETE": "DeleteObject"}.get(m, m)
        if has_key
        else f"Bucket{m}"
    )


class ThrottlingProxy:
    """See the module docstring."""

    def __init__(
        self,
        upstream: str,
        *,
        throttle_share: float = 0.0,
        throttle_next: int = 0,
        retry_after: float | None = None,
        seed: int = 0,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.throttle_share = throttle_share
        self.throttle_next = throttle_next
        self.retry_after = retry_after
        self._rng = random.Random(seed)
        self._scripted: list[Scripted] = []
        self.requests: Counter[str] = Counter()
        self.throttled = 0
        self.delete_keys_sent = 0
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        """Answer the next ``DeleteObjects`` (not forwarded) with this response."""
        self._scripted.append(Scripted(status, body, dict(headers or {})))

    def reset_counts(self) -> None:
        self.requests.clear()
        self.throttled = 0
        self.delete_keys_sent = 0

    async def start(self) -> ThrottlingProxy:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ThrottlingProxy:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _throttle_now(self) -> bool:
        if self.throttle_next > 0:
            self.throttle_next -= 1
            return True
        return self.throttle_share > 0 and self._rng.random() < self.throttle_share

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        op = operation(request)
        self.requests[op] += 1
        body = await request.read()
        if op == "DeleteObjects":
            self.delete_keys_sent += len(_KEY_TAG.findall(body))
            if self._scripted:
                s = self._scripted.pop(0)
                return web.Response(
                    status=s.status, body=s.body, headers=s.headers, content_type="application/xml"
                )
            if self._throttle_now():
                self.throttled += 1
                headers = {} if self.retry_after is None else {"Retry-After": f"{self.retry_after:g}"}
                return web.Response(
                    status=503, body=SLOWDOWN_BODY, headers=headers, content_type="application/xml"
                )
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=io.BytesIO(body) if body else None,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            status = upstream.status
        if request.method == "HEAD":
            resp = web.StreamResponse(status=status, headers=out_headers)
            if "Content-Length" in upstream.headers:
                resp.content_length = int(upstream.headers["Content-Length"])
            await resp.prepare(request)
            return resp
        return web.Response(status=status, headers=out_headers, body=payload)

"""A tiny fault-injecting HTTP proxy in front of moto_server (real sockets on 127.0.0.1).

The S3 driver talks to the proxy as if it were S3. Rules decide, per request, whether to pass it
through or to misbehave: answer an S3 error without forwarding (``reply``), forward and then answer an
error anyway so the write lands but the client cannot know (``forward_then_reply``), forward but cut
the body short (``truncate``), or drop the connection without an answer (``drop``). Tests observe
outcomes (and how many requests the proxy saw), never the client's call shapes.
"""

from __future__ import annotations

import asyncio
import io
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp
from aiohttp import web

HOP_BY_HOP = {
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


@dataclass(frozen=True)
class Fault:
    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    mode: Literal["reply", "forward_then_reply", "truncate", "drop"] = "reply"
    body: bytes | None = None  # a full custom body for "reply" (e.g. a DeleteObjects result)
    keep: float = 0.5  # for "truncate": the share of the body sent before the connection is cut

    def error_body(self) -> bytes:
        if self.body is not None:
            return self.body
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{self.code}</Code><Message>{self.message}</Message>"
            "<RequestId>fault-proxy</RequestId></Error>"
        ).encode()


Match = Callable[[web.Request], bool]


@dataclass
class _Rule:
    fault: Fault
    remaining: int | None  # None: forever
    match: Match


def is_method(method: str, query_has: str | None = None) -> Match:
    """Match requests by HTTP method and, optionally, a query parameter name (``uploadId``...)."""

    def match(request: web.Request) -> bool:
        if request.method != method:
            return False
        return query_has is None or query_has in request.query

    return match


def any_request(_: web.Request) -> bool:
    return True


class FaultProxy:
    """An aiohttp server forwarding to ``upstream`` unless a rule injects a fault."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.seen: list[tuple[str, str]] = []
        self._rules: list[_Rule] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, fault: Fault, *, times: int | None = 1, when: Match = any_request) -> None:
        self._rules.append(_Rule(fault, times, when))

    def clear(self) -> None:
        self._rules.clear()
        self.seen.clear()

    def count(self, method: str, query_has: str | None = None) -> int:
        return sum(
            1 for m, path in self.seen if m == method and (query_has is None or f"{query_has}" in path)
        )

    def _take(self, request: web.Request) -> Fault | None:
        for rule in self._rules:
            if rule.remaining == 0 or not rule.match(request):
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
            return rule.fault
        return None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @staticmethod
    def _error(fault: Fault) -> web.Response:
        return web.Response(status=fault.status, body=fault.error_body(), content_type="application/xml")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path_qs))
        try:
            body = await request.read()
        except ConnectionResetError:  # the client gave up on this request (e.g. a cancelled part)
            return web.Response(status=499)
        fault = self._take(request)
        if fault is not None and fault.mode == "reply":
            return self._error(fault)
        if fault is not None and fault.mode == "drop":
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(0)
            return web.Response(status=500)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=io.BytesIO(body) if body else None,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            status = upstream.status
        if fault is not None and fault.mode == "forward_then_reply":
            return self._error(fault)
        if fault is not None and fault.mode == "truncate" and len(payload) > 1:
            resp = web.StreamResponse(status=status, headers=out_headers)
            resp.content_length = len(payload)
            await resp.prepare(request)
            await resp.write(payload[: int(len(payload) * fault.keep)])
            assert request.transport is not None
            request.transport.close()
            return resp
        if request.method == "HEAD":
            resp = web.StreamResponse(status=status, headers=out_headers)
            if "Content-Length" in upstream.headers:
                resp.content_length = int(upstream.headers["Content-Length"])
            await resp.prepare(request)
            return resp
        return web.Response(status=status, headers=out_headers, body=payload)

"""A TCP proxy on 127.0.0.1 that can cut the connections it carries at a chosen moment.

``sever_on_next_request()`` marks every connection open now: the next bytes its client sends are
not forwarded, and both sockets are closed. The client therefore sees its connection alive until it
uses it, and then loses it mid-request, which is what a server restart or a NAT timeout does to an
idle pooled connection. Connections opened afterwards are forwarded normally.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass(eq=False)  # identity: pairs live in a set
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    doomed: bool = False

    async def close(self) -> None:
        for w in (self.client, self.server):
            w.close()
        for w in (self.client, self.server):
            with contextlib.suppress(OSError):
                await w.wait_closed()


@dataclass
class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port``."""

    target_host: str
    target_port: int
    port: int = 0
    severed: int = 0  # connections cut by sever_on_next_request
    _pairs: set[_Pair] = field(default_factory=set)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _closed: bool = False

    async def start(self) -> TcpProxy:
        """Listen on ``port`` (0: a free one; a closed proxy restarts on its old port)."""
        self._closed = False
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self._closed = True  # a connection accepted meanwhile is closed, not forwarded
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs):
            await pair.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sever_on_next_request(self) -> int:
        """Doom every open connection; returns how many."""
        for pair in self._pairs:
            pair.doomed = True
        return len(self._pairs)

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            if self._closed:
                raise ConnectionRefusedError
            s_reader, s_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            c_writer.close()
            with contextlib.suppress(OSError):
                await c_writer.wait_closed()
            return
        except BaseException:
            # cancelled while connecting upstream (the loop ends with this handler pending): the
            # accepted socket would otherwise be collected open ("unclosed transport")
            c_writer.close()
            raise
        pair = _Pair(c_writer, s_writer)
        if self._closed:  # closed while connecting upstream: nobody would ever close this pair
            await pair.close()
            return
        self._pairs.add(pair)
        up = asyncio.create_task(self._pump(c_reader, pair, upstream=True))
        down = asyncio.create_task(self._pump(s_reader, pair, upstream=False))
        self._tasks |= {up, down}
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._pairs.discard(pair)
            await pair.close()
            for t in (up, down):
                t.cancel()
                self._tasks.discard(t)

    async def _pump(self, reader: asyncio.StreamReader, pair: _Pair, *, upstream: bool) -> None:
        writer = pair.server if upstream else pair.client
        with contextlib.suppress(OSError):
            while data := await reader.read(CHUNK):
                if upstream and pair.doomed:
                    self.severed += 1
                    return  # the request is dropped; _accept closes both sides
                writer.write(data)
                await writer.drain()

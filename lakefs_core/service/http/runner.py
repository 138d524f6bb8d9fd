"""Serving a daemon's API: aiohttp's connection handler with JSON errors and quiet, secret-free logs.

aiohttp answers the requests its HTTP parser rejects (a header line over 8190 bytes, more than 128
headers, a bad request line, broken chunked framing, an unsupported ``Content-Encoding``) by itself,
before any middleware or authentication runs: with a text/plain body quoting the offending bytes
(which may be an ``Authorization`` header) and an ERROR log record whose traceback quotes them again.
:class:`ApiRunner`, a :class:`~aiohttp.web.AppRunner`, serves the app with a connection handler that
instead:

- answers a malformed request with the APIs' JSON error body (``{"message": ..., "field": ...}``,
  ``field`` only for body framing/encoding errors), a fixed message per kind of error that never
  repeats request bytes, aiohttp's 4xx status; the connection is closed after it (no
  ``Connection`` header is sent: the client sees the close);
- logs it as ONE WARNING line (DEBUG for a non-HTTP first request, e.g. TLS to a plain port) naming
  the peer address, the status and the error class only: no message, header, body or traceback;
- logs a body that failed to decode while aiohttp drained it after the response (a bad gzip body on
  a request already answered 400 or 401) the same way, as one WARNING line;
- keeps server bugs (status 500) as aiohttp logs them (ERROR with traceback, for the operator) but
  answers them ``{"message": "internal error"}``.

The parser limits stay aiohttp's defaults (``max_line_size``/``max_field_size`` 8190 bytes,
``max_headers`` 128); pass them to :class:`ApiRunner` like any ``AppRunner`` keyword to change them.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    ContentEncodingError,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

__all__ = ["ApiRunner"]

log = logging.getLogger(__name__)

_CLIENT_ERRORS = (HttpProcessingError, RequestPayloadError)
# aiohttp's own fixed text for the header-count limit (compared, never echoed).
_TOO_MANY_HEADERS = "Too many headers received"


def _describe(exc: BaseException) -> tuple[str, str | None]:
    """A fixed message (and field) for a parser error: never the parser's text, which quotes bytes."""
    kinds: tuple[tuple[type[BaseException], str, str | None], ...] = (
        (LineTooLong, "the request line or a header line is too long", None),
        (BadHttpMethod, "malformed request line (unknown method)", None),
        (BadStatusLine, "malformed request line", None),
        (InvalidURLError, "malformed request target", None),
        (InvalidHeader, "malformed header", None),
        (ContentEncodingError, "unsupported or undecodable Content-Encoding", "body"),
        (TransferEncodingError, "malformed chunked transfer encoding", "body"),
        (ContentLengthError, "the body is shorter than its Content-Length", "body"),
        (RequestPayloadError, "the body cannot be read (bad Content-Encoding or framing)", "body"),
    )
    for kind, message, field in kinds:
        if isinstance(exc, kind):
            return message, field
    if isinstance(exc, BadHttpMessage) and exc.message == _TOO_MANY_HEADERS:
        return "too many headers", None
    return "malformed HTTP request", None


class _JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering and logging client errors as the module describes."""

    def _peer(self) -> str:
        transport = self.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) and peer else "?"

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            # As aiohttp does: a response is under way, the connection is beyond repair.
            raise ConnectionError("Response is sent already, cannot send another response")
        if status >= 500 or not isinstance(exc, _CLIENT_ERRORS):
            # Our own bug (or a handler timeout): the operator wants the traceback, the client does not.
            self.log_exception("Error handling request", exc_info=exc)
            body: dict[str, Any] = {"message": "internal error"}
            status = status if status >= 500 else 500
        else:
            text, field = _describe(exc)
            body = {"message": text} if field is None else {"message": text, "field": field}
            status = status if 400 <= status < 500 else 400
            quiet = self._request_count == 1 and isinstance(exc, BadHttpMethod)
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "rejected a malformed HTTP request from %s: %d %s",
                self._peer(),
                status,
                type(exc).__name__,
            )
        response = web.json_response(body, status=status)
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, _CLIENT_ERRORS):
            # The body of an answered request failed while aiohttp drained it (e.g. bad gzip).
            log.warning(
                "dropped the connection from %s: the request body cannot be read (%s)",
                self._peer(),
                type(exc).__name__,
            )
            return
        super().log_exception(*args, **kw)


class _JsonErrorServer(web.Server):
    """A :class:`~aiohttp.web.Server` whose connections are handled by :class:`_JsonErrorHandler`."""

    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """An :class:`~aiohttp.web.AppRunner` answering malformed requests in JSON (see the module)."""

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # starts and freezes the app, gathers the handler kwargs
        return _JsonErrorServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=made._loop,
            **made._kwargs,
        )


async def serve_api(app: web.Application, host: str, port: int) -> tuple[ApiRunner, int]:
    """Serve ``app`` on ``host:port`` (0: any free port) with :class:`ApiRunner`; returns the runner
    (``cleanup()`` it) and the bound port. A port in use or a bad address is a
    :class:`~lakefs_core.errors.StartupError` on ``listen`` (exit 16), never a traceback. The
    process then favours its event loop over CPU workers for the GIL (:mod:`lakefs_core.offloop`)."""
    import os

    from lakefs_core.errors import StartupError
    from lakefs_core.offloop import favour_the_loop

    favour_the_loop()

    runner = ApiRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        reason = os.strerror(e.errno) if e.errno else str(e)  # uvloop's message repeats the address
        raise StartupError(f"cannot listen on {host}:{port}: {reason}", key="listen") from e
    sockets = getattr(site._server, "sockets", None) or []  # the real port when 0 was asked for
    return runner, (sockets[0].getsockname()[1] if sockets else port)

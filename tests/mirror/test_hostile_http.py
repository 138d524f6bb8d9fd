"""Malformed HTTP before authentication, against the real daemon's API on 127.0.0.1.

The daemon is :class:`MirrorService` (its own runner, port 0, SQLite mirrors database in the test's
tmp dir); every request is written as raw bytes over a socket, since no HTTP client sends these.
Each must be answered with the API's JSON error body and a 4xx status, be logged as at most one
WARNING line without traceback or request bytes, and never put a credential in a log or response.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.service import MirrorService

KEY = "AKIAHOSTILETEST"
SECRET = "hostile-secret-Never-Shown-42"
TOKEN = base64.b64encode(f"{KEY}:{SECRET}".encode()).decode()
WRONG = base64.b64encode(f"{KEY}:guessed-Password-77".encode()).decode()
PATH = "/service/replication/v1/repositories/src-repo/mirrors"
FILLER = "Q" * 9000  # over aiohttp's 8190-byte line limit


def _request(method: str, headers: list[str], body: bytes = b"", target: str = PATH) -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{h}\r\n" for h in headers)
    return head.encode("latin-1") + b"\r\n" + body


def _encoded(encoding: str, token: str, body: bytes = b"not compressed at all") -> bytes:
    headers = [
        f"Authorization: Basic {token}",
        "Content-Type: application/json",
        f"Content-Encoding: {encoding}",
        f"Content-Length: {len(body)}",
    ]
    return _request("POST", headers, body)


CASES: list[tuple[str, list[bytes], int]] = [
    ("header-line-too-long", [_request("GET", [f"Authorization: Basic {TOKEN}", f"X-Big: {FILLER}"])], 400),
    ("authorization-too-long", [_request("GET", [f"Authorization: Basic {TOKEN}{FILLER}"])], 400),
    (
        "too-many-headers",
        [_request("GET", [f"Authorization: Basic {TOKEN}"] + [f"X-H{i}: v" for i in range(200)])],
        400,
    ),
    ("bad-gzip-valid-credentials", [_encoded("gzip", TOKEN)], 400),
    ("bad-gzip-wrong-credentials", [_encoded("gzip", WRONG)], 401),
    ("bad-deflate-valid-credentials", [_encoded("deflate", TOKEN)], 400),
    ("unsupported-encoding-zstd", [_encoded("zstd", TOKEN)], 400),
    ("unsupported-encoding-br", [_encoded("br", WRONG)], 400),
    ("bad-request-line", [f"GET\x01 /{SECRET} HTTP/1.1\r\nHost: x\r\n\r\n".encode()], 400),
    (
        "request-target-too-long",
        [_request("GET", [f"Authorization: Basic {TOKEN}"], target=f"/{FILLER}")],
        400,
    ),
    (
        "bad-chunk-size",
        [
            _request(
                "POST",
                [f"Authorization: Basic {TOKEN}", "Transfer-Encoding: chunked"],
                b"ZZZ\r\nabc\r\n0\r\n\r\n",
            )
        ],
        400,
    ),
    (
        "content-length-and-chunked",
        [
            _request(
                "POST", [f"Authorization: Basic {TOKEN}", "Content-Length: 5", "Transfer-Encoding: chunked"]
            )
        ],
        400,
    ),
    ("control-char-in-authorization", [_request("GET", [f"Authorization: Basic {TOKEN}\x01"])], 400),
]


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[MirrorService]:
    env = {
        "LAKEFS_MIRROR__REGION": "us-east-1",
        "LAKEFS_MIRROR__REGIONS__US-EAST-1__KV_URL": "memory://",
        "LAKEFS_MIRROR__REGIONS__EU-WEST-1__KV_URL": "memory://",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"sqlite:///{tmp_path / 'mirrors.sqlite3'}",
        "LAKEFS_MIRROR__LISTEN": "127.0.0.1:0",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID": KEY,
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": SECRET,
    }
    service = await MirrorService.open(load_mirror_config(None, env))
    try:
        yield service
    finally:
        await service.close()


async def exchange(port: int, parts: list[bytes]) -> tuple[int, dict[str, str], bytes]:
    """Send ``parts`` raw, read until the server closes; the parsed status line, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def _secrets() -> list[str]:
    return [SECRET, TOKEN, WRONG, "guessed-Password-77", TOKEN[:24], FILLER[:64]]


@pytest.mark.parametrize(("case", "parts", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_malformed_requests_get_json_4xx_and_one_quiet_log_line(
    daemon: MirrorService,
    caplog: pytest.LogCaptureFixture,
    case: str,
    parts: list[bytes],
    expected: int,
) -> None:
    assert daemon.bound_port is not None
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    status, headers, body = await exchange(daemon.bound_port, parts)
    await asyncio.sleep(0.05)  # let the server finish logging the connection's end
    assert status == expected, (case, body)
    assert headers["content-type"].startswith("application/json"), (case, headers)
    payload = json.loads(body)
    assert isinstance(payload, dict) and set(payload) <= {"message", "field"}, payload
    assert isinstance(payload["message"], str) and payload["message"]
    shown = body.decode("latin-1") + json.dumps(headers)
    for secret in _secrets():
        assert secret not in shown, (case, secret)
    # Other tenants of this process log too: py4j's DEBUG lines when a Spark test ran earlier here.
    records = [r for r in caplog.records if not r.name.startswith(("aiosqlite", "asyncio", "py4j"))]
    loud = [r for r in records if r.levelno >= logging.WARNING]
    assert len(loud) <= 1, [r.getMessage() for r in loud]
    assert all(r.levelno == logging.WARNING for r in loud), [(r.levelname, r.getMessage()) for r in loud]
    for record in records:
        assert record.exc_info is None and record.exc_text is None, (case, record.getMessage())
        text = record.getMessage()
        assert "\n" not in text, text
        for secret in [*_secrets(), "X-Big", "X-H1", "not compressed"]:
            assert secret not in text, (case, secret, text)


async def test_well_formed_requests_still_work_behind_the_json_runner(daemon: MirrorService) -> None:
    assert daemon.bound_port is not None
    ok = _request("GET", [f"Authorization: Basic {TOKEN}", "Connection: close"], target="/_health")
    status, headers, body = await exchange(daemon.bound_port, [ok])
    assert (status, json.loads(body)["status"]) == (200, "ok")
    denied = _request("GET", [f"Authorization: Basic {WRONG}", "Connection: close"])
    status, headers, body = await exchange(daemon.bound_port, [denied])
    assert status == 401 and headers["www-authenticate"].startswith("Basic")
    assert "guessed-Password-77" not in body.decode()

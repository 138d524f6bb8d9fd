"""Turning requests that real signers produced (botocore's, AWS's documented examples) into
:class:`~lakefs_core.auth.signed.SignedRequest` values, as the gateway's HTTP layer will."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import boto3  # type: ignore[import-untyped]
import botocore.config  # type: ignore[import-untyped]
from botocore.awsrequest import AWSResponse  # type: ignore[import-untyped]

from lakefs_core.auth.signed import SignedRequest

ACCESS_KEY = "AKIAJABCDEFGHIJKLMNQ"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def from_url(
    method: str, url: str, headers: Mapping[str, str | bytes], bucket: str | None = None
) -> SignedRequest:
    split = urlsplit(url)
    pairs = tuple((_text(k), _text(v)) for k, v in headers.items())
    if not any(k.lower() == "host" for k, _ in pairs):
        pairs = (("Host", split.netloc), *pairs)
    return SignedRequest(method, split.path or "/", split.query, pairs, bucket=bucket)


class _Raw:
    def stream(self, **_: Any) -> Any:
        return iter([b""])


def capture(
    call: Callable[[Any], Any], *, config: dict[str, Any] | None = None
) -> tuple[SignedRequest, bytes]:
    """The request a boto3 S3 client sends for ``call(client)`` (path style, HTTPS endpoint: what
    boto3 1.40 does by default, trailers included), and its body, without sending it."""
    captured: list[tuple[SignedRequest, bytes]] = []

    def hook(request: Any, **_: Any) -> AWSResponse:
        body = request.body
        if hasattr(body, "read"):
            body = body.read()
        captured.append((from_url(request.method, request.url, request.headers), bytes(body or b"")))
        return AWSResponse(request.url, 200, {"ETag": '"0"'}, _Raw())

    session = boto3.session.Session(
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET, region_name="us-east-1"
    )
    cfg = botocore.config.Config(s3={"addressing_style": "path"}, **(config or {}))
    client = session.client("s3", endpoint_url="https://gw.example.test", config=cfg)
    client.meta.events.register("before-send.s3", hook)
    call(client)
    return captured[-1]

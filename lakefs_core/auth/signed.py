"""A request as its signature sees it, and what a verified signature tells the body verifier.

:class:`SignedRequest` is built by the HTTP layer from what it received, untouched: the method, the
RAW path (percent-encoded as sent, no query; the gateway takes object keys from it too, so ``//``,
``%2F``, ``+`` and unicode keys are signed as they travel), the raw query string and the header
pairs in order (repeated names allowed). The query string is parsed once per request, when first
asked (the gateway asks for a dozen parameters of one request). Nothing here does I/O; every
function is pure and safe on hostile input: sizes are bounded, failures are one typed error
(:class:`~lakefs_core.errors.BadRequestError` for a malformed request,
:class:`~lakefs_core.errors.AuthenticationError` for a refused one), and no message repeats a
secret, a signature or a header value that could hold one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import quote_from_bytes, unquote_to_bytes

from lakefs_core.errors import BadRequestError

__all__ = [
    "MAX_HEADER_BYTES",
    "STREAMING_SIGNED",
    "STREAMING_SIGNED_TRAILER",
    "STREAMING_UNSIGNED_TRAILER",
    "UNSIGNED_PAYLOAD",
    "ChunkSigning",
    "SignedRequest",
    "VerifiedRequest",
    "uri_encode",
]

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
MAX_HEADER_BYTES = 64 * 1024  # one header value or the raw path/query: more is not a request we sign
MAX_QUERY_PARAMS = 1000
_UNRESERVED = b"-_.~"


def uri_encode(raw: bytes) -> str:
    """AWS's ``UriEncode``: every byte but ``A-Za-z0-9-_.~`` as ``%XX`` (upper-case hex)."""
    return quote_from_bytes(raw, safe=_UNRESERVED)


@dataclass(frozen=True)
class SignedRequest:
    """What a signature covers (see the module). ``bucket`` is the bucket of a virtual-host-style
    request (``repo.s3.example.com``), which SigV2's canonical resource names."""

    method: str
    raw_path: str
    raw_query: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    bucket: str | None = None
    _lower: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.raw_path.startswith("/") or len(self.raw_path) > MAX_HEADER_BYTES:
            raise BadRequestError("the request path must start with '/'", field="path")
        if len(self.raw_query) > MAX_HEADER_BYTES:
            raise BadRequestError("the query string is too long", field="query")
        for name, value in self.headers:
            if len(value) > MAX_HEADER_BYTES:
                raise BadRequestError("a header value is too long", field=name[:100])
            self._lower.setdefault(name.lower(), []).append(value)

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` (any case), in order."""
        return self._lower.get(name.lower(), [])

    def header(self, name: str) -> str | None:
        values = self._lower.get(name.lower())
        return values[0] if values else None

    def header_names(self) -> list[str]:
        """The lower-cased names of the headers present."""
        return list(self._lower)

    def query_pairs(self) -> list[tuple[bytes, bytes, bool]]:
        """``(name, value, has '=')`` of every query parameter, percent-decoded to bytes (``+`` is kept
        as itself: S3 clients encode a space as ``%20``)."""
        return list(self._pairs)

    @cached_property
    def _pairs(self) -> tuple[tuple[bytes, bytes, bool], ...]:
        # (cached_property writes the instance's __dict__, which a frozen dataclass allows; a raise
        # is not cached, so a bad query string fails every time it is read)
        if not self.raw_query:
            return ()
        pairs = []
        for piece in self.raw_query.split("&"):
            if not piece:
                continue
            name, eq, value = piece.partition("=")
            pairs.append((unquote_to_bytes(name), unquote_to_bytes(value), bool(eq)))
            if len(pairs) > MAX_QUERY_PARAMS:
                raise BadRequestError("too many query parameters", field="query")
        return tuple(pairs)

    @cached_property
    def _by_name(self) -> dict[bytes, list[bytes]]:
        found: dict[bytes, list[bytes]] = {}
        for name, value, _ in self._pairs:
            found.setdefault(name, []).append(value)
        return found

    def has_query(self, name: str) -> bool:
        """Whether query parameter ``name`` (exact case) is present, with or without a value."""
        return name.encode() in self._by_name

    def query(self, name: str) -> str | None:
        """The single value of query parameter ``name`` (exact case); two of them are bad input."""
        found = self._by_name.get(name.encode())
        if not found:
            return None
        if len(found) > 1:
            raise BadRequestError(f"query parameter {name} is given twice", field=name)
        try:
            return found[0].decode()
        except UnicodeDecodeError:
            raise BadRequestError("must be UTF-8", field=name) from None


@dataclass(frozen=True)
class ChunkSigning:
    """What a streamed body's chunk signatures are chained from (SigV4 streaming uploads)."""

    signing_key: bytes = field(repr=False)
    amz_date: str
    scope: str
    seed_signature: str = field(repr=False)


@dataclass(frozen=True)
class VerifiedRequest:
    """A request whose signature matched: who signed it and how its body is to be verified.

    ``payload`` is the declared payload hash (``x-amz-content-sha256``: a hex SHA-256, ``UNSIGNED-PAYLOAD``
    or one of the ``STREAMING-*`` modes; ``UNSIGNED-PAYLOAD`` for SigV2); ``chunk_signing`` is set for
    the signed streaming modes. Build the body's decoder with
    :func:`lakefs_core.auth.payload.body_verifier`."""

    access_key_id: str
    version: int
    payload: str
    presigned: bool = False
    chunk_signing: ChunkSigning | None = None

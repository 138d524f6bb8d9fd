"""AWS Signature Version 4 for S3: the ``Authorization`` header and presigned URLs (query auth), pure.

:func:`parse` reads a request's signature without any secret (so the caller can look the access key
up); :meth:`SigV4.verify` recomputes it with the secret and checks the time window:

- canonical request as AWS specifies it for S3: method, the canonical URI, the canonical query
  (every parameter but ``X-Amz-Signature``, names and values ``UriEncode``-d and sorted), the signed
  headers (values trimmed, inner runs of spaces collapsed, repeated headers joined with ``,``), the
  signed header list and the payload hash (``x-amz-content-sha256``; ``UNSIGNED-PAYLOAD`` when absent,
  as lakeFS takes it). S3 does not normalise paths: the canonical URI is the raw path as the client
  sent it, which is what S3 clients sign (botocore's S3 signer, the Java, Go and C++ SDKs); a client
  that signed the ``UriEncode`` of each decoded segment while sending other escapes (``+``, ``!``
  raw) is accepted too. Both forms cover the same key: keys are taken from the raw path;
- the signed headers must include ``host`` and every ``x-amz-*`` header the request carries
  (``x-amz-content-sha256`` is covered by the payload line anyway): an unsigned ``x-amz-copy-source``
  or ``x-amz-meta-*`` could otherwise be added to a captured request (stricter than lakeFS);
- time: the request time (``X-Amz-Date``, else ``Date``, ISO 8601 basic) must fall on the credential
  scope's date; a header-signed request is accepted within 15 minutes of now either way
  (``RequestTimeTooSkewed``); a presigned one from 15 minutes before its time until its
  ``X-Amz-Expires`` (at most 7 days: 604800 s) ran out (``AccessDenied``: expired);
- signatures are compared in constant time (:func:`hmac.compare_digest`); the candidate canonical
  forms are tried in order until one matches (which form a client signed is no secret).

Per-request cost: the signing key (four HMACs) depends only on the secret and the credential scope,
so :func:`signing_key` keeps the last :data:`SIGNING_KEYS_CACHED` it derived (the same key signs a
client's every request of a day); the request time is parsed without ``strptime``. Neither changes
what is accepted: the signature is recomputed for every request, with the secret the credential
lookup answered for it (a revoked or changed secret fails at once, whatever is cached here).

Chunk and trailer signatures of streamed bodies (:func:`chunk_signature`, :func:`trailer_signature`)
chain from the request's signature; :mod:`lakefs_core.auth.payload` verifies them.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from urllib.parse import unquote_to_bytes

from lakefs_core.auth import keys
from lakefs_core.auth.signed import (
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    ChunkSigning,
    SignedRequest,
    VerifiedRequest,
    uri_encode,
)
from lakefs_core.errors import AuthenticationError, BadRequestError

__all__ = [
    "ALGORITHM",
    "MAX_CLOCK_SKEW",
    "MAX_PRESIGN_EXPIRES",
    "SigV4",
    "chunk_signature",
    "parse",
    "signing_key",
    "trailer_signature",
]

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_CLOCK_SKEW = 15 * 60
MAX_PRESIGN_EXPIRES = 7 * 24 * 3600
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_DATE = re.compile(r"\d{8}T\d{6}Z")
_SCOPE_PART = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_PAYLOADS = frozenset(
    {UNSIGNED_PAYLOAD, STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER}
)
# x-amz-* headers a request may carry unsigned: the payload hash line covers x-amz-content-sha256
_UNSIGNED_OK = frozenset({"x-amz-content-sha256"})


def _malformed(message: str, field: str = "Authorization") -> BadRequestError:
    return BadRequestError(message, s3_code="AuthorizationHeaderMalformed", field=field)


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


SIGNING_KEYS_CACHED = 256


@lru_cache(maxsize=SIGNING_KEYS_CACHED)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """``kSigning``: the HMAC chain of ``"AWS4" + secret``, date, region, service, ``aws4_request``
    (remembered per argument tuple, see the module)."""
    k = _hmac(("AWS4" + secret).encode(), date)
    return _hmac(_hmac(_hmac(k, region), service), "aws4_request")


def chunk_signature(key: bytes, amz_date: str, scope: str, previous: str, chunk_sha256: str) -> str:
    """The signature of one chunk of a ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD*`` body."""
    to_sign = "\n".join(("AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous, EMPTY_SHA256, chunk_sha256))
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def trailer_signature(
    key: bytes, amz_date: str, scope: str, previous: str, trailers: Sequence[tuple[str, str]]
) -> str:
    """The ``x-amz-trailer-signature`` of a signed-trailer body: over the trailing headers, each
    ``name:value\\n`` (names lower-cased, sorted), chained from the final chunk's signature."""
    canonical = "".join(f"{name.lower()}:{value.strip()}\n" for name, value in sorted(trailers))
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogateescape")).hexdigest()
    to_sign = "\n".join(("AWS4-HMAC-SHA256-TRAILER", amz_date, scope, previous, digest))
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _trim(value: str) -> str:
    return " ".join(value.split())


#: Bytes that ``UriEncode`` leaves as they are: such a name or value is its own encoding.
_UNRESERVED_ONLY = re.compile(rb"[A-Za-z0-9_.~-]*").fullmatch


def _encode(raw: bytes) -> str:
    return raw.decode("ascii") if _UNRESERVED_ONLY(raw) else uri_encode(raw)


def _canonical_query(pairs: Iterable[tuple[bytes, bytes, bool]], plus_is_space: bool) -> str:
    encoded = []
    for name, value, _ in pairs:
        if plus_is_space:
            encoded.append((_encode(name.replace(b"+", b" ")), _encode(value.replace(b"+", b" "))))
        else:
            encoded.append((_encode(name), _encode(value)))
    return "&".join(f"{n}={v}" for n, v in sorted(encoded))


def _canonical_uris(raw_path: str) -> Iterator[str]:
    """The raw path as sent, then the ``UriEncode`` of each of its decoded segments if that
    differs (built only when the first form did not match)."""
    yield raw_path
    if raw_path.isascii():
        recoded = "/".join(uri_encode(unquote_to_bytes(seg)) for seg in raw_path.split("/"))
        if recoded != raw_path:
            yield recoded


@dataclass(frozen=True)
class SigV4:
    """A request's SigV4 signature as parsed (not verified yet)."""

    access_key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str = field(repr=False)
    amz_date: str
    presigned: bool
    expires: int = 0

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"

    def _canonical_headers(self, request: SignedRequest) -> str:
        return "".join(
            f"{name}:{','.join(_trim(v) for v in request.header_values(name))}\n"
            for name in self.signed_headers
        )

    def canonical_requests(self, request: SignedRequest, payload: str) -> Iterator[str]:
        """Every canonical request this signature may have been computed over (see the module),
        lazily, the form S3 clients sign first."""
        pairs = request.query_pairs()
        if self.presigned:
            pairs = [p for p in pairs if p[0] != b"X-Amz-Signature"]
        queries = [_canonical_query(pairs, False)]
        if any(b"+" in n or b"+" in v for n, v, _ in pairs):
            queries.append(_canonical_query(pairs, True))
        headers = self._canonical_headers(request)
        signed = ";".join(self.signed_headers)
        for uri in _canonical_uris(request.raw_path):
            for query in queries:
                yield "\n".join((request.method, uri, query, headers, signed, payload))

    def verify(self, request: SignedRequest, secret: str, now: float) -> VerifiedRequest:
        """Check the signature with ``secret`` and the time window at ``now`` (Unix seconds)."""
        payload = _payload_hash(request, self.presigned)
        key = signing_key(secret, self.date, self.region, self.service)
        matched: str | None = None
        given = self.signature.lower().encode()
        for canonical in self.canonical_requests(request, payload):
            digest = hashlib.sha256(canonical.encode("utf-8", "surrogateescape")).hexdigest()
            to_sign = "\n".join((ALGORITHM, self.amz_date, self.scope, digest))
            expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
            if hmac.compare_digest(expected.encode(), given):
                matched = expected
                break
        if matched is None:
            raise AuthenticationError(
                "the request signature does not match (check the secret access key and signing method)",
                s3_code="SignatureDoesNotMatch",
            )
        self._check_time(now)
        streaming = payload in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER)
        return VerifiedRequest(
            access_key_id=self.access_key_id,
            version=4,
            payload=payload,
            presigned=self.presigned,
            chunk_signing=ChunkSigning(key, self.amz_date, self.scope, matched) if streaming else None,
        )

    def _check_time(self, now: float) -> None:
        when = _epoch(self.amz_date)
        if self.presigned:
            if when - now > MAX_CLOCK_SKEW:
                raise AuthenticationError("the presigned request is not valid yet", s3_code="AccessDenied")
            if now > when + self.expires:
                raise AuthenticationError("the presigned request has expired", s3_code="AccessDenied")
        elif abs(now - when) > MAX_CLOCK_SKEW:
            raise AuthenticationError(
                "the difference between the request time and the server's time is too large",
                s3_code="RequestTimeTooSkewed",
            )


def _payload_hash(request: SignedRequest, presigned: bool) -> str:
    values = request.header_values("x-amz-content-sha256")
    if len(values) > 1:
        raise BadRequestError("x-amz-content-sha256 is given twice", field="x-amz-content-sha256")
    if not values:
        return UNSIGNED_PAYLOAD
    value = values[0]
    if value in _PAYLOADS or _HEX64.fullmatch(value):
        return value.lower() if _HEX64.fullmatch(value) else value
    raise BadRequestError(
        "must be a hex SHA-256, UNSIGNED-PAYLOAD or a supported STREAMING-* mode",
        s3_code="InvalidArgument",
        field="x-amz-content-sha256",
    )


def _credential(value: str, where: str) -> tuple[str, str, str, str]:
    parts = value.rsplit("/", 4)
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise _malformed("Credential must be <access key>/<date>/<region>/<service>/aws4_request", where)
    key_id, date, region, service, _ = parts
    if not keys.valid_access_key_id(key_id):
        raise _malformed("the access key id is malformed", where)
    if (
        not (len(date) == 8 and date.isdigit())
        or not _SCOPE_PART.fullmatch(region)
        or not _SCOPE_PART.fullmatch(service)
    ):
        raise _malformed("the credential scope is malformed", where)
    return key_id, date, region, service


def _signed_headers(value: str, where: str) -> tuple[str, ...]:
    names = tuple(value.split(";"))
    if not all(_HEADER_NAME.fullmatch(n) for n in names) or len(names) > 100:
        raise _malformed("SignedHeaders must be lower-case header names separated by ';'", where)
    if "host" not in names:
        raise _malformed("SignedHeaders must include host", where)
    return names


def _check_unsigned(request: SignedRequest, signed: Sequence[str]) -> None:
    for name in request.header_names():
        if name.startswith("x-amz-") and name not in signed and name not in _UNSIGNED_OK:
            raise AuthenticationError(
                f"header {name[:100]} is present but not signed", s3_code="AccessDenied"
            )


def _fields(value: str) -> tuple[int, int, int, int, int, int]:
    """The six fields of ``YYYYMMDDTHHMMSSZ`` (already matched by ``_DATE``), checked as ``datetime``
    checks them (``strptime`` cost ten times more, per request)."""
    fields = (
        int(value[:4]),
        int(value[4:6]),
        int(value[6:8]),
        int(value[9:11]),
        int(value[11:13]),
        int(value[13:15]),
    )
    datetime(*fields)  # ValueError for a day, hour, minute or second out of range
    return fields


def _epoch(value: str) -> float:
    """Unix seconds of an ISO 8601 basic UTC time ``YYYYMMDDTHHMMSSZ``."""
    return float(calendar.timegm(_fields(value)))


def _amz_date(value: str | None, date: str, where: str) -> str:
    if value is None:
        raise BadRequestError("the request has no X-Amz-Date or Date", s3_code="AccessDenied", field=where)
    if not _DATE.fullmatch(value):
        raise BadRequestError("must be an ISO 8601 basic time (YYYYMMDDTHHMMSSZ)", field=where)
    try:
        _fields(value)
    except ValueError:
        raise BadRequestError("is not a valid time", field=where) from None
    if value[:8] != date:
        raise _malformed("the credential scope's date is not the request's date", where)
    return value


def _from_header(request: SignedRequest, value: str) -> SigV4:
    rest = value[len(ALGORITHM) :]
    if not rest[:1].isspace():
        raise _malformed("expected 'AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...'")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, eq, val = part.strip().partition("=")
        if not eq or name in fields or name not in ("Credential", "SignedHeaders", "Signature"):
            raise _malformed("expected Credential, SignedHeaders and Signature, once each")
        fields[name] = val.strip()
    if len(fields) != 3:
        raise _malformed("expected Credential, SignedHeaders and Signature, once each")
    key_id, date, region, service = _credential(fields["Credential"], "Authorization")
    if not _HEX64.fullmatch(fields["Signature"]):
        raise _malformed("Signature must be 64 hex digits")
    signed = _signed_headers(fields["SignedHeaders"], "Authorization")
    _check_unsigned(request, signed)
    dates = request.header_values("x-amz-date") or request.header_values("date")
    if len(dates) > 1:
        raise BadRequestError("the request time is given twice", field="x-amz-date")
    amz_date = _amz_date(dates[0] if dates else None, date, "x-amz-date")
    return SigV4(key_id, date, region, service, signed, fields["Signature"], amz_date, presigned=False)


def _from_query(request: SignedRequest) -> SigV4:
    algorithm = request.query("X-Amz-Algorithm")
    if algorithm != ALGORITHM:
        raise BadRequestError(
            "X-Amz-Algorithm must be AWS4-HMAC-SHA256",
            s3_code="AuthorizationQueryParametersError",
            field="X-Amz-Algorithm",
        )
    values = {}
    for name in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"):
        value = request.query(name)
        if value is None:
            raise BadRequestError("is missing", s3_code="AuthorizationQueryParametersError", field=name)
        values[name] = value
    key_id, date, region, service = _credential(values["X-Amz-Credential"], "X-Amz-Credential")
    expires = values["X-Amz-Expires"]
    if not expires.isdigit() or int(expires) > MAX_PRESIGN_EXPIRES:
        raise BadRequestError(
            f"must be 0 to {MAX_PRESIGN_EXPIRES} seconds",
            s3_code="AuthorizationQueryParametersError",
            field="X-Amz-Expires",
        )
    if not _HEX64.fullmatch(values["X-Amz-Signature"]):
        raise BadRequestError(
            "must be 64 hex digits", s3_code="AuthorizationQueryParametersError", field="X-Amz-Signature"
        )
    signed = _signed_headers(values["X-Amz-SignedHeaders"], "X-Amz-SignedHeaders")
    _check_unsigned(request, signed)
    amz_date = _amz_date(values["X-Amz-Date"], date, "X-Amz-Date")
    return SigV4(
        key_id,
        date,
        region,
        service,
        signed,
        values["X-Amz-Signature"],
        amz_date,
        presigned=True,
        expires=int(expires),
    )


def parse(request: SignedRequest) -> SigV4 | None:
    """The request's SigV4 signature (header or presigned), or ``None`` if it carries none."""
    headers = request.header_values("authorization")
    if len(headers) > 1:
        raise _malformed("the Authorization header is given twice")
    if headers and headers[0].startswith(ALGORITHM):
        return _from_header(request, headers[0])
    if not headers and request.query("X-Amz-Algorithm") is not None:
        return _from_query(request)
    return None

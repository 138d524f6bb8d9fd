"""Verifying a request body against everything the request declared about it, incrementally.

:func:`body_verifier` builds a :class:`BodyVerifier` for a verified request
(:class:`~lakefs_core.auth.signed.VerifiedRequest`): feed it the body as it arrives, it returns the
object's bytes (decoded from ``aws-chunked`` framing where the request streams); :meth:`finish` raises
unless every declaration held. Memory is bounded (a chunk header line of at most 4 KiB, a trailer of
at most 16 KiB); bytes returned before :meth:`finish` succeeded are PROVISIONAL: a caller stores them
aside and keeps nothing of a body whose verification failed.

Verified, whichever apply:

- ``x-amz-content-sha256`` holding a hex SHA-256: the body's SHA-256 (``XAmzContentSHA256Mismatch``);
- ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``: every chunk's signature, chained from the request's
  (``SignatureDoesNotMatch``, an :class:`~lakefs_core.errors.AuthenticationError`);
- ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER``: the same, then the trailer and its
  ``x-amz-trailer-signature``; ``STREAMING-UNSIGNED-PAYLOAD-TRAILER``: unsigned chunks, then the
  trailer. The trailer must hold exactly the checksum ``x-amz-trailer`` announced, which is verified;
- ``x-amz-decoded-content-length``: the decoded length (``IncompleteBody``);
- ``Content-MD5`` (``BadDigest``; a value that is not 16 base64 bytes is ``InvalidDigest``) and one
  ``x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256}`` header (``BadDigest``), over the decoded body.

Checksums are S3's: CRC32 (zlib), CRC32C (google-crc32c), CRC64/NVME (``awscrt``, AWS's common
runtime, the implementation botocore itself uses for it, hardware accelerated; a pure-Python CRC-64
would run at a few MB/s, far too slow for the gateway's uploads), SHA-1, SHA-256; each as the
base64 of its big-endian bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import zlib
from collections.abc import Callable
from enum import Enum
from typing import Protocol

import google_crc32c
from awscrt import checksums as crt_checksums

from lakefs_core.auth import sigv4
from lakefs_core.auth.signed import (
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    ChunkSigning,
    SignedRequest,
    VerifiedRequest,
)
from lakefs_core.errors import AuthenticationError, BadRequestError

__all__ = ["CHECKSUM_ALGORITHMS", "BodyVerifier", "Checksum", "body_verifier"]

MAX_LINE = 4096
MAX_TRAILER = 16 * 1024
MAX_TRAILER_LINES = 16
CHECKSUM_PREFIX = "x-amz-checksum-"
# x-amz-checksum-* headers that do not carry a checksum of the body
_NOT_CHECKSUMS = frozenset({"x-amz-checksum-type", "x-amz-checksum-algorithm", "x-amz-checksum-mode"})


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...

    def digest(self) -> bytes: ...


class _Crc:
    def __init__(self, width: int, extend: Callable[[int, bytes | memoryview], int]) -> None:
        self.width, self.extend, self.value = width, extend, 0

    def update(self, data: bytes | memoryview, /) -> None:
        self.value = self.extend(self.value, data)

    def digest(self) -> bytes:
        return self.value.to_bytes(self.width, "big")


def _crc32c(crc: int, data: bytes | memoryview) -> int:
    # google-crc32c takes bytes only (a memoryview is refused): the one algorithm that copies
    return int(google_crc32c.extend(crc, data if isinstance(data, bytes) else bytes(data)))


CHECKSUM_ALGORITHMS: dict[str, Callable[[], _Hasher]] = {
    "crc32": lambda: _Crc(4, lambda crc, data: zlib.crc32(data, crc)),
    "crc32c": lambda: _Crc(4, _crc32c),
    "crc64nvme": lambda: _Crc(8, lambda crc, data: int(crt_checksums.crc64nvme(data, crc))),
    "sha1": lambda: hashlib.sha1(usedforsecurity=False),
    "sha256": hashlib.sha256,
}
_ALGORITHMS: dict[str, Callable[[], _Hasher]] = {
    **CHECKSUM_ALGORITHMS,
    "md5": lambda: hashlib.md5(usedforsecurity=False),  # Content-MD5 (not an x-amz-checksum-*)
}


class Checksum:
    """A checksum of a body (:data:`CHECKSUM_ALGORITHMS`, or ``md5`` for Content-MD5) and the value
    (base64, as in its header) it must equal; ``field`` names the header, ``invalid_code`` is the S3
    error for a value that is not a checksum of that kind."""

    def __init__(
        self,
        algorithm: str,
        expected_b64: str | None = None,
        *,
        field: str,
        invalid_code: str = "InvalidRequest",
    ) -> None:
        if algorithm not in _ALGORITHMS:
            raise BadRequestError(
                f"unsupported checksum algorithm {algorithm[:40]}", s3_code="InvalidRequest", field=field
            )
        self.algorithm = algorithm
        self.field = field
        self._invalid_code = invalid_code
        self._hash = _ALGORITHMS[algorithm]()
        self.expected = None if expected_b64 is None else self._decode(expected_b64)

    def _decode(self, value: str) -> bytes:
        try:
            raw = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != len(self._hash.digest()):
            raise BadRequestError(
                f"is not a base64 {self.algorithm.upper()}", s3_code=self._invalid_code, field=self.field
            )
        return raw

    def update(self, data: bytes | memoryview) -> None:
        self._hash.update(data)

    def b64(self) -> str:
        return base64.b64encode(self._hash.digest()).decode()

    def check(self, expected_b64: str | None = None) -> None:
        expected = self.expected if expected_b64 is None else self._decode(expected_b64)
        if expected is None or not hmac.compare_digest(expected, self._hash.digest()):
            raise BadRequestError(
                f"the {self.algorithm.upper()} of the body does not match {self.field}",
                s3_code="BadDigest",
                field=self.field,
            )


class _State(Enum):
    HEADER = 1
    DATA = 2
    DATA_END = 3
    FINAL_END = 4
    TRAILER = 5
    DONE = 6


def _bad_chunk(message: str) -> BadRequestError:
    return BadRequestError(message, s3_code="IncompleteBody", field="aws-chunked body")


class _AwsChunked:
    """The ``aws-chunked`` framing: ``<hex size>[;chunk-signature=<sig>]\\r\\n<data>\\r\\n``..., a zero-size
    chunk, then either ``\\r\\n`` or the trailer lines and an empty line."""

    def __init__(self, signing: ChunkSigning | None, trailer: str | None) -> None:
        self.signing = signing
        self.previous = signing.seed_signature if signing else ""
        self.trailer_name = trailer
        self.state = _State.HEADER
        self.remaining = 0
        self.signature = ""
        self.chunk_hash = hashlib.sha256()
        self.line = bytearray()
        self.trailer_bytes = 0
        self.trailers: list[tuple[str, str]] = []

    def feed(self, data: bytes, sink: Callable[[memoryview], None]) -> None:
        view, pos, end = memoryview(data), 0, len(data)
        while pos < end:
            if self.state is _State.DATA:
                take = min(self.remaining, end - pos)
                piece = view[pos : pos + take]
                pos += take
                self.remaining -= take
                if self.signing is not None:
                    self.chunk_hash.update(piece)
                sink(piece)
                if self.remaining == 0:
                    self.state = _State.DATA_END
                continue
            if self.state is _State.DONE:  # some clients end with an extra CRLF, nothing else may follow
                if len(self.line) + end - pos > 4 or bytes(view[pos:]).strip(b"\r\n"):
                    raise _bad_chunk("data after the end of the body")
                self.line += view[pos:]
                return
            newline = data.find(b"\n", pos)
            stop = end if newline < 0 else newline + 1
            self.line += view[pos:stop]
            pos = stop
            if len(self.line) > MAX_LINE:
                raise _bad_chunk("a chunk header or trailer line is too long")
            if newline >= 0:
                line = bytes(self.line)
                self.line.clear()
                self._line(line)

    def _line(self, line: bytes) -> None:
        if self.state is _State.HEADER:
            self._header(line)
        elif self.state in (_State.DATA_END, _State.FINAL_END):
            if line != b"\r\n":
                raise _bad_chunk("a chunk does not end with CRLF")
            if self.state is _State.FINAL_END:
                self.state = _State.DONE
            else:
                self._verify_chunk()
                self.state = _State.HEADER
        elif self.state is _State.TRAILER:
            self._trailer_line(line)

    def _header(self, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise _bad_chunk("a chunk header does not end with CRLF")
        size, sep, ext = line[:-2].partition(b";")
        if not size or len(size) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size):
            raise _bad_chunk("a chunk size is not hexadecimal")
        if self.signing is not None:
            if not sep or not ext.startswith(b"chunk-signature=") or len(ext) != 16 + 64:
                raise _bad_chunk("a chunk has no chunk-signature")
            self.signature = ext[16:].decode("ascii", "replace")
        elif sep:
            raise _bad_chunk("an unsigned chunk carries an extension")
        self.remaining = int(size, 16)
        if self.remaining:
            self.state = _State.DATA
            return
        if self.signing is not None:
            self._verify_chunk()
        self.state = _State.TRAILER if self.trailer_name else _State.FINAL_END

    def _verify_chunk(self) -> None:
        if self.signing is None:
            return
        s = self.signing
        expected = sigv4.chunk_signature(
            s.signing_key, s.amz_date, s.scope, self.previous, self.chunk_hash.hexdigest()
        )
        if not hmac.compare_digest(expected.encode(), self.signature.lower().encode()):
            raise AuthenticationError("a chunk signature does not match", s3_code="SignatureDoesNotMatch")
        self.previous = expected
        self.chunk_hash = hashlib.sha256()

    def _trailer_line(self, line: bytes) -> None:
        self.trailer_bytes += len(line)
        text = line.rstrip(b"\r\n").decode("ascii", "replace")
        if not text:
            self._verify_trailer()
            self.state = _State.DONE
            return
        name, sep, value = text.partition(":")
        if not sep or self.trailer_bytes > MAX_TRAILER or len(self.trailers) >= MAX_TRAILER_LINES:
            raise _bad_chunk("the trailer is malformed")
        self.trailers.append((name.strip().lower(), value.strip()))

    def _verify_trailer(self) -> None:
        names = [name for name, _ in self.trailers]
        if self.signing is not None:
            if names.count("x-amz-trailer-signature") != 1 or names[-1] != "x-amz-trailer-signature":
                raise AuthenticationError("the trailer is not signed", s3_code="SignatureDoesNotMatch")
            given = self.trailers.pop()[1]
            s = self.signing
            expected = sigv4.trailer_signature(
                s.signing_key, s.amz_date, s.scope, self.previous, self.trailers
            )
            if not hmac.compare_digest(expected.encode(), given.lower().encode()):
                raise AuthenticationError(
                    "the trailer signature does not match", s3_code="SignatureDoesNotMatch"
                )
        if [name for name, _ in self.trailers] != [self.trailer_name]:
            raise BadRequestError(
                "the trailer must hold exactly the checksum x-amz-trailer announced",
                s3_code="MalformedTrailerError",
                field="x-amz-trailer",
            )


class BodyVerifier:
    """Feed the body with :meth:`feed` (returns the object's bytes), then :meth:`finish` (see module)."""

    def __init__(
        self,
        *,
        framing: _AwsChunked | None,
        sha256_hex: str | None,
        decoded_length: int | None,
        checks: list[Checksum],
        trailer: Checksum | None,
    ) -> None:
        self._framing = framing
        self._sha256 = hashlib.sha256() if sha256_hex is not None else None
        self._sha256_hex = sha256_hex
        self._decoded_length = decoded_length
        self._hashes = [*checks, *([trailer] if trailer else [])]
        self._checks = checks
        self._trailer = trailer
        self.length = 0

    def _consume(self, piece: memoryview | bytes) -> None:
        self.length += len(piece)
        if self._sha256 is not None:
            self._sha256.update(piece)
        for h in self._hashes:
            h.update(piece)

    def feed(self, data: bytes) -> bytes:
        """The object's bytes in ``data`` (provisional until :meth:`finish`)."""
        if self._framing is None:
            self._consume(data)
            return data
        out: list[memoryview] = []

        def sink(piece: memoryview) -> None:
            self._consume(piece)
            out.append(piece)

        self._framing.feed(data, sink)
        return out[0].tobytes() if len(out) == 1 else b"".join(out)

    def finish(self) -> dict[str, str]:
        """Raise unless the body held everything declared; the verified checksums, by header name."""
        if self._framing is not None and self._framing.state is not _State.DONE:
            raise _bad_chunk("the body ended before its last chunk")
        if self._decoded_length is not None and self.length != self._decoded_length:
            raise BadRequestError(
                f"the body holds {self.length} bytes, its declared length is {self._decoded_length}",
                s3_code="IncompleteBody",
                field="x-amz-decoded-content-length",
            )
        if self._sha256 is not None and self._sha256.hexdigest() != self._sha256_hex:
            raise BadRequestError(
                "the SHA-256 of the body does not match x-amz-content-sha256",
                s3_code="XAmzContentSHA256Mismatch",
                field="x-amz-content-sha256",
            )
        verified = {}
        for check in self._checks:
            check.check()
            verified[check.field] = check.b64()
        if self._trailer is not None and self._framing is not None:
            self._trailer.check(dict(self._framing.trailers)[self._trailer.field])
            verified[self._trailer.field] = self._trailer.b64()
        return verified


def _header_checks(request: SignedRequest) -> list[Checksum]:
    checks = []
    for name in request.header_names():
        if not name.startswith(CHECKSUM_PREFIX) or name in _NOT_CHECKSUMS:
            continue
        values = request.header_values(name)
        if name[len(CHECKSUM_PREFIX) :] not in CHECKSUM_ALGORITHMS:
            raise BadRequestError("is not a supported checksum", s3_code="InvalidRequest", field=name[:100])
        if len(values) != 1:
            raise BadRequestError("is given twice", s3_code="InvalidRequest", field=name)
        checks.append(Checksum(name[len(CHECKSUM_PREFIX) :], values[0], field=name))
    if len(checks) > 1:
        raise BadRequestError("expected at most one x-amz-checksum-* header", s3_code="InvalidRequest")
    md5 = request.header_values("content-md5")
    if len(md5) > 1:
        raise BadRequestError("is given twice", s3_code="InvalidDigest", field="Content-MD5")
    if md5:
        checks.append(Checksum("md5", md5[0], field="Content-MD5", invalid_code="InvalidDigest"))
    return checks


def _decoded_length(request: SignedRequest) -> int | None:
    value = request.header("x-amz-decoded-content-length")
    if value is None:
        return None
    if not value.isdigit() or len(value) > 19:
        raise BadRequestError(
            "must be a byte count", s3_code="InvalidArgument", field="x-amz-decoded-content-length"
        )
    return int(value)


def _trailer(request: SignedRequest) -> Checksum:
    names = [n.strip().lower() for v in request.header_values("x-amz-trailer") for n in v.split(",")]
    if len(names) != 1 or names[0][len(CHECKSUM_PREFIX) :] not in CHECKSUM_ALGORITHMS:
        raise BadRequestError(
            "a trailer upload must announce one x-amz-checksum-* trailer",
            s3_code="InvalidRequest",
            field="x-amz-trailer",
        )
    return Checksum(names[0][len(CHECKSUM_PREFIX) :], field=names[0])


def body_verifier(verified: VerifiedRequest, request: SignedRequest) -> BodyVerifier:
    """The verifier of ``request``'s body (see the module)."""
    payload = verified.payload
    checks = _header_checks(request)
    if payload == UNSIGNED_PAYLOAD or (len(payload) == 64 and not payload.startswith("STREAMING-")):
        sha = None if payload == UNSIGNED_PAYLOAD else payload.lower()
        return BodyVerifier(framing=None, sha256_hex=sha, decoded_length=None, checks=checks, trailer=None)
    if payload not in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER):
        raise BadRequestError(
            "unsupported payload mode", s3_code="InvalidArgument", field="x-amz-content-sha256"
        )
    signed = payload != STREAMING_UNSIGNED_TRAILER
    if signed and verified.chunk_signing is None:
        raise BadRequestError(
            "a signed streaming body needs a header signature", field="x-amz-content-sha256"
        )
    trailer = _trailer(request) if payload != STREAMING_SIGNED else None
    framing = _AwsChunked(verified.chunk_signing if signed else None, trailer.field if trailer else None)
    return BodyVerifier(
        framing=framing,
        sha256_hex=None,
        decoded_length=_decoded_length(request),
        checks=checks,
        trailer=trailer,
    )

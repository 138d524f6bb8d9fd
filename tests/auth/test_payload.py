"""Request bodies verified against what their requests declared (lakefs_core.auth.payload).

- AWS's published signed streaming upload (66,560 bytes of ``a`` in chunks of 65,536, 1,024 and 0,
  its seed and chunk signatures) decodes under every split of the body into feeds, and a changed
  byte, chunk signature or length is refused;
- the signed-trailer form: the trailer signature of AWS's common runtime's published vector, and
  whole bodies with chunk signatures, a CRC32C trailer and its signature;
- the unsigned-trailer form as botocore writes it (``AwsChunkedWrapper``) for every checksum it has,
  CRC64NVME included, and whole requests as boto3 1.40 sends them (default checksums, and
  ``when_required`` with a hex ``x-amz-content-sha256`` or ``Content-MD5``);
- checksum headers, known answers of each checksum, and hostile bodies: typed errors only, bounded.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.httpchecksum import (  # type: ignore[import-untyped]
    AwsChunkedWrapper,
    Crc32Checksum,
    CrtCrc32cChecksum,
    CrtCrc64NvmeChecksum,
    Sha1Checksum,
    Sha256Checksum,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.auth import sigv4
from lakefs_core.auth.payload import BodyVerifier, Checksum, body_verifier
from lakefs_core.auth.signature import parse_signature
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
from tests.auth.sigreq import SECRET, capture
from tests.support.profiles import examples

S3_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AMZ_DATE, SCOPE = "20130524T000000Z", "20130524/us-east-1/s3/aws4_request"
SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
CHUNK_SIGNATURES = [
    (65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"),
    (1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"),
    (0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"),
]
EXAMPLE_HEADERS = (
    ("Host", "s3.amazonaws.com"),
    ("x-amz-date", AMZ_DATE),
    ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
    ("x-amz-content-sha256", STREAMING_SIGNED),
    ("Content-Encoding", "aws-chunked"),
    ("x-amz-decoded-content-length", "66560"),
    ("Content-Length", "66824"),
    (
        "Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        f"x-amz-decoded-content-length;x-amz-storage-class,Signature={SEED}",
    ),
)
EXAMPLE_REQUEST = SignedRequest("PUT", "/examplebucket/chunkObject.txt", "", EXAMPLE_HEADERS)


def example_body() -> bytes:
    return b"".join(
        b"%x;chunk-signature=%s\r\n%s\r\n" % (size, sig.encode(), b"a" * size)
        for size, sig in CHUNK_SIGNATURES
    )


def feed_all(verifier: BodyVerifier, body: bytes, step: int) -> bytes:
    out = b"".join(verifier.feed(body[i : i + step]) for i in range(0, len(body), step))
    verifier.finish()
    return out


def example_verifier() -> BodyVerifier:
    parsed = parse_signature(EXAMPLE_REQUEST)
    assert parsed is not None
    verified = parsed.verify(EXAMPLE_REQUEST, S3_SECRET, datetime(2013, 5, 24, tzinfo=UTC).timestamp())
    assert verified.chunk_signing is not None and verified.chunk_signing.seed_signature == SEED
    return body_verifier(verified, EXAMPLE_REQUEST)


@pytest.mark.parametrize("step", [1, 7, 4096, 65536 + 90, 1 << 20])
def test_aws_published_streaming_upload_decodes(step: int) -> None:
    body = example_body()
    assert len(body) == 66824
    assert feed_all(example_verifier(), body, step) == b"a" * 66560


@pytest.mark.parametrize(
    ("change", "error", "code"),
    [
        (lambda b: b[:65800] + b"b" + b[65801:], AuthenticationError, "SignatureDoesNotMatch"),
        (lambda b: b[:100] + b"b" + b[101:], AuthenticationError, "SignatureDoesNotMatch"),
        (lambda b: b.replace(b"0055627c", b"1055627c"), AuthenticationError, "SignatureDoesNotMatch"),
        (lambda b: b.replace(b"b6c6ea8a", b"b6c6ea8b"), AuthenticationError, "SignatureDoesNotMatch"),
        (lambda b: b[:-2], BadRequestError, "IncompleteBody"),
        (lambda b: b + b"x", BadRequestError, "IncompleteBody"),
        (lambda b: b.replace(b"400;", b"40g;"), BadRequestError, "IncompleteBody"),
        (
            lambda b: b.replace(b";chunk-signature=0055", b";chunk-signaturX0055"),
            BadRequestError,
            "IncompleteBody",
        ),
    ],
)
def test_aws_published_streaming_upload_refuses_changes(
    change: Callable[[bytes], bytes], error: type[Exception], code: str
) -> None:
    with pytest.raises(error) as refused:
        feed_all(example_verifier(), change(example_body()), 8192)
    assert refused.value.s3_code == code  # type: ignore[attr-defined]


def test_signed_trailer_matches_aws_crt_vector() -> None:
    """aws-c-auth's published trailer signature (trailing headers first/second/third, chained from the
    example's final chunk)."""
    key = sigv4.signing_key(S3_SECRET, "20130524", "us-east-1", "s3")
    trailers = [("first", "1st"), ("second", "2nd"), ("third", "3rd")]
    assert (
        sigv4.trailer_signature(key, AMZ_DATE, SCOPE, CHUNK_SIGNATURES[2][1], trailers)
        == "df5735bd9f3295cd9386572292562fefc93ba94e80a0a1ddcbd652c4e0a75e6c"
    )


def signed_trailer_body(
    data: bytes, chunk: int, crc: str, *, tamper: str = ""
) -> tuple[bytes, VerifiedRequest]:
    key = sigv4.signing_key(S3_SECRET, "20130524", "us-east-1", "s3")
    previous, out = SEED, []
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] + [b""]
    for piece in pieces:
        previous = sigv4.chunk_signature(key, AMZ_DATE, SCOPE, previous, hashlib.sha256(piece).hexdigest())
        out.append(b"%x;chunk-signature=%s\r\n" % (len(piece), previous.encode()))
        if piece:
            out.append(piece + b"\r\n")
    trailer_sig = sigv4.trailer_signature(key, AMZ_DATE, SCOPE, previous, [("x-amz-checksum-crc32c", crc)])
    if tamper == "signature":
        trailer_sig = trailer_sig[::-1]
    value = crc if tamper != "value" else base64.b64encode(b"\0\0\0\0").decode()
    out.append(f"x-amz-checksum-crc32c:{value}\r\nx-amz-trailer-signature:{trailer_sig}\r\n\r\n".encode())
    verified = VerifiedRequest(
        "AKIAIOSFODNN7EXAMPLE", 4, STREAMING_SIGNED_TRAILER, False, ChunkSigning(key, AMZ_DATE, SCOPE, SEED)
    )
    return b"".join(out), verified


def _crc32c_b64(data: bytes) -> str:
    c = Checksum("crc32c", field="x")
    c.update(data)
    return c.b64()


TRAILER_REQUEST = SignedRequest(
    "PUT",
    "/r/main/k",
    "",
    (("x-amz-trailer", "x-amz-checksum-crc32c"), ("x-amz-decoded-content-length", "20000")),
)


@pytest.mark.parametrize("step", [3, 1000, 100000])
def test_signed_trailer_bodies(step: int) -> None:
    data = bytes(range(256)) * 78 + b"tail" * 8  # 20000 bytes
    body, verified = signed_trailer_body(data, 8192, _crc32c_b64(data))
    verifier = body_verifier(verified, TRAILER_REQUEST)
    assert feed_all(verifier, body, step) == data
    assert verifier.finish() == {"x-amz-checksum-crc32c": _crc32c_b64(data)}
    body, verified = signed_trailer_body(data, 8192, _crc32c_b64(data), tamper="value")
    with pytest.raises(AuthenticationError, match="trailer signature"):
        feed_all(body_verifier(verified, TRAILER_REQUEST), body, step)
    body, verified = signed_trailer_body(data, 8192, _crc32c_b64(data), tamper="signature")
    with pytest.raises(AuthenticationError, match="trailer signature"):
        feed_all(body_verifier(verified, TRAILER_REQUEST), body, step)
    wrong = _crc32c_b64(data + b"x")
    body, verified = signed_trailer_body(data, 8192, wrong)  # signed, but not the body's checksum
    with pytest.raises(BadRequestError) as digest:
        feed_all(body_verifier(verified, TRAILER_REQUEST), body, step)
    assert digest.value.s3_code == "BadDigest"


BOTOCORE_CHECKSUMS: list[tuple[str, type[Any]]] = [
    ("crc32", Crc32Checksum),
    ("crc32c", CrtCrc32cChecksum),
    ("crc64nvme", CrtCrc64NvmeChecksum),
    ("sha1", Sha1Checksum),
    ("sha256", Sha256Checksum),
]


@settings(max_examples=examples(0.6), deadline=None)
@given(
    data=st.binary(max_size=5000),
    which=st.sampled_from(BOTOCORE_CHECKSUMS),
    chunk=st.integers(1, 3000),
    step=st.integers(1, 6000),
)
def test_botocore_unsigned_trailer_bodies(
    data: bytes, which: tuple[str, type[Any]], chunk: int, step: int
) -> None:
    name, cls = which
    header = f"x-amz-checksum-{name}"
    body = AwsChunkedWrapper(
        io.BytesIO(data), checksum_cls=cls, checksum_name=header, chunk_size=chunk
    ).read()
    request = SignedRequest("PUT", "/r/main/k", "", (("x-amz-trailer", header),))
    verified = VerifiedRequest("AKIAJABCDEFGHIJKLMNQ", 4, STREAMING_UNSIGNED_TRAILER)
    verifier = body_verifier(verified, request)
    assert b"".join(verifier.feed(body[i : i + step]) for i in range(0, len(body), step)) == data
    expected = cls()
    expected.update(data)
    assert verifier.finish() == {header: expected.b64digest()}
    flipped = body.replace(f"{header}:".encode(), f"{header}:A".encode())  # not the value botocore wrote
    with pytest.raises(BadRequestError):
        feed_all(body_verifier(verified, request), flipped, step)


@pytest.mark.parametrize(
    ("config", "kwargs"),
    [
        ({}, {}),
        ({}, {"ChecksumAlgorithm": "CRC64NVME"}),
        ({}, {"ChecksumAlgorithm": "SHA256"}),
        ({"request_checksum_calculation": "when_required"}, {}),
        ({"request_checksum_calculation": "when_required"}, {"ContentMD5": "XUFAKrxLKna5cZ2REBfFkg=="}),
    ],
)
def test_boto3_requests_verify_end_to_end(config: dict[str, str], kwargs: dict[str, str]) -> None:
    data = b"hello" if "ContentMD5" in kwargs else bytes(range(256)) * 300
    request, body = capture(
        lambda c: c.put_object(Bucket="repo", Key="main/d/k", Body=data, **kwargs), config=config
    )
    parsed = parse_signature(request)
    assert parsed is not None
    verified = parsed.verify(request, SECRET, time.time())
    assert feed_all(body_verifier(verified, request), body, 1000) == data
    if body != data:  # framed: a changed byte of the data is refused
        bad = body.replace(bytes(range(10, 20)), bytes(range(11, 21)), 1)
        with pytest.raises(BadRequestError):
            feed_all(body_verifier(verified, request), bad, 1000)


def identity(headers: tuple[tuple[str, str], ...], payload: str = UNSIGNED_PAYLOAD) -> BodyVerifier:
    return body_verifier(VerifiedRequest("AKIAJX", 4, payload), SignedRequest("PUT", "/r/b/k", "", headers))


def test_header_checksums_content_md5_and_content_sha256() -> None:
    data = b"The quick brown fox"
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    assert feed_all(identity((("Content-MD5", md5), ("x-amz-checksum-crc32", crc))), data, 5) == data
    with pytest.raises(BadRequestError) as bad:
        feed_all(identity((("Content-MD5", md5),)), data + b"!", 5)
    assert bad.value.s3_code == "BadDigest"
    with pytest.raises(BadRequestError) as bad:
        feed_all(identity((("x-amz-checksum-crc32", crc),)), data[:-1], 5)
    assert bad.value.s3_code == "BadDigest"
    with pytest.raises(BadRequestError) as bad:
        identity((("Content-MD5", "not base64"),))
    assert bad.value.s3_code == "InvalidDigest"
    for headers in [
        (("x-amz-checksum-crc32", "AAAA"),),  # 3 bytes
        (("x-amz-checksum-md5", md5),),
        (("x-amz-checksum-crc32", crc), ("x-amz-checksum-sha1", crc)),
    ]:
        with pytest.raises(BadRequestError):
            identity(headers)
    assert feed_all(identity((("x-amz-checksum-type", "FULL_OBJECT"),)), data, 3) == data
    sha = hashlib.sha256(data).hexdigest()
    assert feed_all(identity((), sha), data, 4) == data
    with pytest.raises(BadRequestError) as bad:
        feed_all(identity((), sha), data + b".", 4)
    assert bad.value.s3_code == "XAmzContentSHA256Mismatch"


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("crc32", 0xCBF43926),
        ("crc32c", 0xE3069283),
        ("crc64nvme", 0xAE8B14860A799888),  # RevEng's CRC-64/NVME check value
        ("sha1", int(hashlib.sha1(b"123456789").hexdigest(), 16)),
        ("sha256", int(hashlib.sha256(b"123456789").hexdigest(), 16)),
    ],
)
def test_checksum_known_answers(algorithm: str, expected: int) -> None:
    one, split = Checksum(algorithm, field="x"), Checksum(algorithm, field="x")
    one.update(b"123456789")
    split.update(b"1234")
    split.update(memoryview(b"56789"))
    digest = base64.b64decode(one.b64())
    assert int.from_bytes(digest, "big") == expected and split.b64() == one.b64()


def test_lines_and_trailers_are_bounded() -> None:
    verified = VerifiedRequest("AKIAJX", 4, STREAMING_UNSIGNED_TRAILER)
    request = SignedRequest("PUT", "/r/b/k", "", (("x-amz-trailer", "x-amz-checksum-crc32"),))
    with pytest.raises(BadRequestError, match="too long"):
        body_verifier(verified, request).feed(b"1" * 5000)
    verifier = body_verifier(verified, request)
    verifier.feed(b"0\r\n")
    with pytest.raises(BadRequestError):
        for _ in range(100):
            verifier.feed(b"x-amz-meta-a:" + b"b" * 1000 + b"\r\n")
    with pytest.raises(BadRequestError, match="announced"):
        feed_all(body_verifier(verified, request), b"0\r\nx-amz-checksum-sha1:AAAA\r\n\r\n", 100)
    with pytest.raises(BadRequestError, match="ended"):
        feed_all(body_verifier(verified, request), b"3\r\nabc\r\n", 100)


@settings(max_examples=examples(3), deadline=None)
@given(body=st.binary(max_size=400), mode=st.sampled_from([STREAMING_SIGNED, STREAMING_UNSIGNED_TRAILER]))
def test_hostile_bodies_raise_typed_errors_only(body: bytes, mode: str) -> None:
    key = sigv4.signing_key(SECRET, "20130524", "us-east-1", "s3")
    signing = ChunkSigning(key, AMZ_DATE, SCOPE, SEED) if mode == STREAMING_SIGNED else None
    request = SignedRequest("PUT", "/r/b/k", "", (("x-amz-trailer", "x-amz-checksum-crc32"),))
    with contextlib.suppress(BadRequestError, AuthenticationError):
        feed_all(body_verifier(VerifiedRequest("AKIAJX", 4, mode, False, signing), request), body, 7)

"""SigV4 verification (lakefs_core.auth.sigv4) against AWS's published examples and botocore's signer.

AWS's examples: the Signature Version 4 test suite's requests (service ``service``) and the S3 API
reference's header-signed and presigned examples, each verified with the documented credentials at the
documented time. botocore: requests signed by ``S3SigV4Auth`` / ``S3SigV4QueryAuth`` over generated
keys (``//``, ``%``, ``+``, unicode), methods, headers, queries and bodies verify; any change of
method, path, query, signed header or secret does not; nothing malformed raises anything but the two
typed errors.
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from urllib.parse import quote

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.auth import sigv4
from lakefs_core.auth.signature import is_aws_signed, parse_signature
from lakefs_core.auth.signed import SignedRequest
from lakefs_core.errors import AuthenticationError, BadRequestError
from tests.auth.sigreq import ACCESS_KEY, SECRET, capture, from_url
from tests.support.profiles import examples

EMPTY = hashlib.sha256(b"").hexdigest()
SUITE_KEY, SUITE_SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
S3_KEY, S3_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SUITE_TIME = datetime(2015, 8, 30, 12, 36, tzinfo=UTC).timestamp()
S3_TIME = datetime(2013, 5, 24, tzinfo=UTC).timestamp()


def _auth(key: str, scope: str, signed: str, signature: str) -> str:
    credential = f"Credential={key}/{scope}/aws4_request"
    return f"AWS4-HMAC-SHA256 {credential}, SignedHeaders={signed}, Signature={signature}"


# (method, url, headers, secret, now): AWS's published signatures
SUITE_SCOPE = "20150830/us-east-1/service"
S3_SCOPE = "20130524/us-east-1/s3"
VECTORS = [
    pytest.param(
        "GET",
        "https://example.amazonaws.com/",
        {"X-Amz-Date": "20150830T123600Z", "x-amz-content-sha256": EMPTY},
        _auth(
            SUITE_KEY,
            SUITE_SCOPE,
            "host;x-amz-date",
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        ),
        SUITE_SECRET,
        SUITE_TIME,
        id="suite get-vanilla",
    ),
    pytest.param(
        "GET",
        "https://example.amazonaws.com/?Param2=value2&Param1=value1",
        {"X-Amz-Date": "20150830T123600Z", "x-amz-content-sha256": EMPTY},
        _auth(
            SUITE_KEY,
            SUITE_SCOPE,
            "host;x-amz-date",
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        ),
        SUITE_SECRET,
        SUITE_TIME,
        id="suite get-vanilla-query-order-key-case",
    ),
    pytest.param(
        "POST",
        "https://example.amazonaws.com/",
        {"X-Amz-Date": "20150830T123600Z", "x-amz-content-sha256": EMPTY},
        _auth(
            SUITE_KEY,
            SUITE_SCOPE,
            "host;x-amz-date",
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        ),
        SUITE_SECRET,
        SUITE_TIME,
        id="suite post-vanilla",
    ),
    pytest.param(
        "GET",
        "https://examplebucket.s3.amazonaws.com/test.txt",
        {"Range": "bytes=0-9", "x-amz-content-sha256": EMPTY, "x-amz-date": "20130524T000000Z"},
        _auth(
            S3_KEY,
            S3_SCOPE,
            "host;range;x-amz-content-sha256;x-amz-date",
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        ),
        S3_SECRET,
        S3_TIME,
        id="s3 GET object",
    ),
    pytest.param(
        "PUT",
        "https://examplebucket.s3.amazonaws.com/test%24file.text",
        {
            "Date": "Fri, 24 May 2013 00:00:00 GMT",
            "x-amz-date": "20130524T000000Z",
            "x-amz-storage-class": "REDUCED_REDUNDANCY",
            "x-amz-content-sha256": "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
        },
        _auth(
            S3_KEY,
            S3_SCOPE,
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
        ),
        S3_SECRET,
        S3_TIME,
        id="s3 PUT object",
    ),
    pytest.param(
        "GET",
        "https://examplebucket.s3.amazonaws.com/?lifecycle",
        {"x-amz-content-sha256": EMPTY, "x-amz-date": "20130524T000000Z"},
        _auth(
            S3_KEY,
            S3_SCOPE,
            "host;x-amz-content-sha256;x-amz-date",
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
        ),
        S3_SECRET,
        S3_TIME,
        id="s3 GET bucket lifecycle",
    ),
    pytest.param(
        "GET",
        "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
        {"x-amz-content-sha256": EMPTY, "x-amz-date": "20130524T000000Z"},
        _auth(
            S3_KEY,
            S3_SCOPE,
            "host;x-amz-content-sha256;x-amz-date",
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        ),
        S3_SECRET,
        S3_TIME,
        id="s3 list objects",
    ),
]
PRESIGNED_EXAMPLE = (
    "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
)


def verify(request: SignedRequest, secret: str, now: float) -> sigv4.SigV4:
    parsed = sigv4.parse(request)
    assert parsed is not None
    parsed.verify(request, secret, now)
    return parsed


@pytest.mark.parametrize(("method", "url", "headers", "authorization", "secret", "now"), VECTORS)
def test_aws_published_header_signatures(
    *, method: str, url: str, headers: dict[str, str], authorization: str, secret: str, now: float
) -> None:
    request = from_url(method, url, {**headers, "Authorization": authorization})
    assert verify(request, secret, now).access_key_id in (SUITE_KEY, S3_KEY)
    with pytest.raises(AuthenticationError) as wrong:
        verify(request, secret.replace("K", "k", 1), now)
    assert wrong.value.s3_code == "SignatureDoesNotMatch"
    with pytest.raises(AuthenticationError) as late:
        verify(request, secret, now + 16 * 60)
    assert late.value.s3_code == "RequestTimeTooSkewed"
    verify(request, secret, now - 14 * 60)  # within the skew, either way


def test_aws_published_presigned_url() -> None:
    request = from_url("GET", PRESIGNED_EXAMPLE, {})
    assert is_aws_signed(request)
    parsed = verify(request, S3_SECRET, S3_TIME + 86400 - 1)
    assert parsed.presigned and parsed.expires == 86400
    with pytest.raises(AuthenticationError, match="expired") as expired:
        verify(request, S3_SECRET, S3_TIME + 86401)
    assert expired.value.s3_code == "AccessDenied"
    with pytest.raises(AuthenticationError, match="not valid yet"):
        verify(request, S3_SECRET, S3_TIME - 16 * 60)
    verify(request, S3_SECRET, S3_TIME - 14 * 60)
    tampered = from_url("GET", PRESIGNED_EXAMPLE.replace("test.txt", "test.tx"), {})
    with pytest.raises(AuthenticationError, match="does not match"):
        verify(tampered, S3_SECRET, S3_TIME)


def test_presigned_expiry_at_most_seven_days() -> None:
    too_long = PRESIGNED_EXAMPLE.replace("X-Amz-Expires=86400", "X-Amz-Expires=604801")
    with pytest.raises(BadRequestError, match="604800"):
        sigv4.parse(from_url("GET", too_long, {}))
    for bad in ("-1", "1e3", ""):
        with pytest.raises(BadRequestError):
            sigv4.parse(from_url("GET", PRESIGNED_EXAMPLE.replace("86400", bad), {}))


def _credentials() -> Credentials:
    return Credentials(ACCESS_KEY, SECRET)


def _botocore_signed(
    method: str, path: str, query: str, headers: dict[str, str], body: bytes, *, presign: bool = False
) -> SignedRequest:
    url = f"http://gw.example.test:8000{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    if presign:
        S3SigV4QueryAuth(_credentials(), "s3", "us-east-1", expires=3600).add_auth(request)
    else:
        S3SigV4Auth(_credentials(), "s3", "us-east-1").add_auth(request)
    return from_url(method, request.url, request.headers)


keys = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]) | st.sampled_from("/+%?#&= ~!"),
    min_size=1,
    max_size=40,
)
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20)
queries = st.sampled_from(
    ["", "uploads", "uploadId=a%2Bb&partNumber=3", "list-type=2&prefix=a%20b&delimiter=%2F", "acl"]
)


@settings(max_examples=examples(1.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD"]),
    key=keys,
    query=queries,
    meta=st.dictionaries(st.sampled_from(["a", "b-c", "x"]), header_values, max_size=3),
    body=st.binary(max_size=200),
    presign=st.booleans(),
)
def test_botocore_signatures_verify_and_tampering_does_not(
    *, method: str, key: str, query: str, meta: dict[str, str], body: bytes, presign: bool
) -> None:
    path = "/repo/main/" + quote(key, safe="/~")
    headers = {f"x-amz-meta-{k}": v for k, v in meta.items()}
    if presign:  # a presigned URL carries no body (botocore reads a POST body as a form to presign)
        method, body = ("GET" if method == "POST" else method), b""
    request = _botocore_signed(method, path, query, headers, body, presign=presign)
    now = time.time()
    parsed = parse_signature(request)
    assert parsed is not None and parsed.access_key_id == ACCESS_KEY
    verified = parsed.verify(request, SECRET, now)
    assert verified.presigned is presign and verified.version == 4
    variants = [
        SignedRequest("PATCH", request.raw_path, request.raw_query, request.headers),
        SignedRequest(request.method, request.raw_path + "x", request.raw_query, request.headers),
        SignedRequest(request.method, request.raw_path, request.raw_query + "&versionId=1", request.headers),
    ]
    if meta:
        changed = tuple((k, v + "!") if k.startswith("x-amz-meta-") else (k, v) for k, v in request.headers)
        variants.append(SignedRequest(request.method, request.raw_path, request.raw_query, changed))
    for variant in variants:
        with pytest.raises(AuthenticationError):
            parse_signature(variant).verify(variant, SECRET, now)  # type: ignore[union-attr]
    with pytest.raises(AuthenticationError):
        parsed.verify(request, SECRET + "x", now)


def test_keys_from_the_raw_path_round_trip() -> None:
    """The keys lakeFS's gateway must take verbatim from the raw path: //, %2F, +, unicode, 1,024 bytes."""
    now = time.time()
    for raw in [
        "/r/main/a//b",
        "/r/main/a%2Fb",
        "/r/main/a+b%2B",
        "/r/main/%C3%BCber%20%E2%82%AC",
        "/r/main/" + "k" * 1024,
    ]:
        request = _botocore_signed("GET", raw, "", {}, b"")
        assert request.raw_path == raw
        verify(request, SECRET, now)


def test_a_client_signing_the_uri_encoded_form_is_accepted() -> None:
    """A client that sends '+' or '!' raw but signs the UriEncode of the decoded key covers the same key."""
    now = time.time()
    signed = _botocore_signed("GET", "/r/main/a%2Bb%21", "", {}, b"")
    sent = SignedRequest("GET", "/r/main/a+b!", "", signed.headers)
    verify(sent, SECRET, now)


def test_unsigned_amz_headers_are_refused() -> None:
    request = _botocore_signed("PUT", "/r/main/k", "", {}, b"x")
    added = SignedRequest("PUT", "/r/main/k", "", (*request.headers, ("x-amz-copy-source", "/r/main/secret")))
    with pytest.raises(AuthenticationError, match="not signed"):
        sigv4.parse(added)
    presigned = _botocore_signed("PUT", "/r/main/k", "", {}, b"", presign=True)
    added = SignedRequest(
        "PUT", "/r/main/k", presigned.raw_query, (*presigned.headers, ("x-amz-meta-a", "1"))
    )
    with pytest.raises(AuthenticationError, match="not signed"):
        sigv4.parse(added)


def test_boto3_put_object_with_default_checksums_verifies() -> None:
    request, _body = capture(lambda c: c.put_object(Bucket="repo", Key="main/a b+c/ü//x", Body=b"data" * 100))
    assert request.raw_path == "/repo/main/a%20b%2Bc/%C3%BC//x"
    assert request.header("x-amz-content-sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    verified = verify(request, SECRET, time.time())
    assert verified.access_key_id == ACCESS_KEY


@settings(max_examples=examples(3), deadline=None)
@given(
    authorization=st.one_of(
        st.text(max_size=300),
        st.builds(lambda s: "AWS4-HMAC-SHA256 " + s, st.text(max_size=300)),
        st.builds(
            lambda a, b, c: f"AWS4-HMAC-SHA256 Credential={a}, SignedHeaders={b}, Signature={c}",
            st.text(max_size=80),
            st.text(max_size=40),
            st.text(max_size=70),
        ),
    ),
    date=st.text(max_size=20),
    query=st.text(max_size=200),
)
def test_hostile_signatures_raise_typed_errors_only(authorization: str, date: str, query: str) -> None:
    request = SignedRequest("GET", "/r/b/k", query, (("Authorization", authorization), ("x-amz-date", date)))
    try:
        found = parse_signature(request)
        if found is not None:
            found.verify(request, SECRET, time.time())
    except (BadRequestError, AuthenticationError) as e:
        assert SECRET not in str(e)

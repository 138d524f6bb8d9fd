"""SigV2 header verification (lakefs_core.auth.sigv2): AWS's documented examples, botocore's
``HmacV1Auth`` over generated requests, tampering, the time window and presigned V2 URLs."""

from __future__ import annotations

import time
from email.utils import formatdate, parsedate_to_datetime
from urllib.parse import quote

import pytest
from botocore.auth import HmacV1Auth, HmacV1QueryAuth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.auth import sigv2
from lakefs_core.auth.signature import parse_signature
from lakefs_core.auth.signed import SignedRequest
from lakefs_core.errors import AuthenticationError, BadRequestError
from tests.auth.sigreq import ACCESS_KEY, SECRET, from_url
from tests.support.profiles import examples

DOC_KEY, DOC_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# AWS's "Signing and authenticating REST requests" examples (virtual-host style, bucket johnsmith)
DOCUMENTED = [
    pytest.param("GET", "/photos/puppy.jpg", "", {"Date": "Tue, 27 Mar 2007 19:36:42 +0000"}, "johnsmith",
                 "bWq2s1WEIj+Ydj0vQ697zp+IXMU=", id="object GET"),
    pytest.param("PUT", "/photos/puppy.jpg", "",
                 {"Content-Type": "image/jpeg", "Content-Length": "94328",
                  "Date": "Tue, 27 Mar 2007 21:15:45 +0000"},
                 "johnsmith", "MyyxeRY7whkBe+bq8fHCL/2kKUg=", id="object PUT"),
    pytest.param("GET", "/", "prefix=photos&max-keys=50&marker=puppy",
                 {"User-Agent": "Mozilla/5.0", "Date": "Tue, 27 Mar 2007 19:42:41 +0000"}, "johnsmith",
                 "htDYFYduRNen8P9ZfE/s9SuKy0U=", id="list"),
    pytest.param("GET", "/", "acl", {"Date": "Tue, 27 Mar 2007 19:44:46 +0000"}, "johnsmith",
                 "c2WLPFtWHVgbEmeEG93a4cG37dM=", id="fetch acl"),
    pytest.param("PUT", "/db-backup.dat.gz", "",
                 {"Content-MD5": "4gJE4saaMU4BqNR0kLY+lw==", "Content-Type": "application/x-download",
                  "Date": "Tue, 27 Mar 2007 21:06:08 +0000", "x-amz-acl": "public-read",
                  "x-amz-meta-checksumalgorithm": "crc32", "x-amz-meta-filechecksum": "0x02661779",
                  "x-amz-meta-reviewedby": "joe@johnsmith.net,jane@johnsmith.net"},
                 "static.johnsmith.net", "ilyl83RwaSoYIEdixDQcA4OnAnc=", id="upload with amz headers"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "query", "headers", "bucket", "signature"), DOCUMENTED)
def test_aws_documented_v2_signatures(
    *, method: str, path: str, query: str, headers: dict[str, str], bucket: str, signature: str
) -> None:
    all_headers = (*headers.items(), ("Authorization", f"AWS {DOC_KEY}:{signature}"))
    request = SignedRequest(method, path, query, all_headers, bucket=bucket)
    now = parsedate_to_datetime(headers["Date"]).timestamp()
    parsed = parse_signature(request)
    assert isinstance(parsed, sigv2.SigV2) and parsed.access_key_id == DOC_KEY
    assert parsed.verify(request, DOC_SECRET, now).version == 2
    with pytest.raises(AuthenticationError) as wrong:
        parsed.verify(request, DOC_SECRET[:-1], now)
    assert wrong.value.s3_code == "SignatureDoesNotMatch"
    with pytest.raises(AuthenticationError) as skewed:
        parsed.verify(request, DOC_SECRET, now + 901)
    assert skewed.value.s3_code == "RequestTimeTooSkewed"


def _hmac_v1(method: str, path: str, query: str, headers: dict[str, str]) -> SignedRequest:
    url = f"http://gw.example.test{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    HmacV1Auth(Credentials(ACCESS_KEY, SECRET)).add_auth(request)
    return from_url(method, request.url, request.headers)


@settings(max_examples=examples(1.5), deadline=None)
@given(
    method=st.sampled_from(["GET", "PUT", "DELETE", "HEAD", "POST"]),
    key=st.text(
        st.characters(codec="utf-8", categories=["L", "N", "P", "S"]) | st.sampled_from("/+% "), min_size=1
    ),
    query=st.sampled_from(["", "uploads", "uploadId=x%2By&partNumber=2", "acl", "prefix=a&delimiter=%2F"]),
    amz=st.dictionaries(
        st.sampled_from(["x-amz-meta-a", "x-amz-acl", "X-Amz-Meta-B"]), st.text("abc ,", max_size=8)
    ),
    content_type=st.sampled_from([None, "text/plain", "application/octet-stream"]),
)
def test_botocore_hmacv1_signatures_verify(
    method: str, key: str, query: str, amz: dict[str, str], content_type: str | None
) -> None:
    headers = dict(amz)
    if content_type:
        headers["Content-Type"] = content_type
    request = _hmac_v1(method, "/repo/main/" + quote(key, safe="/~"), query, headers)
    now = time.time()
    parsed = parse_signature(request)
    assert parsed is not None
    parsed.verify(request, SECRET, now)
    moved = SignedRequest(method, request.raw_path + "%20", query, request.headers)
    with pytest.raises(AuthenticationError):
        parsed.verify(moved, SECRET, now)
    if query:
        stripped = SignedRequest(method, request.raw_path, "", request.headers)
        if any(p.split("=")[0] in sigv2.SUB_RESOURCES for p in query.split("&")):
            with pytest.raises(AuthenticationError):
                parsed.verify(stripped, SECRET, now)


def test_empty_date_line_when_x_amz_date_is_also_sent() -> None:
    """s3cmd signs x-amz-date and an empty Date line, as AWS specifies; botocore signs Date."""
    date = formatdate(usegmt=True)
    text = f"GET\n\n\n\nx-amz-date:{date}\n/repo/main/k"
    import base64
    import hashlib
    import hmac

    signature = base64.b64encode(hmac.new(SECRET.encode(), text.encode(), hashlib.sha1).digest()).decode()
    request = SignedRequest(
        "GET",
        "/repo/main/k",
        "",
        (("Date", date), ("x-amz-date", date), ("Authorization", f"AWS {ACCESS_KEY}:{signature}")),
    )
    parse_signature(request).verify(request, SECRET, time.time())  # type: ignore[union-attr]


def test_presigned_v2_documented_example_and_bounds() -> None:
    """AWS's query-string authentication example (virtual-host bucket johnsmith), then its
    expiry, the 7-day bound, tampering and malformed parameters."""
    query = f"AWSAccessKeyId={DOC_KEY}&Expires=1175139620&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D"
    request = SignedRequest("GET", "/photos/puppy.jpg", query, bucket="johnsmith")
    signature = parse_signature(request)
    assert signature is not None and signature.access_key_id == DOC_KEY
    assert signature.verify(request, DOC_SECRET, 1175139620 - 60).presigned
    with pytest.raises(AuthenticationError) as expired:
        signature.verify(request, DOC_SECRET, 1175139620 + 1)
    assert expired.value.s3_code == "AccessDenied"
    with pytest.raises(BadRequestError):
        signature.verify(request, DOC_SECRET, 1175139620 - 8 * 86400)
    tampered = SignedRequest("GET", "/photos/kitten.jpg", query, bucket="johnsmith")
    with pytest.raises(AuthenticationError) as mismatch:
        parse_signature(tampered).verify(tampered, DOC_SECRET, 1175139620 - 60)  # type: ignore[union-attr]
    assert mismatch.value.s3_code == "SignatureDoesNotMatch"
    for bad in (
        "AWSAccessKeyId=AKIAJX&Expires=1&Signature=x",
        f"AWSAccessKeyId={DOC_KEY}&Expires=soon&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D",
        f"AWSAccessKeyId={DOC_KEY}&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D",
        f"AWSAccessKeyId={DOC_KEY}&Expires=1&Expires=2&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D",
    ):
        with pytest.raises(BadRequestError):
            parse_signature(SignedRequest("GET", "/r/b/k", bad))


@pytest.mark.parametrize("query", ["", "list-type=2&prefix=main%2F&delimiter=%2F", "versioning"])
def test_a_bucket_request_signed_with_the_buckets_slash(query: str) -> None:
    """botocore sends a path-style bucket request to ``/<bucket>`` but signs ``/<bucket>/`` (its
    ``auth_path``, which S3 accepts), in the header and in a presigned URL (boto3's default presign);
    the path as sent verifies too; a key's path gets no such variant."""
    url = "http://gw.example.test/repo" + (f"?{query}" if query else "")
    for signed_path in ("/repo/", "/repo"):
        header = AWSRequest(method="GET", url=url, headers={})
        header.auth_path = signed_path
        HmacV1Auth(Credentials(ACCESS_KEY, SECRET)).add_auth(header)
        request = from_url("GET", header.url, header.headers)
        assert request.raw_path == "/repo"
        parse_signature(request).verify(request, SECRET, time.time())  # type: ignore[union-attr]
    presign = AWSRequest(method="GET", url=url, headers={})
    presign.auth_path = "/repo/"
    HmacV1QueryAuth(Credentials(ACCESS_KEY, SECRET), expires=300).add_auth(presign)
    assert "AWSAccessKeyId=" in presign.url
    presigned = from_url("GET", presign.url, {})
    assert parse_signature(presigned).verify(presigned, SECRET, time.time()).presigned  # type: ignore[union-attr]
    keyed = AWSRequest(method="GET", url="http://gw.example.test/repo/main/k", headers={})
    keyed.auth_path = "/repo/main/k/"
    HmacV1Auth(Credentials(ACCESS_KEY, SECRET)).add_auth(keyed)
    request = from_url("GET", keyed.url, keyed.headers)
    with pytest.raises(AuthenticationError):
        parse_signature(request).verify(request, SECRET, time.time())  # type: ignore[union-attr]


def test_malformed_headers_are_bad_input() -> None:
    for header in (
        "AWS nocolon",
        "AWS k:",
        "AWS " + "k" * 300 + ":abc=",
        "AWS key:not*base64",
        "AWS key:YWJj",
    ):
        with pytest.raises(BadRequestError):
            parse_signature(SignedRequest("GET", "/r", "", (("Authorization", header),)))
    assert parse_signature(SignedRequest("GET", "/r", "", (("Authorization", "Bearer x"),))) is None
    dateless = _hmac_v1("GET", "/r/b/k", "", {})
    headers = tuple((k, v) for k, v in dateless.headers if k.lower() != "date")
    with pytest.raises(BadRequestError, match="Date"):
        parse_signature(SignedRequest("GET", "/r/b/k", "", headers)).verify(  # type: ignore[union-attr]
            SignedRequest("GET", "/r/b/k", "", headers), SECRET, time.time()
        )

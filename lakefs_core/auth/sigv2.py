"""AWS Signature Version 2 for S3 (``Authorization: AWS <access key>:<signature>``), pure.

What s3cmd and minio-go send when told to use V2, and botocore's ``HmacV1Auth``. The string to sign is
``METHOD\\nContent-MD5\\nContent-Type\\nDate\\n`` + the ``x-amz-*`` headers (lower-cased, sorted,
``name:value\\n``, repeated values joined with ``,``) + the canonical resource: ``/<bucket>`` for a
virtual-host-style request, then the RAW path as sent, then the sub-resources of the query that S3
signs (``?acl``, ``?uploadId=...``, ``response-*``, ...; sorted, values decoded). When the request also
carries ``x-amz-date``, S3 signs an empty Date line; botocore signs the Date header anyway: both are
accepted (the time is inside the string to sign either way). The signature is HMAC-SHA1 with the
secret, base64; compared in constant time. The request time (``x-amz-date``, else ``Date``; RFC 1123
or ISO 8601 basic) must be within 15 minutes of now.

Presigned V2 URLs (``?AWSAccessKeyId=<key>&Expires=<unix time>&Signature=<base64>``, as botocore's
``s3`` signature version, s3cmd's ``signurl`` and lakeFS's gateway make and accept them): the same
string to sign with the ``Expires`` value in place of the Date line (the three parameters are not
sub-resources, so they are not signed). Expired (``Expires`` before now) is ``AccessDenied``; an
``Expires`` more than 7 days (and the clock skew) ahead is refused as SigV4 refuses a longer
``X-Amz-Expires``: a V2 URL has no signing time, so the bound is on its end.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from lakefs_core.auth import keys
from lakefs_core.auth.signed import UNSIGNED_PAYLOAD, SignedRequest, VerifiedRequest
from lakefs_core.errors import AuthenticationError, BadRequestError

__all__ = ["SUB_RESOURCES", "SigV2", "parse"]

MAX_CLOCK_SKEW = 15 * 60
MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # as SigV4's X-Amz-Expires
# What botocore's HmacV1Auth, lakeFS's gateway and minio-go sign of a query: S3's sub-resources.
SUB_RESOURCES = frozenset(
    {
        "accelerate", "acl", "analytics", "copy-source", "cors", "defaultObjectAcl", "delete", "encryption",
        "inventory", "legal-hold", "lifecycle", "location", "logging", "metrics", "notification",
        "object-lock", "partNumber", "policy", "replication", "requestPayment", "response-cache-control",
        "response-content-disposition", "response-content-encoding", "response-content-language",
        "response-content-type", "response-expires", "restore", "retention", "select", "select-type",
        "storageClass", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning", "versions",
        "website",
    }
)  # fmt: skip
_HEADER = re.compile(r"AWS ([!-~]{3,128}):([A-Za-z0-9+/=]{1,64})")


def _request_time(request: SignedRequest) -> float:
    value = request.header("x-amz-date") or request.header("date")
    if value is None:
        raise BadRequestError("the request has no Date or x-amz-date", s3_code="AccessDenied", field="Date")
    try:
        if re.fullmatch(r"\d{8}T\d{6}Z", value):
            return datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        raise BadRequestError("is not an RFC 1123 or ISO 8601 time", field="Date") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def canonical_resources(request: SignedRequest) -> list[str]:
    """``/<bucket>`` (virtual-host style) + the raw path + the signed sub-resources; for a request
    that names a bucket and no key, also the form with the bucket's trailing ``/``: botocore signs
    ``/<bucket>/`` while it sends ``/<bucket>`` (its ``auth_path``, which S3 accepts), other clients
    sign the path they send."""
    path = (f"/{request.bucket}" if request.bucket else "") + request.raw_path
    subs = []
    for name, value, has_value in request.query_pairs():
        text = name.decode("utf-8", "surrogateescape")
        if text in SUB_RESOURCES:
            subs.append((text, value.decode("utf-8", "surrogateescape") if has_value and value else None))
    query = ""
    if subs:
        subs.sort(key=lambda nv: nv[0])
        query = "?" + "&".join(n if v is None else f"{n}={v}" for n, v in subs)
    paths = [path]
    if len(path) > 1 and path.count("/") == 1:  # "/<bucket>": no key
        paths.append(path + "/")
    return [p + query for p in paths]


def strings_to_sign(request: SignedRequest, expires: str | None = None) -> list[str]:
    """The strings to sign, one per canonical resource, each also with an empty Date line when
    x-amz-date is also present (a presigned URL's: its ``expires`` on the Date line)."""

    def joined(name: str) -> str:
        return ",".join(v.strip() for v in request.header_values(name))

    amz = "".join(
        f"{name}:{joined(name)}\n"
        for name in sorted(n for n in request.header_names() if n.startswith("x-amz-"))
    )
    dates = [joined("date")] if expires is None else [expires]
    if expires is None and request.header("x-amz-date") is not None and dates[0]:
        dates.append("")
    return [
        f"{request.method}\n{joined('content-md5')}\n{joined('content-type')}\n{date}\n{amz}{resource}"
        for resource in canonical_resources(request)
        for date in dates
    ]


@dataclass(frozen=True)
class SigV2:
    access_key_id: str
    signature: bytes = field(repr=False)
    expires: int | None = None  # a presigned URL's end (unix seconds)

    def verify(self, request: SignedRequest, secret: str, now: float) -> VerifiedRequest:
        presigned = self.expires is not None
        when = now if presigned else _request_time(request)
        matched = False
        for text in strings_to_sign(request, None if self.expires is None else str(self.expires)):
            expected = hmac.new(
                secret.encode(), text.encode("utf-8", "surrogateescape"), hashlib.sha1
            ).digest()
            matched |= hmac.compare_digest(expected, self.signature)
        if not matched:
            raise AuthenticationError(
                "the request signature does not match (check the secret access key and signing method)",
                s3_code="SignatureDoesNotMatch",
            )
        if self.expires is not None:
            if now > self.expires:
                raise AuthenticationError("the presigned request has expired", s3_code="AccessDenied")
            if self.expires - now > MAX_PRESIGN_SECONDS + MAX_CLOCK_SKEW:
                raise BadRequestError(
                    "a presigned URL may be valid for 7 days at most",
                    s3_code="AuthorizationQueryParametersError",
                    field="Expires",
                )
            return VerifiedRequest(self.access_key_id, version=2, payload=UNSIGNED_PAYLOAD, presigned=True)
        if abs(now - when) > MAX_CLOCK_SKEW:
            raise AuthenticationError(
                "the difference between the request time and the server's time is too large",
                s3_code="RequestTimeTooSkewed",
            )
        return VerifiedRequest(self.access_key_id, version=2, payload=UNSIGNED_PAYLOAD)


def parse(request: SignedRequest) -> SigV2 | None:
    """The request's SigV2 header signature, or ``None`` if it carries none."""
    headers = request.header_values("authorization")
    if not headers:
        return _presigned(request) if request.query("AWSAccessKeyId") is not None else None
    if len(headers) > 1 or not headers[0].startswith("AWS "):
        return None
    match = _HEADER.fullmatch(headers[0].strip())
    if match is None or not keys.valid_access_key_id(match.group(1)):
        raise BadRequestError(
            "expected 'AWS <access key>:<signature>'", s3_code="InvalidArgument", field="Authorization"
        )
    return SigV2(match.group(1), _signature(match.group(2), "Authorization"))


def _signature(text: str, where: str) -> bytes:
    try:
        signature = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise BadRequestError("the signature is not base64", s3_code="InvalidArgument", field=where) from None
    if len(signature) != hashlib.sha1().digest_size:
        raise BadRequestError("the signature is not an HMAC-SHA1", s3_code="InvalidArgument", field=where)
    return signature


def _presigned(request: SignedRequest) -> SigV2:
    values = {}
    for name in ("AWSAccessKeyId", "Expires", "Signature"):
        value = request.query(name)
        if value is None:
            raise BadRequestError("is missing", s3_code="AuthorizationQueryParametersError", field=name)
        values[name] = value
    if not keys.valid_access_key_id(values["AWSAccessKeyId"]):
        raise BadRequestError("is not an access key id", s3_code="InvalidArgument", field="AWSAccessKeyId")
    expires = values["Expires"]
    if not expires.isdigit() or len(expires) > 12:
        raise BadRequestError(
            "must be a time in seconds since the epoch",
            s3_code="AuthorizationQueryParametersError",
            field="Expires",
        )
    if len(values["Signature"]) > 64:
        raise BadRequestError("is too long", s3_code="InvalidArgument", field="Signature")
    return SigV2(values["AWSAccessKeyId"], _signature(values["Signature"], "Signature"), int(expires))

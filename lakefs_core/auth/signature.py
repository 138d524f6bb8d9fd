"""Authenticating an S3 request: which signature it carries, whose key, whether it matches.

For the gateway's handlers::

    request = SignedRequest(method, raw_path, raw_query, headers, bucket=virtual_host_bucket)
    credential, verified = await authenticate(request, auth_store, time.time())
    body = body_verifier(verified, request)       # lakefs_core.auth.payload
    ... body.feed(chunk) ... body.finish()        # before anything is staged

:func:`parse_signature` and the verification are pure (:mod:`.sigv4`, :mod:`.sigv2`); only the
credential lookup touches the KV store. :func:`is_aws_signed` is lakeFS's routing rule: a request
carrying an AWS signature (header or query) is an S3 request.
"""

from __future__ import annotations

from typing import Protocol

from lakefs_core.auth import sigv2, sigv4
from lakefs_core.auth.model import Credential
from lakefs_core.auth.signed import SignedRequest, VerifiedRequest
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import AuthenticationError, NotFoundError

__all__ = ["RequestSignature", "authenticate", "is_aws_signed", "parse_signature"]


class RequestSignature(Protocol):
    @property
    def access_key_id(self) -> str: ...

    def verify(self, request: SignedRequest, secret: str, now: float) -> VerifiedRequest: ...


def is_aws_signed(request: SignedRequest) -> bool:
    """The request carries an AWS signature (lakeFS's ``IsAWSSignedRequest``)."""
    auth = request.header("authorization") or ""
    if auth.startswith(("AWS4", "AWS ")) or request.header("x-amz-signature"):
        return True
    return request.has_query("X-Amz-Credential") or request.has_query("AWSAccessKeyId")


def parse_signature(request: SignedRequest) -> RequestSignature | None:
    """The request's signature (SigV4 header or presigned, SigV2 header), or ``None`` if anonymous."""
    found: RequestSignature | None = sigv4.parse(request)
    return found if found is not None else sigv2.parse(request)


async def authenticate(
    request: SignedRequest, store: AuthStore, now: float
) -> tuple[Credential, VerifiedRequest]:
    """The credential that signed ``request`` and what its signature verified, or
    :class:`~lakefs_core.errors.AuthenticationError` (anonymous requests included)."""
    signature = parse_signature(request)
    if signature is None:
        raise AuthenticationError("the request is not signed", s3_code="AccessDenied")
    try:
        credential = await store.get_credentials(signature.access_key_id)
    except NotFoundError:
        raise AuthenticationError(
            "the access key id does not exist in our records", s3_code="InvalidAccessKeyId"
        ) from None
    if credential.secret_access_key is None:  # never: get_credentials decrypts
        raise AuthenticationError("the credential has no secret", s3_code="InvalidAccessKeyId")
    return credential, signature.verify(request, credential.secret_access_key, now)

"""What the operations share: the repository and branch of a call, ETags, HTTP dates, user metadata."""

from __future__ import annotations

import email.utils
from collections.abc import Mapping
from datetime import UTC, datetime
from email.header import decode_header, make_header

from lakefs_core.errors import NotFoundError
from lakefs_core.refs.model import Repository
from lakefs_server.gateway.errors import S3Error
from lakefs_server.gateway.handler import S3Call

__all__ = [
    "AMZ_META",
    "MAX_METADATA_BYTES",
    "http_date",
    "not_a_branch",
    "parse_http_date",
    "quoted_etag",
    "repository",
    "require_branch",
    "user_metadata",
    "write_metadata_headers",
]

AMZ_META = "X-Amz-Meta-"
MAX_METADATA_BYTES = 2 * 1024  # S3's (and lakeFS's) limit on user metadata
_TOKEN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.#!$%&'*+^`|~")


async def repository(call: S3Call, repo_id: str | None = None) -> Repository:
    """The call's repository (cached as writers cache it); a missing one is NoSuchBucket."""
    name = call.repo if repo_id is None else repo_id
    try:
        return await call.ctx.graveler.recent_repository(name)
    except NotFoundError:
        raise S3Error("NoSuchBucket", f"repository {name!r} does not exist") from None


async def require_branch(call: S3Call, repo_id: str, ref: str) -> None:
    """Writes go to branches: a tag, a commit id or a missing branch is NoSuchBucket (lakeFS's answer)."""
    try:
        await call.ctx.graveler.branch(repo_id, ref)
    except NotFoundError:
        raise not_a_branch(repo_id, ref) from None


def not_a_branch(repo_id: str, ref: str) -> S3Error:
    """The answer to a write to a ref that is no branch (or a missing one): lakeFS's NoSuchBucket."""
    return S3Error("NoSuchBucket", f"{ref!r} is not a branch of {repo_id!r}: writes go to branches")


def quoted_etag(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'


def http_date(when: datetime | None) -> str:
    return email.utils.format_datetime((when or datetime.fromtimestamp(0, UTC)).astimezone(UTC), usegmt=True)


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP date, or ``None`` when absent or unparsable (ignored, as HTTP says)."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def user_metadata(call: S3Call) -> dict[str, str]:
    """``x-amz-meta-*`` headers as lakeFS stores them: ``X-Amz-Meta-<lower-case name>`` -> value
    (RFC 2047 encoded words decoded); names outside the HTTP token characters are dropped, as S3
    drops them; more than 2 KiB in all is MetadataTooLarge."""
    found: dict[str, str] = {}
    total = 0
    for name in call.signed.header_names():
        if not name.startswith("x-amz-meta-"):
            continue
        key = name[len("x-amz-meta-") :]
        raw = ",".join(call.signed.header_values(name))
        try:
            value = str(make_header(decode_header(raw))) if "=?" in raw else raw
        except (ValueError, LookupError, UnicodeDecodeError):
            raise S3Error("InvalidArgument", f"x-amz-meta-{key[:64]} is not a valid encoded word") from None
        total += len(key) + len(value.encode())
        if total > MAX_METADATA_BYTES:
            raise S3Error("MetadataTooLarge", f"user metadata is larger than {MAX_METADATA_BYTES} bytes")
        if key and set(key) <= _TOKEN:
            found[AMZ_META + key] = value
    return found


def write_metadata_headers(headers: dict[str, str], metadata: Mapping[str, str]) -> None:
    """The stored user metadata as response headers (non-ASCII values as RFC 2047 encoded words)."""
    missing = 0
    for key, value in metadata.items():
        if key[: len(AMZ_META)].lower() != AMZ_META.lower():
            continue
        name = key[len(AMZ_META) :].lower()
        if not name or not set(name) <= _TOKEN:
            missing += 1
            continue
        if value.isascii() and "\n" not in value and "\r" not in value:
            headers["x-amz-meta-" + name] = value
        else:
            headers["x-amz-meta-" + name] = make_header([(value.encode(), "utf-8")]).encode()
    if missing:
        headers["x-amz-missing-meta"] = str(missing)

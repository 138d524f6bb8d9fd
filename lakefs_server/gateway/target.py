"""What an S3 request addresses: the repository (bucket) and the key, from the Host and the RAW path.

- Virtual-host style: a Host (port dropped, case ignored) ending in ``.<domain>`` for a configured
  domain names the bucket (``repo.s3.example.com``); the whole path is the key.
- Path style (any other Host): the first path segment is the bucket, the rest the key.
- The key is the raw path's remainder percent-decoded as one string, so ``//`` stays two slashes,
  ``%2F`` becomes ``/``, ``+`` stays ``+`` (S3 clients send a space as ``%20``) and UTF-8 round-trips;
  invalid UTF-8 is :class:`~lakefs_core.errors.BadRequestError`. The key's first segment is the ref,
  the rest the object's path within it (lakeFS's ``s3://<repo>/<ref>/<path>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from lakefs_core.errors import BadRequestError

__all__ = ["MAX_PATH_BYTES", "Target", "bucket_of_host", "parse_target"]

MAX_PATH_BYTES = 1024  # S3's key limit, applied to the path within the ref


def _decode(raw: str, what: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise BadRequestError(f"the {what} is not UTF-8", s3_code="InvalidArgument", field="path") from None


def bucket_of_host(host: str | None, domains: list[str]) -> tuple[str | None, bool]:
    """``(bucket, under_domain)``: the virtual-host bucket (or ``None``) and whether the Host is one
    of ``domains`` or under one."""
    if not host:
        return None, False
    name = host.strip().lower()
    if name.startswith("["):  # an IPv6 literal is never a domain
        return None, False
    name = name.rpartition(":")[0] if ":" in name else name
    name = name.rstrip(".")
    for domain in domains:
        if name == domain:
            return None, True
        if name.endswith("." + domain):
            bucket = name[: -len(domain) - 1]
            return (bucket or None), True
    return None, False


@dataclass(frozen=True)
class Target:
    """``bucket`` (``None``: the service, ListBuckets), ``key`` (``None``: the bucket itself)."""

    bucket: str | None
    key: str | None
    virtual_host: bool = False

    @property
    def ref(self) -> str | None:
        if not self.key:
            return None
        return self.key.partition("/")[0]

    @property
    def path(self) -> str | None:
        """The object's path within the ref (``None`` without ``<ref>/``)."""
        if not self.key:
            return None
        _, sep, path = self.key.partition("/")
        return path if sep else None


def parse_target(raw_path: str, host_bucket: str | None) -> Target:
    """The target of a request whose raw path (no query) is ``raw_path``."""
    if not raw_path.startswith("/"):
        raise BadRequestError("the request path must start with '/'", s3_code="InvalidRequest", field="path")
    if host_bucket is not None:
        target = Target(host_bucket, _decode(raw_path[1:], "key") or None, virtual_host=True)
    else:
        raw_bucket, sep, raw_key = raw_path[1:].partition("/")
        if not raw_bucket:
            return Target(None, None)
        key = _decode(raw_key, "key") if sep else ""
        target = Target(_decode(raw_bucket, "bucket"), key or None)
    path = target.path
    if path is not None and len(path.encode()) > MAX_PATH_BYTES:
        raise BadRequestError(
            f"the object path is longer than {MAX_PATH_BYTES} bytes", s3_code="KeyTooLongError", field="path"
        )
    return target

"""Helpers shared by the KV drivers (argument checks, closed-store guard). Not public API."""

from __future__ import annotations

from lakefs_core.errors import BadInputError, LakeFSError
from lakefs_core.kv.base import Expect

_KINDS = frozenset({"absent", "exists", "equals"})


def as_bytes(value: object, field: str) -> bytes:
    """``value`` as immutable bytes; bytes-like objects are copied, anything else is refused."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise BadInputError(f"must be bytes, not {type(value).__name__}", field=field)


def check_key(partition: object, key: object) -> tuple[bytes, bytes]:
    """Validate a (partition, key) pair: both non-empty bytes (as lakeFS requires)."""
    p = check_partition(partition)
    k = as_bytes(key, "key")
    if not k:
        raise BadInputError("must not be empty", field="key")
    return p, k


def check_partition(partition: object) -> bytes:
    p = as_bytes(partition, "partition")
    if not p:
        raise BadInputError("must not be empty", field="partition")
    return p


def check_expect(expected: object) -> Expect:
    if not isinstance(expected, Expect) or expected.kind not in _KINDS:
        raise BadInputError("must be Expect.ABSENT, Expect.EXISTS or Expect.equals(bytes)", field="expected")
    return expected


def check_page_size(page_size: object) -> int:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise BadInputError("must be a positive integer", field="page_size")
    return page_size


def precondition_message(expected: Expect) -> str:
    if expected.kind == "absent":
        return "key already exists"
    if expected.kind == "exists":
        return "key does not exist"
    return "stored value differs from the expected value"


def closed_error(driver: str) -> LakeFSError:
    """The error for an operation on a store after ``close()`` (a programming error, not retryable)."""
    return LakeFSError(f"{driver} KV store is closed")

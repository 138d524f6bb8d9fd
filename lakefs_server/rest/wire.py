"""lakeFS's wire rules for the REST API: JSON errors, status codes, pagination, timestamps, booleans.

- Every error is ``{"message": ...}`` with lakeFS's status for its kind (:func:`status_of`): 404
  missing, 409 exists or conflicts, 412 a failed precondition, 403 a protected branch or a read-only
  repository, 410 purged data, 400 bad input, 401 authentication or authorisation refused (lakeFS
  answers 401 for both).
- Pagination: ``after`` (exclusive) and ``amount`` (default 100, at most 1,000) in, and
  ``pagination{has_more, next_offset, results, max_per_page}`` out.
- Timestamps are unix seconds; query booleans are accepted in any case (``True``, ``true``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from aiohttp import web

from lakefs_core.errors import (
    AuthenticationError,
    BadInputError,
    LakeFSError,
    MergeConflictError,
    NoChangesError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    ProtectedBranchError,
    PurgedError,
    ReadOnlyError,
    TooManyRetriesError,
)
from lakefs_core.repos.graveler import Graveler

DEFAULT_AMOUNT: Final = 100
MAX_AMOUNT: Final = 1000


class UnauthorizedError(LakeFSError):
    """No or bad credentials, or the policies refuse the operation (lakeFS answers 401 for both)."""

    http_status = 401


def status_of(error: LakeFSError) -> int:
    """lakeFS's status for an error of the core's tree."""
    match error:
        case PurgedError():
            return 410
        case NotFoundError():
            return 404
        case PreconditionFailedError():
            return 412
        case ReadOnlyError() | ProtectedBranchError():
            return 403
        case NoChangesError():
            return 400
        case MergeConflictError():
            return 409
        case TooManyRetriesError():
            return 429  # lakeFS's ErrTooManyTries
        case AuthenticationError() | PermissionDeniedError() | UnauthorizedError():
            return 401
        case BadInputError():
            return 400
    return error.http_status


async def refuse_dirty(graveler: Graveler, repo_id: str, branch_id: str) -> None:
    """lakeFS answers 400 ``uncommitted changes (dirty branch)`` to a merge, revert or cherry-pick onto
    a branch with uncommitted changes; the core refuses them too (a conflict), this says it first."""
    repo = await graveler.repository(repo_id)
    if await graveler.has_uncommitted(repo, await graveler.branch(repo_id, branch_id)):
        raise BadInputError(f"uncommitted changes (dirty branch) on {branch_id!r}", field="branch")


def error_json(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"message": message}, status=status, headers=headers)


def message_of(error: LakeFSError) -> str:
    if isinstance(error, ProtectedBranchError):
        return error.lakefs_message  # lakeFS's own words, as its clients match them
    return str(error.args[0]) if error.args else type(error).__name__


def unix(when: datetime | None) -> int:
    return int(when.timestamp()) if when is not None else 0


def query_bool(request: web.Request, name: str, default: bool = False) -> bool:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise BadInputError(f"{name} must be true or false, not {raw[:40]!r}", field=name)


def query_int(request: web.Request, name: str, default: int, *, low: int = 0, high: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadInputError(f"{name} must be an integer, not {raw[:40]!r}", field=name) from None
    if value < low or (high is not None and value > high):
        raise BadInputError(f"{name} out of range", field=name)
    return value


def amount_of(request: web.Request) -> int:
    """``amount``: default 100; lakeFS clamps values above 1,000 (and below 1 means the default)."""
    value = query_int(request, "amount", DEFAULT_AMOUNT, low=-(2**31))
    if value <= 0:
        return DEFAULT_AMOUNT
    return min(value, MAX_AMOUNT)


def page(results: list[dict[str, Any]], has_more: bool, next_offset: str, amount: int) -> dict[str, Any]:
    return {
        "pagination": {
            "has_more": has_more,
            "next_offset": next_offset if has_more else "",
            "results": len(results),
            "max_per_page": MAX_AMOUNT,
        },
        "results": results,
    }

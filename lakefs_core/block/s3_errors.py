"""How :class:`~lakefs_core.block.s3.S3BlockStore` classifies and reports S3 failures.

:func:`is_transient` decides which botocore/aiohttp errors are worth retrying (never this project's
own errors); :func:`translate_error` turns whatever escapes the retries into a
:class:`~lakefs_core.errors.LakeFSError` (mapping listed in :mod:`lakefs_core.block.s3`) whose message
names the operation and object but never credentials. The S3 error-code sets live here too, for the
per-key results of ``DeleteObjects``. Pure functions: no I/O, no retrying.
"""

from __future__ import annotations

import asyncio
import time
from email.utils import parsedate_to_datetime

import aiohttp
from botocore.exceptions import (
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from lakefs_core.block.s3_settings import S3Settings
from lakefs_core.errors import (
    AccessDeniedError,
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    StorageFullError,
    TransientError,
    UnreachableError,
)

TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "ConditionalRequestConflict",
        "OperationAborted",
        "PriorRequestNotComplete",
    }
)
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "InvalidSecurity",
    }
)
# S3-compatible stores on disks (MinIO) answer a full backend with HTTP 507; AWS S3 never does.
STORAGE_FULL_CODES = frozenset({"XMinioStorageFull", "InsufficientStorage"})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412"})


def error_code(e: ClientError) -> str:
    """The S3 error code of ``e`` (``""`` when there is none)."""
    return str(e.response.get("Error", {}).get("Code", ""))


def _status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_precondition(e: BaseException) -> bool:
    """True for a failed precondition (HTTP 412)."""
    return isinstance(e, ClientError) and (error_code(e) in _PRECONDITION_CODES or _status(e) == 412)


def is_storage_full(e: ClientError) -> bool:
    """True for a store whose backing disk is full (HTTP 507 Insufficient Storage)."""
    return error_code(e) in STORAGE_FULL_CODES or _status(e) == 507


def _is_connect_error(e: BaseException) -> bool:
    return isinstance(e, (BotoConnectionError, aiohttp.ClientConnectorError))


def is_transient(e: BaseException) -> bool:
    """True for S3/transport errors worth retrying (never for this project's own errors)."""
    if isinstance(e, LakeFSError):
        return False
    if isinstance(e, ClientError):
        if is_storage_full(e):
            return False  # retrying cannot free space
        status = _status(e)
        return error_code(e) in TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(
        e,
        (
            BotoConnectionError,
            HTTPClientError,
            IncompleteReadError,
            aiohttp.ClientError,
            asyncio.TimeoutError,
            ConnectionError,
        ),
    )


def translate_error(
    e: BaseException, where: str, *, bucket: str, key: str | None, settings: S3Settings
) -> LakeFSError:
    """The project error for ``e``, raised by the operation ``where`` (``"<op> <uri>"``) on ``key``
    of ``bucket``; a :class:`~lakefs_core.errors.LakeFSError` is returned as it is."""
    if isinstance(e, LakeFSError):
        return e
    if isinstance(e, ClientError):
        code, status = error_code(e), _status(e)
        message = str(e.response.get("Error", {}).get("Message", "")).strip()
        detail = f"{code or 'error'} (HTTP {status})" + (f": {message}" if message else "")
        if code == "NoSuchBucket":
            return NotFoundError(f"{where}: bucket {bucket!r} does not exist")
        if code in _NOT_FOUND_CODES or status == 404:
            return NotFoundError(f"{where}: no such object ({detail})")
        if is_precondition(e):
            return PreconditionFailedError(f"{where}: precondition failed ({detail})")
        if code in ACCESS_CODES or status == 403:
            return AccessDeniedError(f"{where}: access denied ({detail})")
        if is_storage_full(e):
            return StorageFullError(f"{where}: the object store is full ({detail})")
        if is_transient(e):
            return TransientError(f"{where}: {detail} after {settings.max_attempts} attempt(s)")
        if 400 <= status < 500:
            return BadInputError(f"{where}: {detail}", field="key" if key else None)
        return LakeFSError(f"{where}: {detail}")
    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return AccessDeniedError(f"{where}: no usable credentials ({type(e).__name__})")
    if isinstance(e, (NoRegionError, ParamValidationError)):
        return BadInputError(f"{where}: {type(e).__name__}: {e}")
    if _is_connect_error(e):
        return UnreachableError(
            f"{where}: cannot reach {settings.endpoint_url or 'S3'} ({type(e).__name__}) "
            f"after {settings.max_attempts} attempt(s)"
        )
    if is_transient(e):
        return TransientError(f"{where}: {type(e).__name__} after {settings.max_attempts} attempt(s)")
    return LakeFSError(f"{where}: {type(e).__name__}: {e}")


# Codes (and statuses) by which S3 asks a client to slow down: ``delete_batch`` reports them as
# ``throttled`` so the caller's rate limiter backs off (gc.md §3b).
THROTTLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ServiceUnavailable",
    }
)
MAX_RETRY_AFTER = 3600.0  # a hostile or broken Retry-After never stalls a caller longer than this


def is_throttle(e: BaseException) -> bool:
    """True when ``e`` is S3 asking to slow down (503, 429 or a throttling code)."""
    if not isinstance(e, ClientError):
        return False
    return error_code(e) in THROTTLE_CODES or _status(e) in (503, 429)


def retry_after_seconds(e: BaseException, now: float | None = None) -> float | None:
    """The ``Retry-After`` of the response behind ``e`` in seconds (delta-seconds or an HTTP date,
    clamped to [0, :data:`MAX_RETRY_AFTER`]), or ``None`` when absent or unreadable."""
    if not isinstance(e, ClientError):
        return None
    headers = e.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
    raw = next((str(v) for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    if raw is None:
        return None
    raw = raw.strip()
    seconds: float | None = None
    if raw.isdigit() or raw.replace(".", "", 1).isdigit():
        seconds = float(raw)
    else:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)

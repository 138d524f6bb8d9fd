"""How to reach S3 or an S3-compatible store: a plain settings object, importable without the SDK.

Kept apart from :mod:`lakefs_core.block.s3` so configuration code and command lines that only
*describe* an S3 store do not pay for importing aioboto3/botocore (a third of a CLI start-up).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from lakefs_core.block._common import check_positive
from lakefs_core.errors import BadInputError

MIB = 1 << 20
MIN_PART = 5 * MIB
MAX_PART = 5 * 1024 * MIB


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3 (or an S3-compatible store). Secrets are never shown by ``repr``.

    ``addressing_style=None`` means ``"path"`` when ``endpoint_url`` is set (MinIO, Ceph, moto) and
    ``"auto"`` otherwise. Credentials left ``None`` come from botocore's default chain (environment,
    profile, instance role).
    """

    region: str | None = None
    endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    addressing_style: Literal["auto", "path", "virtual"] | None = None
    multipart_threshold: int = 16 * MIB
    multipart_chunk: int = 8 * MIB
    multipart_concurrency: int = 4
    max_attempts: int = 5
    retry_initial_backoff: float = 0.1
    retry_max_backoff: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_pool_connections: int = 32
    request_checksum_calculation: Literal["when_supported", "when_required"] = "when_supported"

    def __post_init__(self) -> None:
        for name in ("multipart_threshold", "multipart_concurrency", "max_attempts", "max_pool_connections"):
            check_positive(getattr(self, name), name)
        if not isinstance(self.multipart_chunk, int) or not MIN_PART <= self.multipart_chunk <= MAX_PART:
            raise BadInputError(f"must be between {MIN_PART} and {MAX_PART} bytes", field="multipart_chunk")
        for name in ("retry_initial_backoff", "retry_max_backoff", "connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise BadInputError("must be a number >= 0", field=name)
        if self.addressing_style not in (None, "auto", "path", "virtual"):
            raise BadInputError("must be None, 'auto', 'path' or 'virtual'", field="addressing_style")
        if self.request_checksum_calculation not in ("when_supported", "when_required"):
            raise BadInputError(
                "must be 'when_supported' or 'when_required'", field="request_checksum_calculation"
            )
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise BadInputError("access_key_id and secret_access_key go together", field="secret_access_key")

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("secret_access_key", "session_token") and value is not None:
                shown.append(f"{f.name}='***'")
            else:
                shown.append(f"{f.name}={value!r}")
        return f"S3Settings({', '.join(shown)})"

    __str__ = __repr__

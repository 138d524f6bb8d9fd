"""The typed configuration pieces every entry point shares: one S3 schema, one core schema.

- :class:`S3Config`: how to reach S3 or an S3-compatible store (``endpoint_url``, ``region``,
  ``credentials``, ``addressing_style``, retries, timeouts, multipart sizes), turned into the
  SDK-free :class:`~lakefs_core.block.s3_settings.S3Settings` by :meth:`S3Config.settings`.
  Credentials are one of::

      credentials: {source: env}        # botocore's default chain (environment, profile, instance role)
      credentials: {source: static, access_key_id: AKIA..., secret_access_key: ..., session_token: ...}
      credentials: {source: profile, profile: NAME}   # resolved once, at opening

  For compatibility the flat keys ``access_key_id`` / ``secret_access_key`` / ``session_token`` of
  older CLI configurations are accepted and mean ``{source: static, ...}`` (not together with
  ``credentials``).
- :class:`CoreSettings`: what :func:`lakefs_core.wiring.open_core` needs to open the core of one
  region: ``kv_url``, ``s3``, the table caches (``cache_dir``/``cache_max_bytes`` on disk,
  ``table_cache_bytes`` in RAM), ``table_max_block_bytes`` (hostile-file bound), the leftover
  temp-file sweep grace of local namespaces (``temp_sweep_grace_seconds``), the compare-and-swap
  bounds, and the REST import status's refresh interval and stale timeout
  (``import_heartbeat_seconds``, ``import_stale_seconds``: finite, > 0, the timeout at least
  :data:`MIN_HEARTBEATS_PER_STALE` refreshes), and the bound of the listings' cache of committed
  directories (``listing_cache_children``, 0: off). The CLI's configuration extends it
  (:mod:`lakefs_core.coreconfig`); the mirror builds one per region
  (:meth:`lakefs_mirror.config.MirrorConfig.core_settings`).

Secrets (``kv_url``, ``secret_access_key``, ``session_token``) are :class:`~pydantic.SecretStr`:
never shown by ``repr``/``str``/dumps and never repeated in error messages.
:func:`sqlite_dir_problem` is the one check that a SQLite URL's directory exists (daemons refuse a
missing one rather than silently creating a fresh, empty database; only the CLI's embedded default
creates its directory).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from lakefs_core.block.s3_settings import MAX_PART, MIB, MIN_PART, S3Settings
from lakefs_core.config import StrictModel
from lakefs_core.defaults import DEFAULTS, CoreOptions
from lakefs_core.errors import BadInputError
from lakefs_core.redact import redact_url

__all__ = [
    "DEFAULT_TEMP_SWEEP_GRACE_SECONDS",
    "MIN_HEARTBEATS_PER_STALE",
    "AuthConfig",
    "CoreSettings",
    "Credentials",
    "EnvCredentials",
    "NonEmptySecret",
    "ProfileCredentials",
    "S3Config",
    "StaticCredentials",
    "path_problems",
    "sqlite_dir_problem",
]

# lakefs_core.block.local_leftovers.DEFAULT_TMP_GRACE_SECONDS (a test checks they agree)
DEFAULT_TEMP_SWEEP_GRACE_SECONDS = DEFAULTS.temp_sweep_grace_seconds
# import_stale_seconds spans at least this many import_heartbeat_seconds (lakeFS's defaults: 60)
MIN_HEARTBEATS_PER_STALE = 5


def _non_empty_secret(value: SecretStr) -> SecretStr:
    if not value.get_secret_value():
        raise ValueError("must not be empty")
    return value


NonEmptySecret = Annotated[SecretStr, AfterValidator(_non_empty_secret)]


class EnvCredentials(StrictModel):
    """Credentials from botocore's default chain (environment, shared files, instance/task role)."""

    source: Literal["env"] = "env"


class StaticCredentials(StrictModel):
    """An access key written in the configuration (or, better, injected through the environment)."""

    source: Literal["static"]
    access_key_id: str = Field(min_length=1)
    secret_access_key: NonEmptySecret
    session_token: SecretStr | None = None


class ProfileCredentials(StrictModel):
    """A named profile of the shared AWS config/credentials files."""

    source: Literal["profile"]
    profile: str = Field(min_length=1)


Credentials = Annotated[
    EnvCredentials | StaticCredentials | ProfileCredentials, Field(discriminator="source")
]

_FLAT_KEYS = ("access_key_id", "secret_access_key", "session_token")


class S3Config(StrictModel):
    """How to reach one S3 (or S3-compatible) object store; every key optional."""

    endpoint_url: str | None = None
    region: str | None = None
    credentials: Credentials = EnvCredentials.model_construct()
    addressing_style: Literal["auto", "path", "virtual"] | None = None
    max_attempts: int = Field(default=5, ge=1, le=100)
    connect_timeout: float = Field(default=10.0, ge=0)
    read_timeout: float = Field(default=60.0, ge=0)
    multipart_threshold: int = Field(default=16 * MIB, ge=1)
    multipart_chunk: int = Field(default=8 * MIB, ge=MIN_PART, le=MAX_PART)
    multipart_concurrency: int = Field(default=4, ge=1, le=256)
    max_pool_connections: int = Field(default=32, ge=1, le=4096)

    @model_validator(mode="before")
    @classmethod
    def _flat_credentials(cls, data: Any) -> Any:
        # The CLI's original shape (s3.access_key_id / s3.secret_access_key) means static credentials.
        if not isinstance(data, dict) or not any(k in data for k in _FLAT_KEYS):
            return data
        if "credentials" in data:
            raise ValueError("give either credentials or access_key_id/secret_access_key, not both")
        data = dict(data)
        static = {k: data.pop(k) for k in _FLAT_KEYS if k in data}
        data["credentials"] = {"source": "static", **static}
        return data

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[!-.0-~]+(/[!-~]*)?", value):
            raise ValueError("must be an http:// or https:// URL")
        if value is not None and redact_url(value) != value:
            # Shown as-is by check-config, reprs and connection errors: credentials go in ``credentials``.
            raise ValueError("must not carry credentials (user:password@); use credentials instead")
        return value

    def settings(self, field: str = "s3") -> S3Settings:
        """The :class:`S3Settings` for this store; ``field`` is this section's key path (for errors).

        Static credentials are passed as they are; ``env`` leaves them to botocore's default chain;
        ``profile`` credentials are resolved here, once, from the shared AWS files (temporary
        credentials of an assume-role profile are therefore not refreshed: restart, or prefer ``env``).
        """
        creds = self.credentials
        access_key_id: str | None = None
        secret: str | None = None
        token: str | None = None
        if isinstance(creds, StaticCredentials):
            access_key_id = creds.access_key_id
            secret = creds.secret_access_key.get_secret_value()
            token = creds.session_token.get_secret_value() if creds.session_token is not None else None
        elif isinstance(creds, ProfileCredentials):
            access_key_id, secret, token = _profile_credentials(creds.profile, f"{field}.credentials.profile")
        return S3Settings(
            region=self.region,
            endpoint_url=self.endpoint_url,
            access_key_id=access_key_id,
            secret_access_key=secret,
            session_token=token,
            addressing_style=self.addressing_style,
            max_attempts=self.max_attempts,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            multipart_threshold=self.multipart_threshold,
            multipart_chunk=self.multipart_chunk,
            multipart_concurrency=self.multipart_concurrency,
            max_pool_connections=self.max_pool_connections,
        )


def _profile_credentials(profile: str, field: str) -> tuple[str, str, str | None]:
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile)
        found = session.get_credentials()
    except botocore.exceptions.ProfileNotFound:
        raise BadInputError("no such AWS profile", field=field) from None
    except botocore.exceptions.BotoCoreError as e:
        raise BadInputError(
            f"cannot resolve the AWS profile's credentials ({type(e).__name__})", field=field
        ) from None
    if found is None:
        raise BadInputError("the AWS profile has no credentials", field=field)
    frozen = found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        raise BadInputError("the AWS profile has no credentials", field=field)
    return frozen.access_key, frozen.secret_key, frozen.token


class CoreSettings(StrictModel):
    """What opening the core of one region takes (see the module docstring and ``open_core``)."""

    kv_url: SecretStr | None = None
    s3: S3Config = S3Config.model_construct()
    cache_dir: Path | None = None
    cache_max_bytes: int = Field(default=DEFAULTS.cache_max_bytes, gt=0)
    table_cache_bytes: int = Field(default=DEFAULTS.table_cache_bytes, ge=1 << 20)
    # Largest table block accepted when reading ranges/metaranges (see CoreOptions).
    table_max_block_bytes: int = Field(default=DEFAULTS.table_max_block_bytes, ge=1 << 20, le=1 << 31)
    # Leftover .lakefs-tmp-* files of local namespaces older than this are swept (writers killed
    # mid-write); a writer stalled longer than this on another host loses its temporary file.
    temp_sweep_grace_seconds: float = Field(default=DEFAULT_TEMP_SWEEP_GRACE_SECONDS, ge=0)
    commit_attempts: int = Field(default=DEFAULTS.commit_attempts, ge=1)
    cleanup_grace_seconds: float = Field(default=DEFAULTS.cleanup_grace_seconds, ge=0)
    # Repositories created through this core journal their uploads and consumed staging tokens, so
    # the GC daemon's hard-delete reconciler can remove uncommitted garbage within minutes (issue 11).
    # Turn it off for a KV store that a real lakeFS also writes to: lakeFS's commits leave no journal.
    hard_delete_journal: bool = DEFAULTS.hard_delete_journal
    # A REST import's status record (lakefs_core.repos.import_status): refreshed this often by the
    # server process running the import; reported failed once not refreshed for the stale timeout,
    # which must span several refreshes so that one slow refresh does not fail a live import.
    import_heartbeat_seconds: float = Field(
        default=DEFAULTS.import_heartbeat_seconds, gt=0, allow_inf_nan=False
    )
    import_stale_seconds: float = Field(default=DEFAULTS.import_stale_seconds, gt=0, allow_inf_nan=False)
    # Listings page through the cached children of committed directories (lakefs_core.repos.listing):
    # at most this many children per process, about 600 bytes an object; 0 turns the cache off.
    listing_cache_children: int = Field(default=DEFAULTS.listing_cache_children, ge=0)

    @model_validator(mode="after")
    def _stale_spans_heartbeats(self) -> CoreSettings:
        if self.import_stale_seconds < MIN_HEARTBEATS_PER_STALE * self.import_heartbeat_seconds:
            raise ValueError(
                f"import_stale_seconds must be at least {MIN_HEARTBEATS_PER_STALE} times"
                " import_heartbeat_seconds"
            )
        return self

    def options(self, s3_key: str = "s3") -> CoreOptions:
        """The plain values that open the core (S3 credentials of a profile resolved here)."""
        return CoreOptions(
            kv_url=self.kv_url.get_secret_value() or None if self.kv_url is not None else None,
            s3=self.s3.settings(s3_key),
            cache_dir=self.cache_dir,
            cache_max_bytes=self.cache_max_bytes,
            table_cache_bytes=self.table_cache_bytes,
            table_max_block_bytes=self.table_max_block_bytes,
            temp_sweep_grace_seconds=self.temp_sweep_grace_seconds,
            commit_attempts=self.commit_attempts,
            cleanup_grace_seconds=self.cleanup_grace_seconds,
            hard_delete_journal=self.hard_delete_journal,
            import_heartbeat_seconds=self.import_heartbeat_seconds,
            import_stale_seconds=self.import_stale_seconds,
            listing_cache_children=self.listing_cache_children,
        )


def sqlite_dir_problem(url: str) -> str | None:
    """Why a SQLite file URL cannot be opened without creating directories (``None``: it can, or it
    is not a SQLite file URL). The message shows the directory (a path is no secret)."""
    if not url.lower().startswith("sqlite"):
        return None
    from lakefs_core.sqlite_files import sqlite_database

    try:
        database = sqlite_database(url.split("?", 1)[0])  # parameters: the opener checks them
    except BadInputError:
        return None  # not a SQLite file URL: the opener reports it with its own message
    if database.startswith("file:"):
        return None
    parent = os.path.dirname(os.path.abspath(database))
    if not os.path.isdir(parent):
        return f"directory {parent} of the SQLite database does not exist"
    return None


def path_problems(
    sqlite_urls: Iterable[tuple[str, object]], directories: Iterable[tuple[str, object]] = ()
) -> list[tuple[str, str]]:
    """``(key, problem)`` for every SQLite URL whose directory is missing and every directory that
    cannot be created, checked without creating anything. Values may be raw (``str``) or validated
    (:class:`SecretStr`, :class:`Path`); other types are skipped (the schema reports them)."""
    problems: list[tuple[str, str]] = []
    for key, url in sqlite_urls:
        text = url.get_secret_value() if isinstance(url, SecretStr) else url
        problem = sqlite_dir_problem(text) if isinstance(text, str) else None
        if problem is not None:
            problems.append((key, problem))
    for key, where in directories:
        if isinstance(where, (str, Path)) and str(where):
            problem = directory_problem(Path(where))
            if problem is not None:
                problems.append((key, problem))
    return problems


def directory_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (or be created as) a directory, checked without creating anything."""
    probe = Path(os.path.abspath(path))
    if probe.exists():
        return None if probe.is_dir() else f"{probe} exists and is not a directory"
    for parent in probe.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"cannot create {probe}: {parent} is not a directory"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"cannot create {probe}: {parent} is not writable"
            return None
    return None


class AuthEncryptConfig(StrictModel):
    """``auth.encrypt``: the secret every secret access key is encrypted with at rest (lakeFS's
    ``auth.encrypt.secret_key``: the same value lets lakeFS and this project read each other's keys)."""

    secret_key: NonEmptySecret | None = None


class AuthConfig(StrictModel):
    """``auth``: lakeFS's auth settings that the CLI and the servers share."""

    encrypt: AuthEncryptConfig = AuthEncryptConfig.model_construct()

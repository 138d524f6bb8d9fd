"""The mirroring daemon's configuration: one YAML file plus ``LAKEFS_MIRROR__...`` environment overrides.

Every region runs one daemon with the same file (only ``region`` differs, usually set from the
environment as ``LAKEFS_MIRROR__REGION=eu-central-1``). Keys::

    region: us-east-1                 # this daemon's region: a key of ``regions``
    regions:                          # every region taking part, by name (lower case a-z, 0-9, '-')
      us-east-1:
        kv_url: dynamodb://lakefs?region=us-east-1      # the region's lakeFS KV store (open_kv URL)
        s3:                           # how to reach the region's S3 (all optional; the shared
          endpoint_url: null          # schema lakefs_core.settings.S3Config, also the CLI's and GC's)
          region: us-east-1           # e.g. endpoint_url: http://127.0.0.1:9000 for MinIO / moto
          credentials: {source: env}  # env (botocore default chain) | static | profile
          #   {source: static, access_key_id: AKIA..., secret_access_key: ..., session_token: ...}
          #   {source: profile, profile: mirror}
          # addressing_style, max_attempts, connect_timeout, read_timeout, multipart_*: see S3Config
        local_roots: []               # local directories holding this region's local:// namespaces
        # any other key of the core's settings (lakefs_core.settings.CoreSettings): commit_attempts,
        # cleanup_grace_seconds, hard_delete_journal, temp_sweep_grace_seconds, table_max_block_bytes
    mirrors_db_url: postgresql+asyncpg://user:pw@host/mirrors  # shared by ALL regions
    data_dir: /var/lib/lakefs-open    # optional: ${data_dir} in any value is replaced by it
    listen: 127.0.0.1:8008            # host:port of the HTTP API ([::1]:8008 for IPv6)
    access_keys:                      # HTTP basic-auth credentials of the API (at least one)
      - {access_key_id: AKIAMIRROR, secret_access_key: ...}
    poll_interval_seconds: 5          # how often source branch heads are polled
    negative_cooldown_seconds: 5      # an object found missing is not probed again before this
    error_cooldown_seconds: 30        # a failed branch (or mirror) waits this long to retry (0: at once)
    error_cooldown_max_seconds: 600   # doubling per failure in a row up to this, with jitter
    active_copy_grace_seconds: 600    # mode "active": copy objects replication has not delivered
    full_pass_seconds: 60             # a caught-up mirror whose source did not move is skipped, but
                                      # visited at least this often (lakefs_mirror.quiet)
    lease_ttl_seconds: 30             # per-region leadership lease (one active daemon per region)
    workers: 8                        # concurrent presence checks during validation
    presence_cache_entries: 1000000   # object-presence cache size (entries)
    table_cache_bytes: 536870912      # range/metarange cache size (bytes)
    table_max_block_bytes: 67108864   # largest table block accepted from any file (hostile-file bound)
    temp_sweep_grace_seconds: 3600    # leftover temp files of local namespaces older than this are swept
    pass_timeout_seconds: 900         # a pass running longer is hung (/_health 503, watchdog unfed);
                                      # ``lakefs-mirror run --pass-timeout`` overrides it
    state_dir: null                   # local directory for persisted caches (null: memory only)
    log_level: INFO

A region is the core's settings schema (:class:`~lakefs_core.settings.CoreSettings`, as GC's ``core``
and the CLI's file) plus ``local_roots``; ``kv_url`` is required. Its object store is ``s3``, the one
name every entry point uses; ``object_store``, this daemon's earlier name for it, is still accepted
as a deprecated alias (a warning is logged; given beside ``s3``, ``s3``'s keys win). The table cache
is shared by the regions: ``table_cache_bytes`` is a top-level key, not a region's (nor are
``cache_dir``/``cache_max_bytes``); ``temp_sweep_grace_seconds`` and ``table_max_block_bytes`` at the
top level apply to every region that does not set its own.

Environment overrides follow :mod:`lakefs_core.config` (``LAKEFS_MIRROR__LISTEN=0.0.0.0:8008``,
``LAKEFS_MIRROR__REGIONS__US-EAST-1__S3__REGION=us-east-1``); in addition a numeric
segment addresses a list item, so secrets can stay out of the file:
``LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY=...``. An override may not add a list item
beyond the end + 1.

Validation reports every problem at once (:class:`~lakefs_core.errors.ConfigError`, exit 9), each
naming the exact key path in the file (``regions.us-east-1.s3.credentials.secret_access_key``);
``lakefs-mirror check-config`` adds what would stop the start-up (a SQLite directory missing,
``state_dir`` not creatable: :func:`startup_problems`, exit 16 from ``run``). Secrets
(``secret_access_key``, ``session_token``, ``mirrors_db_url``, ``kv_url``) are pydantic
:class:`~pydantic.SecretStr`: never shown by ``repr``/``str`` and never repeated in error messages.
The two SQL URLs are kept secret because they may carry a password; ``mirrors_db_url_display`` shows
the URL with its password masked.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator, model_validator
from sqlalchemy.engine import make_url

from lakefs_core.block.s3_settings import S3Settings
from lakefs_core.config import ConfigReport, Problem, inspect_config, load_config
from lakefs_core.errors import BadInputError
from lakefs_core.format.sstable.footer import DEFAULT_MAX_BLOCK_BYTES
from lakefs_core.redact import redact_url
from lakefs_core.service.config import (
    AccessKey,
    DaemonConfig,
    NonNegativeSeconds,
    SqlUrl,
    normalize_db_url,
)
from lakefs_core.settings import (
    DEFAULT_TEMP_SWEEP_GRACE_SECONDS,
    CoreSettings,
    Credentials,
    EnvCredentials,
    ProfileCredentials,
    S3Config,
    StaticCredentials,
    path_problems,
)

__all__ = [
    "ENV_PREFIX",
    "AccessKey",
    "Credentials",
    "EnvCredentials",
    "MirrorConfig",
    "ObjectStoreConfig",
    "ProfileCredentials",
    "RegionConfig",
    "StaticCredentials",
    "inspect_mirror_config",
    "load_mirror_config",
    "normalize_db_url",
    "startup_problems",
]

ENV_PREFIX = "LAKEFS_MIRROR"

log = logging.getLogger(__name__)

_REGION_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_KV_SCHEMES = frozenset(
    {"memory", "sqlite", "sqlite+aiosqlite", "postgresql", "postgres", "postgresql+asyncpg", "dynamodb"}
)
DEPRECATED_S3_KEY = "object_store"  # the region's object store before it took the core's name, s3
_SHARED_CACHE_KEYS = ("table_cache_bytes", "cache_dir", "cache_max_bytes")

# The S3 schema under its earlier name here (the same model as every entry point's ``s3``).
ObjectStoreConfig = S3Config


class RegionConfig(CoreSettings):
    """One region taking part in mirroring: the core's settings (``kv_url`` required) plus
    ``local_roots`` (see the module docstring for ``s3`` and its deprecated alias ``object_store``)."""

    kv_url: SecretStr
    s3: S3Config = Field(default=S3Config(), validation_alias=AliasChoices("s3", DEPRECATED_S3_KEY))
    local_roots: list[Path] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _region_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        shared = [k for k in _SHARED_CACHE_KEYS if k in data]
        if shared:
            keys = ", ".join(shared)
            raise ValueError(
                f"{keys}: the regions share one table cache (table_cache_bytes at the top level)"
            )
        if DEPRECATED_S3_KEY not in data:
            return data
        log.warning("the region key %r is deprecated: name the object store s3", DEPRECATED_S3_KEY)
        old, new = data[DEPRECATED_S3_KEY], data.get("s3")
        if new is None or not isinstance(old, Mapping) or not isinstance(new, Mapping):
            return data  # one of them (the alias is read), or a type error the schema names
        merged = {k: v for k, v in data.items() if k != DEPRECATED_S3_KEY}
        merged["s3"] = {**old, **new}  # an s3 override (environment) wins over the file's old name
        return merged

    @field_validator("kv_url")
    @classmethod
    def _kv_url(cls, value: SecretStr) -> SecretStr:
        text = value.get_secret_value()
        scheme = text.split("://", 1)[0].lower() if "://" in text else ""
        if scheme not in _KV_SCHEMES:
            raise ValueError(
                "must be a KV store URL: memory://, sqlite:///path, postgresql://..., dynamodb://TABLE?..."
            )
        return value

    @field_validator("local_roots")
    @classmethod
    def _absolute(cls, value: list[Path]) -> list[Path]:
        for root in value:
            if not root.is_absolute():
                raise ValueError("local roots must be absolute paths")
        return value


class MirrorConfig(DaemonConfig):
    """The whole configuration of one region's mirroring daemon (see the module docstring): the
    shared daemon keys of :class:`~lakefs_core.service.config.DaemonConfig` plus its own."""

    # ``regions`` is declared (so validated) first: ``region`` is checked against it.
    regions: dict[str, RegionConfig] = Field(min_length=1)
    region: str
    mirrors_db_url: SqlUrl
    negative_cooldown_seconds: NonNegativeSeconds = 5.0
    error_cooldown_seconds: NonNegativeSeconds = 30.0
    error_cooldown_max_seconds: NonNegativeSeconds = 600.0
    active_copy_grace_seconds: NonNegativeSeconds = 600.0
    full_pass_seconds: NonNegativeSeconds = 60.0
    workers: int = Field(default=8, ge=1, le=1024)
    presence_cache_entries: int = Field(default=1_000_000, ge=0)
    table_cache_bytes: int = Field(default=512 * 1024 * 1024, ge=0)
    table_max_block_bytes: int = Field(default=DEFAULT_MAX_BLOCK_BYTES, ge=1 << 20, le=1 << 31)
    temp_sweep_grace_seconds: NonNegativeSeconds = DEFAULT_TEMP_SWEEP_GRACE_SECONDS
    state_dir: Path | None = None

    @field_validator("regions")
    @classmethod
    def _region_names(cls, value: dict[str, RegionConfig]) -> dict[str, RegionConfig]:
        for name in value:
            if not _REGION_NAME.fullmatch(name):
                raise ValueError(
                    "region names are 1-63 characters of lower-case a-z, 0-9 and '-', "
                    "starting with a letter or digit"
                )
        return value

    @field_validator("region")
    @classmethod
    def _own_region_is_configured(cls, value: str, info: ValidationInfo) -> str:
        regions = info.data.get("regions")
        if regions is not None and value not in regions:
            raise ValueError("must name one of the configured regions")
        return value

    # -- derived values ---------------------------------------------------------------------------

    @property
    def this_region(self) -> RegionConfig:
        return self.regions[self.region]

    @property
    def mirrors_db_url_display(self) -> str:
        """The mirrors database URL with its password masked (for logs)."""
        return redact_url(
            make_url(self.mirrors_db_url.get_secret_value()).render_as_string(hide_password=True)
        )

    def region_config(self, region: str) -> RegionConfig:
        try:
            return self.regions[region]
        except KeyError:
            raise BadInputError(f"region {region!r} is not configured", field="region") from None

    def s3_settings(self, region: str | None = None) -> S3Settings:
        """The :class:`S3Settings` reaching ``region``'s object store (default: this daemon's region);
        see :meth:`lakefs_core.settings.S3Config.settings` (profile credentials resolve here)."""
        name = self.region if region is None else region
        return self.region_config(name).s3.settings(f"regions.{name}.s3")

    def core_settings(self, region: str | None = None) -> CoreSettings:
        """What :func:`lakefs_core.wiring.open_core` takes to open ``region``'s core: the region's own
        settings, the top-level ``temp_sweep_grace_seconds``/``table_max_block_bytes`` where the region
        sets none, and the shared table cache's size."""
        name = self.region if region is None else region
        conf = self.region_config(name)
        own = conf.model_fields_set
        values = {k: getattr(conf, k) for k in CoreSettings.model_fields}
        values["table_cache_bytes"] = max(self.table_cache_bytes, 1 << 20)
        for key in ("temp_sweep_grace_seconds", "table_max_block_bytes"):
            if key not in own:
                values[key] = getattr(self, key)
        return CoreSettings(**values)


# -- loading ----------------------------------------------------------------------------------------


def load_mirror_config(path: Path | str | None, env: Mapping[str, str] | None = None) -> MirrorConfig:
    """Load ``path`` (YAML; ``None``: nothing), apply ``LAKEFS_MIRROR__...`` overrides from ``env``.

    ``env`` is usually ``os.environ``; ``None`` applies no overrides. Raises
    :class:`~lakefs_core.errors.ConfigError` naming the exact key path of every problem.
    """
    return load_config(
        MirrorConfig,
        Path(path) if path is not None else None,
        env=env,
        env_prefix=ENV_PREFIX,
        free_mappings=_FREE,
    )


_FREE = frozenset({("regions",)})


def startup_problems(data: Mapping[str, Any]) -> list[Problem]:
    """What would stop a daemon starting with this (raw or dumped) configuration, checked without
    creating anything: a SQLite ``regions.<name>.kv_url`` / ``mirrors_db_url`` whose directory does
    not exist, a ``state_dir`` that cannot be created. Values of the wrong type are skipped (the
    schema reports them)."""
    regions = data.get("regions")
    urls: list[tuple[str, Any]] = []
    if isinstance(regions, Mapping):
        urls += [
            (f"regions.{n}.kv_url", r.get("kv_url")) for n, r in regions.items() if isinstance(r, Mapping)
        ]
    urls.append(("mirrors_db_url", data.get("mirrors_db_url")))
    return path_problems(urls, [("state_dir", data.get("state_dir"))])


def config_startup_problems(config: MirrorConfig) -> list[Problem]:
    """:func:`startup_problems` of a validated configuration."""
    data: dict[str, Any] = {
        "regions": {n: {"kv_url": r.kv_url} for n, r in config.regions.items()},
        "mirrors_db_url": config.mirrors_db_url,
        "state_dir": config.state_dir,
    }
    return startup_problems(data)


def inspect_mirror_config(path: Path | str | None, env: Mapping[str, str] | None) -> ConfigReport:
    """Every problem of a configuration (schema and start-up) at once, for ``check-config``."""
    return inspect_config(
        MirrorConfig,
        Path(path) if path is not None else None,
        env=env,
        env_prefix=ENV_PREFIX,
        free_mappings=_FREE,
        environment_checks=startup_problems,
    )


def config_json_schema() -> dict[str, Any]:
    """The JSON schema of the configuration file (for documentation and editors)."""
    schema: dict[str, Any] = MirrorConfig.model_json_schema()
    return schema

"""lakefs-server's configuration: one YAML file plus ``LAKEFS_SERVER__...`` environment overrides.

Every instance behind a load balancer runs the same file; nothing in the server is per-instance
state but caches. Keys::

    core:                             # the core: lakefs_core.settings.CoreSettings, as the CLI's,
      kv_url: postgresql://lakefs@db/lakefs              # GC's and the mirror's
      s3: {endpoint_url: null, region: us-east-1, credentials: {source: env}}
      import_heartbeat_seconds: 1.0   # a running REST import refreshes its status this often
      import_stale_seconds: 60.0      # a status not refreshed this long reads failed (>= 5 beats)
      listing_cache_children: 100000  # committed directories' children cached for listings (0: off)
    auth:
      encrypt: {secret_key: ...}      # lakeFS's auth.encrypt.secret_key (required): the same value
                                      # lets lakeFS and this server read each other's credentials
      cache_seconds: 20               # users, credentials and policies cached this long (0: off)
    gateway:
      listen: 127.0.0.1:8000          # the S3 listener (and lakeFS's REST API under /api/v1)
      domain_names: [s3.local.lakefs.io]   # virtual-host style: {repo}.{domain}/{ref}/{path}
      region: us-east-1               # the region S3 clients sign for (GetBucketLocation's answer)
      tls: {cert_file: null, key_file: null}   # HTTPS when both are set
      multipart_expiry_seconds: 604800         # multipart uploads older than this are aborted
    listen: 127.0.0.1:8010            # the admin listener: /_health, /_ready, /metrics, /openapi.json
    poll_interval_seconds: 60         # how often the expired-multipart sweep runs (the daemon's step)
    pass_timeout_seconds: 900
    log_level: INFO

``access_keys`` (the platform's basic-auth keys) are optional here: the admin listener serves
public routes only, and the S3 listener authenticates with lakeFS's credentials (``lakefs-core auth``).

Validation reports every problem at once (:class:`~lakefs_core.errors.ConfigError`, exit 9), each
naming its key path; ``lakefs-server check-config`` adds what would stop the start-up (a SQLite
directory missing; exit 16 from ``run``). Secrets are :class:`~pydantic.SecretStr`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from lakefs_core.config import ConfigReport, Problem, StrictModel, inspect_config, load_config
from lakefs_core.service.config import AccessKey, DaemonConfig, PositiveSeconds, check_listen
from lakefs_core.settings import AuthEncryptConfig, CoreSettings, path_problems

__all__ = [
    "ENV_PREFIX",
    "GatewayConfig",
    "ServerAuthConfig",
    "ServerConfig",
    "TlsConfig",
    "inspect_server_config",
    "load_server_config",
]

ENV_PREFIX = "LAKEFS_SERVER"

# A DNS name (lower case; the Host header is compared case-insensitively).
_DOMAIN = re.compile(
    r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class TlsConfig(StrictModel):
    """HTTPS on the S3 listener: both files set, or neither."""

    cert_file: Path | None = None
    key_file: Path | None = None

    @model_validator(mode="after")
    def _both(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class GatewayConfig(StrictModel):
    """The S3 listener."""

    listen: str = "127.0.0.1:8000"
    domain_names: list[str] = Field(default_factory=list)
    region: str = "us-east-1"
    tls: TlsConfig = TlsConfig()
    multipart_expiry_seconds: PositiveSeconds = 7 * 24 * 3600.0

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return check_listen(value)

    @field_validator("domain_names")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        out = []
        for name in value:
            lowered = name.strip().lower().rstrip(".")
            if not _DOMAIN.fullmatch(lowered):
                raise ValueError(f"{name!r} is not a DNS name")
            out.append(lowered)
        return out

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.fullmatch(value):
            raise ValueError("must be an AWS-style region name (a-z, 0-9, '-')")
        return value

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])


class ServerAuthConfig(StrictModel):
    """``auth``: lakeFS's ``auth.encrypt`` plus the auth cache."""

    encrypt: AuthEncryptConfig = AuthEncryptConfig()
    cache_seconds: float = Field(default=20.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _secret(self) -> ServerAuthConfig:
        if self.encrypt.secret_key is None:
            raise ValueError("encrypt.secret_key is required (lakeFS's auth.encrypt.secret_key)")
        return self


class ServerConfig(DaemonConfig):
    """The whole configuration of a lakefs-server (see the module docstring)."""

    core: CoreSettings
    auth: ServerAuthConfig
    gateway: GatewayConfig = GatewayConfig()
    listen: str = "127.0.0.1:8010"
    access_keys: list[AccessKey] = Field(default_factory=list)
    poll_interval_seconds: PositiveSeconds = 60.0


def load_server_config(path: Path | str | None, env: Mapping[str, str] | None = None) -> ServerConfig:
    """Load ``path`` (YAML) with ``LAKEFS_SERVER__...`` overrides; ConfigError lists every problem."""
    return load_config(ServerConfig, Path(path) if path is not None else None, env=env, env_prefix=ENV_PREFIX)


def startup_problems(data: Mapping[str, Any]) -> list[Problem]:
    """What would stop the server starting, checked without creating anything."""
    core = data.get("core")
    kv_url = core.get("kv_url") if isinstance(core, Mapping) else None
    return path_problems([("core.kv_url", kv_url)])


def config_startup_problems(config: ServerConfig) -> list[Problem]:
    return startup_problems({"core": {"kv_url": config.core.kv_url}})


def inspect_server_config(path: Path | str | None, env: Mapping[str, str] | None) -> ConfigReport:
    """Every problem of a configuration (schema and start-up) at once, for ``check-config``."""
    return inspect_config(
        ServerConfig,
        Path(path) if path is not None else None,
        env=env,
        env_prefix=ENV_PREFIX,
        environment_checks=startup_problems,
    )

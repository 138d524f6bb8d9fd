"""The configuration every daemon shares: :class:`DaemonConfig`, which ``GCConfig`` and
``MirrorConfig`` extend.

Keys (each daemon sets its own defaults by redeclaring a field; the validators stay)::

    listen: 127.0.0.1:8008            # host:port of the HTTP API ([::1]:8008 for IPv6)
    access_keys:                      # HTTP basic-auth credentials of the API (at least one, ids unique)
      - {access_key_id: AKIA..., secret_access_key: ...}
    poll_interval_seconds: 5          # the loop's interval between passes
    pass_timeout_seconds: 900         # a pass running longer is hung (/_health 503, watchdog unfed)
    lease_ttl_seconds: 30             # the daemon's leases (region leadership, repositories)
    log_level: INFO

``listen`` is checked by :func:`check_listen` and the access keys by :func:`check_access_keys`;
:data:`SqlUrl` is a database URL normalised to its async driver (both daemons' ``mirrors_db_url``).
The log format is a command-line choice (``--log-format``, :func:`lakefs_core.service.run.run_daemon`).
Secrets are :class:`~pydantic.SecretStr`: never shown by ``repr``/``str`` or in error messages.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator

from lakefs_core.config import StrictModel
from lakefs_core.service.daemon import DEFAULT_PASS_TIMEOUT
from lakefs_core.settings import NonEmptySecret

__all__ = [
    "AccessKey",
    "DaemonConfig",
    "LogLevel",
    "NonNegativeSeconds",
    "PositiveSeconds",
    "SqlUrl",
    "check_access_keys",
    "check_listen",
    "normalize_db_url",
]

PositiveSeconds = Annotated[float, Field(gt=0)]
NonNegativeSeconds = Annotated[float, Field(ge=0)]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


def normalize_db_url(url: str) -> str:
    """Point a database URL at its async driver (``sqlite:///p`` -> ``sqlite+aiosqlite:///p``,
    ``postgres(ql)://`` -> ``postgresql+asyncpg://``). Raises :class:`ValueError` without the URL."""
    from lakefs_core.sqlengine import normalize_sql_url

    return normalize_sql_url(url).render_as_string(hide_password=False)


def _normalized(value: SecretStr) -> SecretStr:
    return SecretStr(normalize_db_url(value.get_secret_value()))


# A SQL database URL (SQLite or PostgreSQL), held secret (it may carry a password), normalised.
SqlUrl = Annotated[SecretStr, AfterValidator(_normalized)]

_HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")
_PORT = re.compile(r"[0-9]{1,5}")  # not str.isdigit(): it accepts other scripts' digits


class AccessKey(StrictModel):
    """One HTTP basic-auth credential of a daemon's API."""

    access_key_id: str = Field(min_length=1, max_length=256, pattern=r"^[^:\s]+$")
    secret_access_key: NonEmptySecret


def check_listen(value: str) -> str:
    """A daemon's ``listen`` value: ``host:port`` (``[::1]:8008`` for IPv6), port 0-65535."""
    host, sep, port = value.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not _PORT.fullmatch(port) or not 0 <= int(port) <= 65535:
        raise ValueError("must be host:port (e.g. 127.0.0.1:8008 or [::1]:8008)")
    return value


def check_access_keys(value: list[AccessKey]) -> list[AccessKey]:
    """Access key ids are unique (two secrets for one id would make authentication ambiguous)."""
    ids = [k.access_key_id for k in value]
    if len(set(ids)) != len(ids):
        raise ValueError("access key ids must be unique")
    return value


class DaemonConfig(StrictModel):
    """What every daemon's configuration has (see the module docstring)."""

    listen: str = "127.0.0.1:8008"
    access_keys: list[AccessKey] = Field(min_length=1)
    poll_interval_seconds: PositiveSeconds = 5.0
    pass_timeout_seconds: PositiveSeconds = DEFAULT_PASS_TIMEOUT
    lease_ttl_seconds: PositiveSeconds = 30.0
    log_level: LogLevel = "INFO"

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return check_listen(value)

    @field_validator("access_keys")
    @classmethod
    def _unique_keys(cls, value: list[AccessKey]) -> list[AccessKey]:
        return check_access_keys(value)

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])

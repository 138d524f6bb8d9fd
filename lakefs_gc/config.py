"""The GC daemon's configuration: one YAML file plus ``LAKEFS_GC__...`` environment overrides.

One daemon (or several, for high availability: a KV lease per repository keeps them apart) serves
the repositories of one region's core. Keys::

    region: us-east-1                 # a label for metrics and /_health (default "default")
    core:                             # the region's core: lakefs_core.settings.CoreSettings, as in
      kv_url: sqlite:////var/lib/lakefs/kv.sqlite3       # the lakefs-core CLI configuration
      s3: {endpoint_url: null, region: us-east-1, credentials: {source: env}}
    listen: 127.0.0.1:8009            # host:port of the HTTP API
    access_keys:                      # HTTP basic-auth credentials (at least one)
      - {access_key_id: AKIAGC, secret_access_key: ...}
    mirrors_db_url: null              # the mirrors database: every mirror's head and candidate is
                                      # pinned; unreachable -> the run aborts (null: no mirrors)
    repositories:                     # which repositories this daemon collects (fnmatch patterns)
      include: ["*"]
      exclude: []
    schedule:                         # every repository's retention GC, unless overridden
      interval_seconds: 86400         # a run starts this long after the last one finished
      jitter_fraction: 0.1            # +/- this fraction of the interval, per repository and run
      mode: full                      # full (mark + sweep) | mark | dry-run
      min_age_seconds: 86400          # objects younger than this are never candidates
      tags: pin                       # pin (tagged commits are kept) | ignore (lakeFS's behaviour)
      enabled: true
    overrides:                        # per repository name, any subset of ``schedule``'s keys
      big-repo: {interval_seconds: 604800}
    spark:
      mode: submit                    # submit: the mark runs as a spark-submit child process in its
                                      # own process group; local: PySpark in the daemon's process;
                                      # lite: the same functions in-process without a JVM
      master: local[*]
      conf: {}                        # extra --conf key=value pairs for spark-submit / the session
      partitions: null                # Spark partitions of the mark (null: derived from the input)
      job_timeout_seconds: 21600
    hard_delete:                      # the online reconciler of the upload journal (issue 11)
      enabled: true
      interval_seconds: 300
      grace_seconds: 3600             # overwritten/deleted uploads stay readable this long
      pending_timeout_seconds: 86400  # an upload not staged by then fails and is garbage (>= 3600)
      staged_backoff_seconds: 600     # a due intent still staged is looked at again this long after
                                      # (doubling per look, up to 6 h): its object, overwritten or
                                      # deleted meanwhile, is removed that much after the grace
      max_intents_per_pass: 100000
    max_concurrent_runs: 1            # GC runs at once (each holds its repository's lease)
    run_records_kept: 30              # run records kept in the KV per repository (newest runs);
                                      # older ones are retired after each run (docs/gc.md)
    lease_ttl_seconds: 120
    poll_interval_seconds: 30         # how often the daemon looks for due work
    pass_timeout_seconds: 900         # a scheduling pass longer than this is hung (runs are not passes)
    workdir: null                     # private scratch directory (spills, the Spark child's files)
    clock_offset_seconds: 0           # every time of a run = the clock + this (demos and tests only)
    log_level: INFO

Validation reports every problem at once (:class:`~lakefs_core.errors.ConfigError`, exit 9), each
naming its key path; ``lakefs-gc check-config`` adds what would stop the start-up (a SQLite
directory missing, ``workdir`` not creatable; exit 16 from ``run``). Secrets (``core.kv_url``, the
S3 credentials, ``mirrors_db_url``, the access keys' secrets) are :class:`~pydantic.SecretStr`.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from lakefs_core.compute.session import MASTER_PATTERN
from lakefs_core.config import ConfigReport, Problem, StrictModel, inspect_config, load_config
from lakefs_core.repos.journal import MIN_PENDING_TIMEOUT_SECONDS
from lakefs_core.service.config import DaemonConfig, NonNegativeSeconds, PositiveSeconds, SqlUrl
from lakefs_core.settings import CoreSettings, path_problems
from lakefs_gc.clock import MAX_OFFSET_SECONDS
from lakefs_gc.runs.retention import DEFAULT_RUNS_KEPT

__all__ = [
    "ENV_PREFIX",
    "GCConfig",
    "HardDeleteConfig",
    "RepositorySelection",
    "Schedule",
    "ScheduleOverride",
    "SparkConfig",
    "inspect_gc_config",
    "load_gc_config",
]

ENV_PREFIX = "LAKEFS_GC"
_PATTERN = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9*?\[\]!_-]+$")]


class Schedule(StrictModel):
    """When and how a repository's retention GC runs."""

    interval_seconds: PositiveSeconds = 86400.0
    jitter_fraction: float = Field(default=0.1, ge=0, le=0.5)
    mode: Literal["full", "mark", "dry-run"] = "full"
    min_age_seconds: NonNegativeSeconds = 86400.0
    tags: Literal["pin", "ignore"] = "pin"
    enabled: bool = True


class ScheduleOverride(StrictModel):
    """Any subset of :class:`Schedule`'s keys, for one repository."""

    interval_seconds: PositiveSeconds | None = None
    jitter_fraction: float | None = Field(default=None, ge=0, le=0.5)
    mode: Literal["full", "mark", "dry-run"] | None = None
    min_age_seconds: NonNegativeSeconds | None = None
    tags: Literal["pin", "ignore"] | None = None
    enabled: bool | None = None


class RepositorySelection(StrictModel):
    include: list[_PATTERN] = Field(default_factory=lambda: ["*"])
    exclude: list[_PATTERN] = Field(default_factory=list)

    def selects(self, repo_id: str) -> bool:
        if any(fnmatch.fnmatchcase(repo_id, p) for p in self.exclude):
            return False
        return any(fnmatch.fnmatchcase(repo_id, p) for p in self.include)


class SparkConfig(StrictModel):
    mode: Literal["submit", "local", "lite"] = "submit"
    master: str = Field(default="local[*]", min_length=1, max_length=512, pattern=MASTER_PATTERN)
    conf: dict[str, str] = Field(default_factory=dict)
    partitions: int | None = Field(default=None, ge=1, le=100_000)
    job_timeout_seconds: PositiveSeconds = 6 * 3600.0

    @field_validator("conf")
    @classmethod
    def _conf(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not key.startswith("spark.") or any(c.isspace() or c == "=" for c in key):
                raise ValueError(f"{key!r}: Spark configuration keys start with 'spark.' (no '=' or spaces)")
            if "\n" in item or "\x00" in item:
                raise ValueError(f"{key!r}: values are single-line")
        return value


class HardDeleteConfig(StrictModel):
    """The reconciler of the upload journal. Its times decide when an intent is looked at, never
    whether an upload in flight wins (uploads and the reconciler settle intents by compare-and-swap,
    :mod:`lakefs_core.repos.journal`), so no grace is unsound; a pending timeout below the journal's
    minimum fails every upload slower than it and is refused."""

    enabled: bool = True
    interval_seconds: PositiveSeconds = 300.0
    grace_seconds: NonNegativeSeconds = 3600.0
    pending_timeout_seconds: NonNegativeSeconds = 86400.0
    staged_backoff_seconds: NonNegativeSeconds = 600.0
    max_intents_per_pass: int = Field(default=100_000, ge=1)

    @field_validator("grace_seconds", "pending_timeout_seconds", "staged_backoff_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value

    @field_validator("pending_timeout_seconds")
    @classmethod
    def _journal_minimum(cls, value: float) -> float:
        if value < MIN_PENDING_TIMEOUT_SECONDS:
            raise ValueError(
                f"{value:g} s is below the hard-delete journal's minimum pending timeout of "
                f"{MIN_PENDING_TIMEOUT_SECONDS:g} s: every upload slower than it would fail"
            )
        return value


class GCConfig(DaemonConfig):
    """The whole configuration of a GC daemon (see the module docstring): the shared daemon keys of
    :class:`~lakefs_core.service.config.DaemonConfig` with GC's defaults, plus its own."""

    region: str = Field(default="default", min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9-]*$")
    core: CoreSettings
    listen: str = "127.0.0.1:8009"
    mirrors_db_url: SqlUrl | None = None
    repositories: RepositorySelection = RepositorySelection()
    schedule: Schedule = Schedule()
    overrides: dict[str, ScheduleOverride] = Field(default_factory=dict)
    spark: SparkConfig = SparkConfig()
    hard_delete: HardDeleteConfig = HardDeleteConfig()
    max_concurrent_runs: int = Field(default=1, ge=1, le=64)
    run_records_kept: int = Field(default=DEFAULT_RUNS_KEPT, ge=1, le=100_000)
    lease_ttl_seconds: PositiveSeconds = 120.0
    poll_interval_seconds: PositiveSeconds = 30.0
    workdir: Path | None = None
    clock_offset_seconds: float = Field(
        default=0.0, ge=-MAX_OFFSET_SECONDS, le=MAX_OFFSET_SECONDS, allow_inf_nan=False
    )

    @field_validator("core")
    @classmethod
    def _kv_required(cls, value: CoreSettings) -> CoreSettings:
        if value.kv_url is None:
            raise ValueError("core.kv_url is required: the daemon serves an existing core")
        return value

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    def schedule_of(self, repo_id: str) -> Schedule:
        """The repository's schedule: ``schedule`` with its override's keys applied."""
        override = self.overrides.get(repo_id)
        if override is None:
            return self.schedule
        return self.schedule.model_copy(update=override.model_dump(exclude_none=True))


_FREE = frozenset({("overrides",), ("spark", "conf")})


def load_gc_config(path: Path | str | None, env: Mapping[str, str] | None = None) -> GCConfig:
    """Load ``path`` (YAML), apply ``LAKEFS_GC__...`` overrides; :class:`ConfigError` lists every problem."""
    return load_config(
        GCConfig,
        Path(path) if path is not None else None,
        env=env,
        env_prefix=ENV_PREFIX,
        free_mappings=_FREE,
    )


def startup_problems(data: Mapping[str, Any]) -> list[Problem]:
    """What would stop the daemon starting, checked without creating anything."""
    core = data.get("core")
    kv_url = core.get("kv_url") if isinstance(core, Mapping) else None
    urls = [("core.kv_url", kv_url), ("mirrors_db_url", data.get("mirrors_db_url"))]
    return path_problems(urls, [("workdir", data.get("workdir"))])


def config_startup_problems(config: GCConfig) -> list[Problem]:
    return startup_problems(
        {
            "core": {"kv_url": config.core.kv_url},
            "mirrors_db_url": config.mirrors_db_url,
            "workdir": config.workdir,
        }
    )


def inspect_gc_config(path: Path | str | None, env: Mapping[str, str] | None) -> ConfigReport:
    """Every problem of a configuration (schema and start-up) at once, for ``check-config``."""
    return inspect_config(
        GCConfig,
        Path(path) if path is not None else None,
        env=env,
        env_prefix=ENV_PREFIX,
        free_mappings=_FREE,
        environment_checks=startup_problems,
    )

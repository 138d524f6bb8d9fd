"""A SQLite + local core holding the mark tests' repository, and GC daemon configurations for it.

The repository is :func:`tests.gc.mark_support.build_repo`'s (its clock 40 days back); the daemon
runs with ``clock_offset_seconds`` = 2 days, so its retention 'now' is the mark tests' ``MARK_NOW``
and the garbage equals their oracle's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.service.lease import kv_lease
from tests.gc.mark_support import Built, Clock, build_repo, live_addresses, oracle_garbage, stored_objects

OFFSET_SECONDS = 2 * 86400.0
ACTIVE = ("c3", "d", "c1")  # the active commits of build_repo's history (tags pinned)
AUTH = ("gc-admin", "gc-secret-1")


@dataclass
class SqliteRepo:
    kv_url: str
    kv: KVStore
    g: Graveler
    built: Built
    root: Path

    async def close(self) -> None:
        await self.g.stores.close()
        await self.kv.close()

    async def stored(self) -> set[str]:
        store = await self.g.namespace_store(self.built.ns)
        return set(await stored_objects(store, self.built.ns))

    async def expire_dead_lease(self, repo: str = "repo1") -> None:
        """The lease ``gc/<repo>`` of a GC process the test KILLED, as it is once its TTL has passed:
        a contender takes it at a 'now' past any TTL the tests configure (the expiry rule
        decides) and releases it. Waiting out a real TTL instead would make the next run's
        success depend on how fast a loaded machine runs (a short TTL is lost mid-run)."""
        lease = kv_lease(self.kv, f"gc/{repo}", "kill-test", 60)
        assert await lease.try_acquire(time.time() + 3600), "the killed process's lease did not expire"
        await lease.release()

    async def live_and_garbage(self) -> tuple[set[str], set[str]]:
        store = await self.g.namespace_store(self.built.ns)
        live = await live_addresses(self.g, self.built, ACTIVE)
        return live, oracle_garbage(await stored_objects(store, self.built.ns), live, self.built)


async def sqlite_repo(tmp_path: Path, repo: str = "repo1") -> SqliteRepo:
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    root = tmp_path / "ns"
    kv = await open_kv(kv_url)
    clock = Clock()
    g = Graveler(kv, StoreRegistry(), clock=clock)
    built = await build_repo(g, clock, repo, f"local://{root}", local_root=str(root))
    return SqliteRepo(kv_url, kv, g, built, root)


def gc_config(kv_url: str, workdir: Path, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "core": {"kv_url": kv_url},
        "listen": "127.0.0.1:0",
        "access_keys": [{"access_key_id": AUTH[0], "secret_access_key": AUTH[1]}],
        "schedule": {"interval_seconds": 3600, "jitter_fraction": 0, "min_age_seconds": 86400},
        "spark": {"mode": "lite"},
        "hard_delete": {"enabled": False},
        "clock_offset_seconds": OFFSET_SECONDS,
        "poll_interval_seconds": 0.2,
        "workdir": str(workdir),
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path

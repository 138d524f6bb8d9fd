"""Any daemon answers for any mirror: two regions' daemons (two apps over real sockets) share one
mirrors database, and a mirror created through the SOURCE region's daemon is read, changed, resynced
and deleted through the DESTINATION region's daemon (where ``GET .../status`` used to be a 404).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from lakefs_core.errors import NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.api import create_app
from lakefs_mirror.config import MirrorConfig, load_mirror_config
from lakefs_mirror.db import MirrorsDB
from tests.mirror.test_api import KEY, PREFIX, SECRET, basic, call, serve

US, EU = "us-east-1", "eu-west-1"


def region_config(tmp: Path, region: str) -> MirrorConfig:
    env = {
        "LAKEFS_MIRROR__REGION": region,
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"sqlite:///{tmp / 'mirrors.sqlite3'}",
    }
    for name in (US, EU):
        env[f"LAKEFS_MIRROR__REGIONS__{name.upper()}__KV_URL"] = f"sqlite:///{tmp / f'kv-{name}.sqlite3'}"
        env[f"LAKEFS_MIRROR__REGIONS__{name.upper()}__LOCAL_ROOTS__0"] = str(tmp / name)
    env["LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID"] = KEY
    env["LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY"] = SECRET
    return load_mirror_config(None, env)


@dataclass
class Daemon:
    region: str
    url: str
    db: MirrorsDB
    gravelers: dict[str, Graveler]

    def mirrors(self, repo: str = "src-repo") -> str:
        return f"{self.url}{PREFIX}/{repo}/mirrors"


@pytest.fixture
async def daemons(tmp_path: Path) -> AsyncIterator[dict[str, Daemon]]:
    """One API per region, each with its own database handle and KV connections, as two processes."""
    out: dict[str, Daemon] = {}
    closers = []
    try:
        for region in (US, EU):
            config = region_config(tmp_path, region)
            db = await MirrorsDB.open(config.mirrors_db_url.get_secret_value())
            gravelers = {}
            for name, rc in config.regions.items():
                kv = await open_kv(rc.kv_url.get_secret_value())
                gravelers[name] = Graveler(kv, StoreRegistry())
            closers.append((db, gravelers))
            if region == US:
                ns = f"local://{tmp_path / US / 'src-repo'}"
                await gravelers[US].create_repository("src-repo", ns)

            async def exists(repo: str, g: Graveler = gravelers[region]) -> bool:
                try:
                    await g.repository(repo)
                except NotFoundError:
                    return False
                return True

            app = create_app(
                config,
                db,
                source_repo_exists=exists,
                metrics_registry=CollectorRegistry(),
                gravelers=gravelers,
            )
            cm = serve(app)
            url = await cm.__aenter__()
            closers.append(cm)
            out[region] = Daemon(region, url, db, gravelers)
        yield out
    finally:
        for item in reversed(closers):
            if isinstance(item, tuple):
                db, gravelers = item
                await db.close()
                for g in gravelers.values():
                    await g.stores.close()
                    await g.kv.close()
            else:
                await item.__aexit__(None, None, None)


async def test_the_destination_daemon_answers_for_a_mirror_created_at_the_source(
    daemons: dict[str, Daemon], tmp_path: Path
) -> None:
    us, eu = daemons[US], daemons[EU]
    ns = f"local://{tmp_path / EU / 'mirror-repo'}"
    async with aiohttp.ClientSession(headers={"Authorization": basic(KEY, SECRET)}) as http:
        status, created, _ = await call(
            http, "POST", us.mirrors(), {"name": "mirror-repo", "region": EU, "storage_namespace": ns}
        )
        assert status == 201, created
        one = f"{eu.mirrors()}/{created['id']}"
        status, got, _ = await call(http, "GET", one)
        assert (status, got) == (200, created)
        status, st, _ = await call(http, "GET", f"{one}/status")
        assert status == 200 and st["mirror"] == created, st
        status, patched, _ = await call(http, "PATCH", one, {"paused": True})
        assert (status, patched["paused"]) == (200, True)
        status, asked, _ = await call(http, "POST", f"{one}/resync")
        assert status == 202 and asked["resync_requested_at"] is not None
        # the source repository's name is still part of the address, on every daemon
        status, _, _ = await call(http, "GET", f"{eu.mirrors('other-repo')}/{created['id']}")
        assert status == 404
        # a list names its source region (default: the answering daemon's own)
        status, listed, _ = await call(http, "GET", eu.mirrors(), params={"source_region": US})
        assert status == 200 and [m["id"] for m in listed["results"]] == [created["id"]]
        status, _, _ = await call(http, "GET", eu.mirrors())
        assert status == 404  # there is no repository "src-repo" in eu-west-1
        status, _, _ = await call(http, "DELETE", one)
        assert status == 204
        status, _, _ = await call(http, "GET", f"{us.mirrors()}/{created['id']}")
        assert status == 404

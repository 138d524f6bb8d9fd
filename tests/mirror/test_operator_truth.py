"""An operator is never misled (issue 37): a live mirror's name is called live, a mirror that can
never progress carries a warning, namespace overlap is decided at real paths, one setting relocates
the shipped configs, every override has a shell-exportable name, and ``make demo DEMO_KEEP=DIR`` says
what to do on a used directory. Over the real HTTP API (tests/mirror/test_api.py's server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakefs_core.config import expand_data_dir
from lakefs_mirror.config import inspect_mirror_config, load_mirror_config
from lakefs_mirror.db import FieldConflictError, MirrorsDB
from lakefs_mirror.demo import refuse_used_dir
from tests.mirror import test_api
from tests.mirror.test_api import Server, call, create_body

server = test_api.server  # the fixture: the mirror API on a real socket

REPO_ROOT = Path(__file__).resolve().parents[2]


async def test_creating_with_a_live_mirrors_name_says_it_is_live(server: Server) -> None:
    status, created, _ = await call(server.session, "POST", server.mirrors(), create_body())
    assert status == 201
    body = create_body(ns="s3://elsewhere/other")
    status, payload, _ = await call(server.session, "POST", server.mirrors("other-repo"), body)
    assert status == 409
    message = payload["message"]
    assert "live" in message and created["id"] in message and "leftover" not in message


async def test_a_mirror_that_can_never_progress_is_accepted_with_a_warning(server: Server) -> None:
    # native mode within one region: nothing replicates there
    body = {**create_body("same-region", region="us-east-1"), "mode": "native"}
    status, created, _ = await call(server.session, "POST", server.mirrors(), body)
    assert status == 201
    assert any("both in region 'us-east-1'" in w for w in created["warnings"])
    status, payload, _ = await call(server.session, "GET", f"{server.mirrors()}/{created['id']}/status")
    assert status == 200 and payload["warnings"] == created["warnings"] and not payload["caught_up"]
    # native mode into a local namespace (ap-south-1 allows /srv/ap-mirrors)
    body = {**create_body("local-one", region="ap-south-1", ns="local:///srv/ap-mirrors/x"), "mode": "native"}
    status, created, _ = await call(server.session, "POST", server.mirrors(), body)
    assert status == 201 and any("local destination namespace" in w for w in created["warnings"])
    # switching to active clears it
    url = f"{server.mirrors()}/{created['id']}"
    status, patched, _ = await call(server.session, "PATCH", url, {"mode": "active"})
    assert status == 200 and patched["warnings"] == []
    # a sound mirror has none
    status, fine, _ = await call(server.session, "POST", server.mirrors(), create_body("fine-one"))
    assert status == 201 and fine["warnings"] == []


async def test_namespace_overlap_is_decided_at_real_paths(tmp_path: Path) -> None:
    real = tmp_path / "data" / "a"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "data")
    async with await MirrorsDB.open(f"sqlite:///{tmp_path / 'm.sqlite3'}") as db:
        await db.create_mirror(
            source_repo="src",
            source_region="r1",
            name="one",
            region="r2",
            storage_namespace=f"local://{real}",
        )
        for spelling in (f"{tmp_path}/link/a", f"{tmp_path}/link/a/inner", f"{tmp_path}/data/b/../a"):
            with pytest.raises(FieldConflictError, match="overlaps"):
                await db.create_mirror(
                    source_repo="src",
                    source_region="r1",
                    name="two",
                    region="r2",
                    storage_namespace=f"local://{spelling}",
                )
        await db.create_mirror(
            source_repo="src",
            source_region="r1",
            name="two",
            region="r2",
            storage_namespace=f"local://{tmp_path}/link/b",
        )


def test_one_data_dir_setting_relocates_the_shipped_configs(tmp_path: Path) -> None:
    conf = load_mirror_config(
        REPO_ROOT / "deploy" / "mirror-local.yaml", {"LAKEFS_MIRROR__DATA_DIR": str(tmp_path)}
    )
    paths = [conf.mirrors_db_url.get_secret_value(), str(conf.state_dir)]
    for region in conf.regions.values():
        paths += [region.kv_url.get_secret_value(), *map(str, region.local_roots)]
    assert all(str(tmp_path) in p and "/var/lib" not in p for p in paths), paths
    default = load_mirror_config(REPO_ROOT / "deploy" / "mirror-local.yaml", {})
    assert str(default.state_dir) == "/var/lib/lakefs-open/mirror-state"
    from lakefs_gc.config import load_gc_config

    gc = load_gc_config(REPO_ROOT / "deploy" / "gc-local.yaml", {"LAKEFS_GC__DATA_DIR": str(tmp_path)})
    assert str(tmp_path) in str(gc.workdir) and str(tmp_path) in gc.core.kv_url.get_secret_value()
    from lakefs_server.config import load_server_config

    server = load_server_config(
        REPO_ROOT / "deploy" / "server-local.yaml",
        {"LAKEFS_SERVER__DATA_DIR": str(tmp_path), "LAKEFS_SERVER__AUTH__ENCRYPT__SECRET_KEY": "s"},
    )
    assert str(tmp_path) in server.core.kv_url.get_secret_value()
    problems = expand_data_dir({"data_dir": "relative", "x": "${data_dir}/y"})
    assert problems and problems[0][0] == "x"


def test_region_names_with_dashes_have_shell_exportable_overrides(tmp_path: Path) -> None:
    env = {
        "LAKEFS_MIRROR__DATA_DIR": str(tmp_path),
        "LAKEFS_MIRROR__REGIONS__US_EAST__LOCAL_ROOTS__0": "/srv/x",
    }
    conf = load_mirror_config(REPO_ROOT / "deploy" / "mirror-local.yaml", env)
    assert set(conf.regions) == {"us-east", "eu-west"}
    assert [str(p) for p in conf.regions["us-east"].local_roots] == ["/srv/x"]
    # every override of the shipped file can be exported by a POSIX shell
    report = inspect_mirror_config(REPO_ROOT / "deploy" / "mirror-local.yaml", env)
    assert not report.problems
    result = subprocess.run(
        ["sh", "-c", "export LAKEFS_MIRROR__REGIONS__EU_WEST__KV_URL=sqlite:////tmp/x.db && echo ok"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.strip() == "ok"


def test_demo_keep_on_a_used_directory_says_what_to_do(tmp_path: Path) -> None:
    refuse_used_dir(tmp_path / "fresh")  # absent: fine
    (tmp_path / "used").mkdir()
    refuse_used_dir(tmp_path / "used")  # empty: fine
    (tmp_path / "used" / "mirrors.sqlite3").write_bytes(b"")
    with pytest.raises(SystemExit, match="rm -rf"):
        refuse_used_dir(tmp_path / "used")
    # through the module's entry point, as `make demo DEMO_KEEP=DIR` runs it: one line, no traceback
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "lakefs_mirror.demo", "--dir", str(tmp_path / "used")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "DEMO_KEEP" in proc.stderr


def test_promote_command_names_an_unknown_mirror_in_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "mirror.yaml"
    conf.write_text(
        "region: us-east\n"
        "regions:\n"
        f"  us-east: {{kv_url: 'sqlite:///{tmp_path}/us.sqlite3'}}\n"
        f"  eu-west: {{kv_url: 'sqlite:///{tmp_path}/eu.sqlite3'}}\n"
        f"mirrors_db_url: 'sqlite:///{tmp_path}/mirrors.sqlite3'\n"
        "access_keys: [{access_key_id: AKIAX, secret_access_key: not-a-real-secret}]\n"
    )
    exe = Path(sys.executable).with_name("lakefs-mirror")
    proc = subprocess.run(
        [str(exe), "promote", "--config", str(conf), "0" * 32],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "not found" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

"""docs/mirror.md's "Your own two-region setup" works as written against ``deploy/mirror-local.yaml``.

The fenced ``sh`` block after the marker ``<!-- tested: tests/mirror/test_readme_setup.py -->`` runs
in bash, in a temporary directory holding links to the checkout's ``deploy/`` and ``.venv/``, with
real ``lakefs-core`` and ``lakefs-mirror`` processes. Only two things differ from a reader's shell:
the data directory (``LAKEFS_DATA`` plus the configuration's own ``LAKEFS_MIRROR__...`` overrides
relocating every path of the YAML file into the temporary directory; the file itself is not edited)
and the two API ports (free ports instead of 8008/8009, which other processes may hold).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakefs_mirror.config import load_mirror_config
from tests.support.env import require_tool
from tests.support.timing import scaled

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- tested: tests/mirror/test_readme_setup.py -->"
SETUP_DOC = REPO_ROOT / "docs" / "mirror.md"
CONFIG = REPO_ROOT / "deploy" / "mirror-local.yaml"


def readme_setup_block() -> str:
    text = SETUP_DOC.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, "docs/mirror.md marks exactly one tested setup block"
    m = re.match(r"\s*```sh\n(.*?)\n```", text.split(MARKER, 1)[1], re.DOTALL)
    assert m is not None, "the marker is followed by a fenced sh block"
    return m.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def relocating_env(data: Path) -> dict[str, str]:
    """The configuration's env overrides moving every path of mirror-local.yaml below ``data``."""
    env = {
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"sqlite:///{data}/mirrors.sqlite3",
        "LAKEFS_MIRROR__STATE_DIR": f"{data}/mirror-state",
    }
    for region in ("us-east", "eu-west"):
        key = f"LAKEFS_MIRROR__REGIONS__{region.upper()}"
        env[f"{key}__KV_URL"] = f"sqlite:///{data}/{region}/kv.sqlite3"
        env[f"{key}__LOCAL_ROOTS__0"] = f"{data}/{region}/objects"
    return env


def stop_group(pgid: int) -> None:
    """SIGTERM the process group (the daemons: bash itself has exited), SIGKILL after 20 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "deploy").symlink_to(REPO_ROOT / "deploy")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the virtual environment running the tests
    yield tmp_path


def test_relocation_covers_every_path_of_the_file(tmp_path: Path) -> None:
    """Otherwise the test below would touch /var/lib instead of its temporary directory."""
    conf = load_mirror_config(CONFIG, relocating_env(tmp_path))
    shown = json.dumps(
        {
            "regions": {
                n: [r.kv_url.get_secret_value(), *map(str, r.local_roots)] for n, r in conf.regions.items()
            },
            "db": conf.mirrors_db_url.get_secret_value(),
            "state": str(conf.state_dir),
        }
    )
    assert "/var/lib" not in shown and str(tmp_path) in shown
    assert set(conf.regions) == {"us-east", "eu-west"}


def test_readme_setup_runs_as_written(workdir: Path) -> None:
    require_tool("curl", "curl")
    bash = require_tool("bash", "bash")
    data = workdir / "data"
    ports = {"8008": str(free_port()), "8009": str(free_port())}
    script = re.sub(
        r"127\.0\.0\.1:(8008|8009)\b", lambda m: f"127.0.0.1:{ports[m.group(1)]}", readme_setup_block()
    )
    assert script.count("127.0.0.1:") >= 5  # listen x2, health x2, the API: all rewritten
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEFS_MIRROR", "LAKEFS_CORE"))}
    env.update(relocating_env(data))
    env.update(
        LAKEFS_DATA=str(data),
        XDG_CONFIG_HOME=str(workdir / "xdg-config"),  # no user config of the machine leaks in
        XDG_DATA_HOME=str(workdir / "xdg-data"),
        PATH=os.environ.get("PATH", "/usr/bin:/bin"),
    )
    # Files, not pipes: the daemons started with & inherit stdout, so a pipe would never reach EOF.
    out_path, err_path = workdir / "script.out", workdir / "script.err"
    with out_path.open("wb") as out_file, err_path.open("wb") as err_file:
        proc = subprocess.Popen(
            [bash, "-eo", "pipefail", "-c", script],
            cwd=workdir,
            env=env,
            stdout=out_file,
            stderr=err_file,
            start_new_session=True,  # the daemons the block starts with & share this process group
        )
    try:
        proc.wait(timeout=scaled(120))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        stop_group(proc.pid)
    out = out_path.read_text(errors="replace")
    logs = "".join(
        f"\n-- {p.name} --\n{p.read_text(errors='replace')[-3000:]}" for p in workdir.glob("*.log")
    )
    assert proc.returncode == 0, f"{out[-2000:]}\n{err_path.read_text(errors='replace')[-3000:]}{logs}"
    # The POST answered the created mirror, then the status call answered for it.
    assert "Repository 'origin' created" in out, out
    replies = out[out.index("\n{") :].strip()  # after lakefs-core's text: the two curl answers
    decoder = json.JSONDecoder()
    created, end = decoder.raw_decode(replies)
    status, _ = decoder.raw_decode(replies[end:].lstrip())
    assert created["name"] == "origin-mirror" and created["region"] == "eu-west", out
    assert created["mode"] == "active"
    assert created["storage_namespace"] == f"local://{data}/eu-west/objects/origin-mirror"
    assert isinstance(status, dict) and "results" in status, out
    # Everything went to the relocated directory: the two KV stores, the namespaces, the mirrors db.
    assert (data / "us-east" / "kv.sqlite3").is_file() and (data / "mirrors.sqlite3").is_file()
    assert (data / "us-east" / "objects" / "origin").is_dir()
    assert (workdir / "mirror.json").is_file()

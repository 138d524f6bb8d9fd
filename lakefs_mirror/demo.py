"""``make demo``: transactional mirroring between two regions on the embedded default.

Two "regions" are two local directories, each with its own SQLite KV store; the mirrors database
is one SQLite file both daemons share. The script starts one real ``lakefs-mirror`` daemon per region,
creates a mirror with lakeFS's own curl command against the source region's API, switches it to
``active`` mode (local directories have no replication of their own), runs a short workload on the
source (write, commit, change, commit) and waits until the mirror branch has caught up, printing the
mirror status with curl. Then retention GC on the source (the ``lakefs-gc`` daemon), and lakeFS's
S3 gateway (``lakefs-server``) on it: the first admin's keys from ``lakefs-core auth setup``, an
object written and listed with curl's own SigV4 signing, committed, read back by commit id. No
server needs to be started by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from pydantic import SecretStr

from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core

KEY, SECRET = "demo-access-key", "demo-secret-key"
API = "/service/replication/v1/repositories"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def write_configs(root: Path) -> dict[str, tuple[Path, int]]:
    for name in ("us-east", "eu-west"):  # the daemon refuses a SQLite URL whose directory does not exist
        (root / name).mkdir(parents=True, exist_ok=True)
    regions = {
        name: {
            "kv_url": f"sqlite:///{root / name / 'kv.sqlite3'}",
            "local_roots": [str(root / name / "storage")],
        }
        for name in ("us-east", "eu-west")
    }
    out = {}
    for name in regions:
        port = free_port()
        config = {
            "region": name,
            "regions": regions,
            "mirrors_db_url": f"sqlite+aiosqlite:///{root / 'mirrors.sqlite3'}",
            "listen": f"127.0.0.1:{port}",
            "access_keys": [{"access_key_id": KEY, "secret_access_key": SECRET}],
            "poll_interval_seconds": 0.5,
            "negative_cooldown_seconds": 0,
            "active_copy_grace_seconds": 0,
            "lease_ttl_seconds": 10,
            "state_dir": str(root / name / "state"),
        }
        path = root / f"mirror-{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        out[name] = (path, port)
    return out


def curl(method: str, url: str, body: dict[str, object] | None = None, *, show: bool = True) -> object:
    cmd = ["curl", "-sS", "-u", f"{KEY}:{SECRET}", "-X", method, url]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    if show:
        # paste-able as printed: the demo's own throw-away key, quoted for a POSIX shell
        print(f"$ {shlex.join(cmd)}")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout
    return json.loads(out) if out.strip() else None


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    print(f"  waiting (up to {timeout:g} s) for http://127.0.0.1:{port}/_health to answer 200", flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daemon on port {port} exited with status {proc.returncode}")
        done = subprocess.run(
            ["curl", "-sf", f"http://127.0.0.1:{port}/_health"], capture_output=True, check=False
        )
        if done.returncode == 0:
            return
        time.sleep(0.2)
    raise SystemExit(f"daemon on port {port} did not become healthy")


def start_daemon(
    root: Path, name: str, module: str, config: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """``python -m <module> run --config <config>`` in its own session, its log in ``daemon-<name>.log``."""
    with (root / f"daemon-{name}.log").open("wb") as log:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module, "run", "--config", str(config)],
                stderr=log,
                start_new_session=True,
            )
        )


def region_core(root: Path, region: str) -> CoreSettings:
    """The core settings of ``region`` of the demo (what ``lakefs-core`` with that KV would open)."""
    return CoreSettings(kv_url=SecretStr(f"sqlite:///{root / region / 'kv.sqlite3'}"))


async def workload(root: Path, step: int) -> str:
    async with await open_core(region_core(root, "us-east")) as core:
        g, objects = core.graveler, core.objects
        if step == 0:
            await g.create_repository("origin", f"local://{root / 'us-east' / 'storage' / 'origin'}")
            return ""
        if step == 1:
            for day in range(1, 6):
                body = f"day {day}: {day * 10}\n".encode()
                await objects.upload("origin", "main", f"events/day={day}.csv", body)
            commit = await g.commit("origin", "main", committer="demo", message="load five days")
        else:
            await objects.upload("origin", "main", "events/day=3.csv", b"day 3: corrected\n")
            await objects.delete("origin", "main", "events/day=5.csv")
            commit = await g.commit("origin", "main", committer="demo", message="fix day 3, drop day 5")
        return commit.id


async def read_mirror(root: Path) -> tuple[list[str], str]:
    async with await open_core(region_core(root, "eu-west")) as core:
        page = await core.objects.list("origin-mirror", "main", prefix="events/")
        day3 = (await core.objects.read_all("origin-mirror", "main", "events/day=3.csv")).decode().strip()
        return [o.path for o in page.objects], day3


def wait_for_head(url: str, head: str, timeout: float = 60) -> dict[str, object]:
    print(
        f"  waiting (up to {timeout:g} s) until the status says mirror branch main is at {head[:12]}:",
        f"  $ {shlex.join(['curl', '-sS', '-u', f'{KEY}:{SECRET}', url])}",
        sep="\n",
        flush=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = curl("GET", url, show=False)
        assert isinstance(status, dict)
        for row in status.get("results", []):
            if row.get("kind") == "branch" and row.get("name") == "main" and row.get("mirror_head") == head:
                return status
        time.sleep(0.3)
    raise SystemExit(f"the mirror did not reach {head[:12]} in {timeout} s")


def tour(root: Path) -> None:
    configs = write_configs(root)
    asyncio.run(workload(root, 0))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        say("start one lakefs-mirror daemon per region")
        for name, (path, port) in configs.items():
            print(f"$ lakefs-mirror run --config {path.name}   # {name}, API on 127.0.0.1:{port}")
            start_daemon(root, name, "lakefs_mirror", path, procs)
        for (_, port), proc in zip(configs.values(), procs, strict=True):
            wait_healthy(port, proc)
        us = f"http://127.0.0.1:{configs['us-east'][1]}{API}/origin/mirrors"

        say("create a mirror of 'origin' in eu-west (lakeFS's curl command), then switch it to active mode")
        ns = f"local://{root / 'eu-west' / 'storage' / 'origin-mirror'}"
        mirror = curl("POST", us, {"name": "origin-mirror", "region": "eu-west", "storage_namespace": ns})
        assert isinstance(mirror, dict)
        print(json.dumps(mirror, indent=2))
        curl("PATCH", f"{us}/{mirror['id']}", {"mode": "active"})

        say("workload on the source: write and commit, then change, delete and commit")
        first = asyncio.run(workload(root, 1))
        print(f"  commit {first[:16]}  load five days")
        second = asyncio.run(workload(root, 2))
        print(f"  commit {second[:16]}  fix day 3, drop day 5")

        say("wait for the mirror branch to reach the source head, then print the status with curl")
        wait_for_head(f"{us}/{mirror['id']}/status", second)
        status = curl("GET", f"{us}/{mirror['id']}/status")
        print(json.dumps(status, indent=2))

        say("read the mirror repository in eu-west")
        paths, day3 = asyncio.run(read_mirror(root))
        print(f"  objects: {paths}")
        print(f"  events/day=3.csv -> {day3}")

        gc_tour(root, procs)
        gateway_tour(root, procs)
    except BaseException:
        for name in [*configs, "gc", "server"]:
            if not (root / f"daemon-{name}.log").exists():
                continue
            log_text = (root / f"daemon-{name}.log").read_text(errors="replace")
            print(f"\n-- last lines of the {name} daemon's log --\n" + "\n".join(log_text.splitlines()[-15:]))
        raise
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


GC_CLOCK_OFFSET_DAYS = 3


def write_gc_config(root: Path) -> tuple[Path, int]:
    port = free_port()
    config = {
        "region": "us-east",
        "core": {"kv_url": f"sqlite:///{root / 'us-east' / 'kv.sqlite3'}"},
        "mirrors_db_url": f"sqlite+aiosqlite:///{root / 'mirrors.sqlite3'}",  # mirror heads are pinned
        "listen": f"127.0.0.1:{port}",
        "access_keys": [{"access_key_id": KEY, "secret_access_key": SECRET}],
        "schedule": {"enabled": False},  # runs only when asked through the API in this demo
        "spark": {"mode": "lite"},  # the same mark functions without a JVM (make demo installs no Spark)
        # The GC's clock (retention 'now', run ids, run times) = the clock + 3 days, so a 1-day
        # retention shows in seconds.
        "clock_offset_seconds": GC_CLOCK_OFFSET_DAYS * 86400,
        "poll_interval_seconds": 0.5,
        "workdir": str(root / "gc-work"),
    }
    path = root / "gc.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, port


def wait_for_run(url: str, want: str, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = curl("GET", url, show=False)
        assert isinstance(run, dict)
        if run.get("state") == want:
            return run
        if run.get("state") == "failed":
            raise SystemExit(f"the GC run failed: {run.get('error')}")
        time.sleep(0.3)
    raise SystemExit(f"the GC run did not reach state {want} in {timeout} s")


def gc_tour(root: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """Retention GC on the source repository: lakeFS's rules call, a dry run, then a full run."""
    path, port = write_gc_config(root)
    say(f"start the lakefs-gc daemon in us-east (its clock set {GC_CLOCK_OFFSET_DAYS} days ahead)")
    print(f"$ lakefs-gc run --config {path.name}   # API on 127.0.0.1:{port}")
    start_daemon(root, "gc", "lakefs_gc.cli", path, procs)
    wait_healthy(port, procs[-1])
    base = f"http://127.0.0.1:{port}"
    say("keep 1 day of history on every branch (lakeFS's gc_rules call), then a dry run")
    rules = {"default_retention_days": 1, "branches": []}
    curl("PUT", f"{base}/api/v1/repositories/origin/settings/gc_rules", rules)
    runs = f"{base}/service/gc/v1/repositories/origin/runs"
    dry = curl("POST", runs, {"mode": "dry-run"})
    assert isinstance(dry, dict)
    marked = wait_for_run(f"{runs}/{dry['run_id']}", "marked")
    print(json.dumps(marked["summary"], indent=2))
    say("collect: mark and sweep (the objects replaced by 'fix day 3, drop day 5' go)")
    full = curl("POST", runs, {"mode": "full"})
    assert isinstance(full, dict)
    swept = wait_for_run(f"{runs}/{full['run_id']}", "swept")
    print(json.dumps({"summary": swept["summary"], "sweep": swept["sweep"]}, indent=2))
    paths, day3 = asyncio.run(read_source(root))
    print(f"  the head still reads: {paths}; events/day=3.csv -> {day3}")


ENCRYPT = "demo-encryption-secret"  # auth.encrypt.secret_key: secret access keys are encrypted with it


def write_server_config(root: Path) -> tuple[Path, Path, int, int]:
    """``lakefs-core``'s configuration (to set up the first admin) and ``lakefs-server``'s, on the
    us-east KV store; the S3 port and the admin port."""
    kv_url = f"sqlite:///{root / 'us-east' / 'kv.sqlite3'}"
    core = root / "core-us-east.yaml"
    core.write_text(yaml.safe_dump({"kv_url": kv_url, "auth": {"encrypt": {"secret_key": ENCRYPT}}}))
    s3_port, admin_port = free_port(), free_port()
    config = {
        "core": {"kv_url": kv_url},
        "auth": {"encrypt": {"secret_key": ENCRYPT}},
        "gateway": {"listen": f"127.0.0.1:{s3_port}", "region": "us-east-1"},
        "listen": f"127.0.0.1:{admin_port}",
    }
    path = root / "server.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return core, path, s3_port, admin_port


def s3_curl(keys: tuple[str, str], method: str, url: str, *, data: str | None = None) -> str:
    """curl signing with SigV4 itself (``--aws-sigv4``): any S3 client works the same way. S3 wants
    the payload's hash in ``x-amz-content-sha256``, which curl sends only when asked (and signs)."""
    cmd = ["curl", "-sS", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", f"{keys[0]}:{keys[1]}"]
    cmd += ["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    cmd += ["-X", method, url] + (["--data-binary", data] if data is not None else [])
    print(f"$ {shlex.join(cmd)}")
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout


def gateway_tour(root: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """lakeFS's S3 gateway on the source region: the first admin's keys, an object written and
    listed over S3, committed with lakefs-core, read back by commit id."""
    core, path, s3_port, admin_port = write_server_config(root)
    say("set up the first admin (lakeFS's 'setup'): its keys are printed once")
    cli = [sys.executable, "-m", "lakefs_core.cli", "--config", str(core)]
    print(f"$ lakefs-core --config {core.name} auth setup --user demo-admin")
    done = subprocess.run([*cli, "--json", "auth", "setup", "--user", "demo-admin"],
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    answer = json.loads(done.stdout)
    keys = (str(answer["access_key_id"]), str(answer["secret_access_key"]))
    print(f"  access_key_id: {keys[0]}")
    say("start lakefs-server (lakeFS's S3 gateway: bucket = repository, first key segment = ref)")
    print(f"$ lakefs-server run --config {path.name}   # S3 on 127.0.0.1:{s3_port}")
    start_daemon(root, "server", "lakefs_server.cli", path, procs)
    wait_healthy(admin_port, procs[-1], timeout=90)  # the first start loads the S3 stack
    s3 = f"http://127.0.0.1:{s3_port}/origin"
    s3_curl(keys, "PUT", f"{s3}/main/events/day=6.csv", data="day 6: 60")
    listing = s3_curl(keys, "GET", f"{s3}?list-type=2&prefix=main%2Fevents%2F")
    print("  keys:", re.findall(r"<Key>([^<]*)</Key>", listing))
    print(f"$ lakefs-core --config {core.name} commit lakefs://origin/main -m 'day 6 over S3'")
    done = subprocess.run([*cli, "--json", "commit", "lakefs://origin/main", "-m", "day 6 over S3"],
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    commit = str(json.loads(done.stdout)["id"])
    print(f"  commit {commit[:16]}")
    body = s3_curl(keys, "GET", f"{s3}/{commit}/events/day=6.csv")
    print(f"  events/day=6.csv at {commit[:12]} -> {body.strip()}")


async def read_source(root: Path) -> tuple[list[str], str]:
    async with await open_core(region_core(root, "us-east")) as core:
        page = await core.objects.list("origin", "main", prefix="events/")
        day3 = (await core.objects.read_all("origin", "main", "events/day=3.csv")).decode().strip()
        return [o.path for o in page.objects], day3


def refuse_used_dir(root: Path) -> None:
    """A directory holding an earlier run (its repositories and mirror exist) is not run over again:
    say what to do instead of failing half-way with a traceback."""
    if root.exists() and not root.is_dir():
        raise SystemExit(f"{root} is a file, not a directory: choose another DEMO_KEEP directory")
    if root.is_dir() and any(root.iterdir()):
        raise SystemExit(
            f"{root} is not empty (an earlier demo run is kept there: its logs, configs, KV stores and "
            f"namespaces). Look at it, then remove it (rm -rf {root}) or choose another DEMO_KEEP "
            "directory to run the demo again."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Transactional mirroring between two local regions.")
    parser.add_argument("--dir", type=Path, help="demo directory (default: a fresh temporary one)")
    args = parser.parse_args()
    if shutil.which("curl") is None:
        raise SystemExit("the demo prints the mirror status with curl: please install curl")
    root = (args.dir or Path(tempfile.mkdtemp(prefix="lakefs-mirror-demo-"))).resolve()
    refuse_used_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    print(f"demo directory: {root}")
    try:
        tour(root)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print("\ndemo finished")


if __name__ == "__main__":
    main()

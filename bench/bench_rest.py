"""lakeFS's REST API on lakefs-server (issue 35): objects/s through lakefs-spec against the S3 gateway
and direct ``lakefs-core fs upload``, and server memory while a 1 GiB object streams.

One ``lakefs-server run`` process on the embedded default (SQLite + a local namespace), the test
harness's users, in a temporary directory:

1. ``put_get``: ``--objects`` x 64 KiB objects, each path once per client:
   - REST: lakefs-spec ``put_file`` of every file, then ``get_file`` of every object;
   - S3 gateway: boto3 ``upload_file`` / ``download_file`` of the same files (the part-1 listener);
   - direct: ``lakefs-core fs upload --recursive`` of the same directory (a CLI process on the same
     KV store; no server in the path), for the upload only.
   Objects/s of each, the REST/gateway ratio, and the server's CPU per object (``/proc``: less noisy
   than wall time on a shared machine). Target: REST within 0.7x of the gateway.
2. ``ls``: ``--list`` objects (imported, one commit) listed whole: lakefs-spec ``ls`` of the prefix
   (pages of 1,000) against boto3's ``list_objects_v2`` paginator; objects/s and the ratio.
3. ``stream``: a ``--big-mib`` object (1 GiB by default, written by ``fs upload``) read whole by a
   streaming GET of ``/api/v1/.../objects``, the server's RSS sampled every 50 ms from ``/proc``:
   the RSS before, its peak during the download and MiB/s. Target: flat memory (peak - before
   small and independent of the object's size).

Run: ``.venv/bin/python -m bench.bench_rest [--objects 1000] [--list 10000] [--big-mib 1024]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import machine, report
from tests.server.harness import ADMIN, ENCRYPT_SECRET, Server, _seed

BIN = Path(sys.executable).parent
REPO = "repo"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def server_cpu(pid: int) -> float:
    """The server process's user + system CPU seconds so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_files(directory: Path, count: int, size: int) -> list[Path]:
    directory.mkdir(parents=True)
    files = []
    for i in range(count):
        path = directory / f"f{i:05d}.bin"
        path.write_bytes(os.urandom(size))
        files.append(path)
    return files


def cli_env(core: dict[str, str], home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEFS_", "LAKECTL_"))}
    env.update(HOME=str(home), LAKEFS_CORE__KV_URL=core["kv_url"],
               LAKEFS_CORE__AUTH__ENCRYPT__SECRET_KEY=ENCRYPT_SECRET)  # fmt: skip
    return env


def put_get(server: Server, core: dict[str, str], tmp: Path, count: int) -> None:
    import boto3
    from lakefs_spec import LakeFSFileSystem

    files = make_files(tmp / "files", count, 64 * 1024)
    fs = LakeFSFileSystem(host=server.endpoint, username=ADMIN.access_key_id,
                          password=ADMIN.secret_access_key)  # fmt: skip
    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                      aws_access_key_id=ADMIN.access_key_id,
                      aws_secret_access_key=ADMIN.secret_access_key)  # fmt: skip
    out = tmp / "out"
    out.mkdir()
    rates: dict[str, float] = {}

    cpu_ms: dict[str, float] = {}
    assert server.process is not None
    pid = server.process.pid

    def timed(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        c0, t0 = server_cpu(pid), time.perf_counter()
        for f in files:
            fn(f)
        rates[name] = count / (time.perf_counter() - t0)
        cpu_ms[name] = (server_cpu(pid) - c0) / count * 1000

    timed("rest_put", lambda f: fs.put_file(str(f), f"lakefs://{REPO}/main/rest/{f.name}"))
    timed("rest_get", lambda f: fs.get_file(f"lakefs://{REPO}/main/rest/{f.name}", str(out / f.name)))
    timed("s3_put", lambda f: s3.upload_file(str(f), REPO, f"main/s3/{f.name}"))
    timed("s3_get", lambda f: s3.download_file(REPO, f"main/s3/{f.name}", str(out / f.name)))
    t0 = time.perf_counter()
    subprocess.run(
        [str(BIN / "lakefs-core"), "fs", "upload", "-r", "-s", str(tmp / "files"), "--no-progress",
         f"lakefs://{REPO}/main/direct/"],
        env=cli_env(core, tmp / "home"), check=True, capture_output=True,
    )  # fmt: skip
    rates["direct_put"] = count / (time.perf_counter() - t0)
    report(
        "rest_put_get",
        objects=count,
        objects_per_s={k: round(v, 1) for k, v in rates.items()},
        put_ratio_rest_to_gateway=round(rates["rest_put"] / rates["s3_put"], 3),
        get_ratio_rest_to_gateway=round(rates["rest_get"] / rates["s3_get"], 3),
        put_ratio_rest_to_direct=round(rates["rest_put"] / rates["direct_put"], 3),
        server_cpu_ms_per_object={k: round(v, 2) for k, v in cpu_ms.items()},
    )


def list_all(server: Server, tmp: Path, count: int) -> None:
    import boto3
    import lakefs_sdk
    from lakefs_spec import LakeFSFileSystem

    source = tmp / "list-source"
    source.mkdir()
    for i in range(count):
        (source / f"o{i:06d}").write_bytes(b"x")
    cfg = lakefs_sdk.Configuration(host=server.endpoint + "/api/v1", username=ADMIN.access_key_id,
                                   password=ADMIN.secret_access_key)  # fmt: skip
    imports = lakefs_sdk.ImportApi(lakefs_sdk.ApiClient(cfg))
    location = lakefs_sdk.ImportLocation(type="common_prefix", path=f"local://{source}/", destination="many/")
    started = imports.import_start(REPO, "main", lakefs_sdk.ImportCreation(
        paths=[location], commit=lakefs_sdk.CommitCreation(message="list bench")))  # fmt: skip
    while not imports.import_status(REPO, "main", started.id).completed:
        time.sleep(0.1)
    fs = LakeFSFileSystem(host=server.endpoint, username=ADMIN.access_key_id,
                          password=ADMIN.secret_access_key)  # fmt: skip
    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                      aws_access_key_id=ADMIN.access_key_id,
                      aws_secret_access_key=ADMIN.secret_access_key)  # fmt: skip
    t0 = time.perf_counter()
    listed = fs.ls(f"lakefs://{REPO}/main/many/", detail=True, refresh=True)
    rest = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = sum(len(p.get("Contents", [])) for p in s3.get_paginator("list_objects_v2").paginate(
        Bucket=REPO, Prefix="main/many/"))  # fmt: skip
    gateway = time.perf_counter() - t0
    assert len(listed) == count == n, (len(listed), n)
    report(
        "rest_ls",
        objects=count,
        rest_objects_per_s=round(count / rest),
        gateway_objects_per_s=round(count / gateway),
        ratio_rest_to_gateway=round(gateway / rest, 3),
    )


def stream(server: Server, core: dict[str, str], tmp: Path, mib: int) -> None:
    import urllib3

    big = tmp / "big.bin"
    chunk = os.urandom(1 << 20)
    with big.open("wb") as f:
        for _ in range(mib):
            f.write(chunk)
    subprocess.run(
        [str(BIN / "lakefs-core"), "fs", "upload", "-s", str(big), "--no-progress", f"lakefs://{REPO}/main/big.bin"],
        env=cli_env(core, tmp / "home"), check=True, capture_output=True,
    )  # fmt: skip
    big.unlink()
    assert server.process is not None
    pid = server.process.pid
    before = rss_mib(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mib(pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    http = urllib3.PoolManager()
    headers = urllib3.make_headers(basic_auth=f"{ADMIN.access_key_id}:{ADMIN.secret_access_key}")
    t0 = time.perf_counter()
    url = f"{server.endpoint}/api/v1/repositories/{REPO}/refs/main/objects?path=big.bin"
    answer = http.request("GET", url, headers=headers, preload_content=False)
    total = sum(len(piece) for piece in answer.stream(1 << 20))
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    assert total == mib << 20, total
    report("rest_stream", mib=mib, mib_per_s=round(mib / seconds, 1), rss_before_mib=round(before, 1),
           rss_peak_mib=round(peak, 1), rss_growth_mib=round(peak - before, 1))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--list", type=int, default=10_000)
    parser.add_argument("--big-mib", type=int, default=1024)
    args = parser.parse_args()
    report("rest_machine", **machine())
    with tempfile.TemporaryDirectory(prefix="bench-rest-") as name:
        tmp = Path(name)
        (tmp / "data").mkdir()
        core = {"kv_url": f"sqlite:///{tmp / 'kv.sqlite3'}"}
        asyncio.run(_seed(core, f"local://{tmp / 'data' / REPO}"))
        auth = {"encrypt": {"secret_key": ENCRYPT_SECRET}, "cache_seconds": 20}
        server = Server(tmp, core, extra={"auth": auth}).start()
        try:
            put_get(server, core, tmp, args.objects)
            list_all(server, tmp, args.list)
            stream(server, core, tmp, args.big_mib)
        finally:
            server.stop()


if __name__ == "__main__":
    main()

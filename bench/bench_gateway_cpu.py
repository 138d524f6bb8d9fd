"""Server CPU per S3 request: two lakefs-server source trees A/B, interleaved (issue 34).

The per-request fixed cost of the gateway (aiohttp, SigV4, policy, the KV reads, the XML) is what
separates a small answer from ``rclone serve s3``'s, and on a shared machine wall time cannot show a
change of a tenth of a millisecond. This measures the server's own CPU instead: one
``lakefs-server run --workers 1`` per source tree (``PYTHONPATH``: the tree's packages in this
venv), each on its own copy of one seeded SQLite KV (``--keys`` committed keys in 100 directories,
one staged 1 KiB object ``main/small/obj``), a keep-alive client sending one request signed once
(botocore SigV4, so the client costs next to nothing), and the server's user + system CPU from
``/proc/<pid>/stat`` around each block. Blocks of ``--block`` requests alternate A, B, B, A, ...
(``--blocks`` of them per tree and kind), so a load that drifts weighs on both alike; the figure is
the CPU summed over the blocks over their requests, with the B/A ratio.

Kinds: ``delim`` (ListObjectsV2, delimiter ``/``, the 100 directories), ``onekey`` (ListObjectsV2,
``max-keys=1``), ``get`` (GetObject of the staged 1 KiB object), ``headbucket``.

``python -m bench.bench_gateway_cpu --a /path/to/main/tree --b . [--keys 100000] [--blocks 20]
[--block 100] [--kinds delim,onekey,get,headbucket]``
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]

from bench.bench_gateway import ACCESS, ENCRYPT, SECRET, free_port, seed, wait_http
from bench.common import machine, report

KINDS: dict[str, tuple[str, str, str]] = {
    "delim": ("GET", "/repo", "delimiter=%2F&list-type=2&prefix=main%2Flist%2F"),
    "onekey": ("GET", "/repo", "list-type=2&max-keys=1&prefix=main%2Flist%2Fd000%2F"),
    "get": ("GET", "/repo/main/small/obj", ""),
    "headbucket": ("HEAD", "/repo", ""),
}


async def seed_with_small(root: Path, keys: int) -> None:
    """:func:`bench.bench_gateway.seed`, plus one staged 1 KiB object (the GET's)."""
    from lakefs_core.repos.objects import UploadItem
    from lakefs_core.settings import CoreSettings
    from lakefs_core.wiring import open_core

    await seed(root, keys)
    core = await open_core(CoreSettings.model_validate({"kv_url": f"sqlite:///{root / 'kv.sqlite3'}"}))
    try:
        await core.objects.upload_many("repo", "main", [UploadItem("small/obj", b"x" * 1024)])
    finally:
        await core.aclose()


def start(tree: Path, data: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``lakefs-server run`` of ``tree``'s packages over ``data`` (its own KV copy); (process, port)."""
    s3_port, admin_port = free_port(), free_port()
    config = {
        "core": {"kv_url": f"sqlite:///{data / 'kv.sqlite3'}"},
        "auth": {"encrypt": {"secret_key": ENCRYPT}},
        "gateway": {"listen": f"127.0.0.1:{s3_port}"},
        "listen": f"127.0.0.1:{admin_port}",
        "log_level": "WARNING",
    }
    (data / "server.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")}
    env["PYTHONPATH"] = str(tree)
    code = "import sys; from lakefs_server.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "run", "--config", str(data / "server.yaml")],
        env=env, cwd=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    wait_http(f"http://127.0.0.1:{admin_port}/_ready", proc, lambda s: s == 200)
    return proc, s3_port


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sender(port: int, kind: str) -> Callable[[], None]:
    """One request of ``kind`` per call, over one keep-alive connection, signed once."""
    method, path, query = KINDS[kind]
    target = path + (f"?{query}" if query else "")
    request = AWSRequest(
        method=method,
        url=f"http://127.0.0.1:{port}{target}",
        headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
    )
    SigV4Auth(Credentials(ACCESS, SECRET), "s3", "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    conn = http.client.HTTPConnection("127.0.0.1", port)

    def send() -> None:
        conn.request(method, target, headers=headers)
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{kind}: HTTP {answer.status}: {body[:300]!r}")

    return send


def measure(
    servers: list[tuple[subprocess.Popen[bytes], int]], kind: str, blocks: int, block: int
) -> dict[str, float]:
    sends = [sender(port, kind) for _, port in servers]
    for send in sends:
        for _ in range(30):  # warm-up: caches, the connection
            send()
    cpu, wall = [0.0, 0.0], [0.0, 0.0]
    for b in range(blocks):
        for i in (0, 1) if b % 2 == 0 else (1, 0):
            pid = servers[i][0].pid
            before, started = cpu_seconds(pid), time.perf_counter()
            for _ in range(block):
                sends[i]()
            cpu[i] += cpu_seconds(pid) - before
            wall[i] += time.perf_counter() - started
    n = blocks * block
    return {
        "a_cpu_ms": cpu[0] / n * 1000,
        "b_cpu_ms": cpu[1] / n * 1000,
        "b_over_a": cpu[1] / cpu[0] if cpu[0] else float("nan"),
        "a_wall_ms": wall[0] / n * 1000,
        "b_wall_ms": wall[1] / n * 1000,
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a", type=Path, required=True, help="source tree A (e.g. a checkout of main)")
    parser.add_argument("--b", type=Path, default=Path("."), help="source tree B (default: this one)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-gateway-cpu-"))
    servers: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        (root / "seed").mkdir()
        asyncio.run(seed_with_small(root / "seed", args.keys))
        for name, tree in (("a", args.a), ("b", args.b)):
            shutil.copytree(root / "seed", root / name)
            servers.append(start(tree.resolve(), root / name))
        figures = {kind: measure(servers, kind, args.blocks, args.block) for kind in args.kinds.split(",")}
        report("gateway-cpu", machine=machine(), args={k: str(v) for k, v in vars(args).items()}, **figures)
    finally:
        for proc, _ in servers:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

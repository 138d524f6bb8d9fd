"""Thread hops per small S3 request, and the server's CPU per request (issue 34).

A worker-thread hop (SQLite's connection thread, the local block store's, the CPU pool) costs the
server about 0.1 ms of CPU here, as much as much of a small request's own Python work, and a
profiler does not show it. This counts them: ``bench.bench_gateway``'s servers (``--workers`` as
there), each server process started with a ``sitecustomize`` that counts
``ThreadPoolExecutor.submit`` by the function submitted and the tasks created through
``BaseEventLoop.create_task`` by coroutine, and writes its counts every second. Then ``--requests``
requests of each kind by 16 boto3 threads (after a warm-up of 100): ``put`` (1 KiB to
``main/small/``), ``get-staged`` (those objects), ``get-committed`` (the seeded committed keys),
with the counts per request and the server's user + system CPU per request (``/proc/<pid>/stat``).

``python -m bench.bench_gateway_hops [--requests 1000]``: run it in the tree to measure (its
packages first on ``PYTHONPATH``); compare two trees by running it in each, alternated.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.bench_gateway import Servers, client
from bench.common import machine, report

SITECUSTOMIZE = """
import asyncio, collections, concurrent.futures, os, threading, time
_counts = collections.Counter()
_submit = concurrent.futures.ThreadPoolExecutor.submit
_create_task = asyncio.BaseEventLoop.create_task
def _name(fn):
    while hasattr(fn, "func"):  # a partial; of a context's run: the function it runs
        fn = fn.args[0] if getattr(fn.func, "__qualname__", "") == "Context.run" and fn.args else fn.func
    return getattr(fn, "__qualname__", repr(fn))
def submit(self, fn, /, *args, **kwargs):
    _counts["hop " + _name(fn)] += 1
    return _submit(self, fn, *args, **kwargs)
def create_task(self, coro, **kwargs):
    _counts["task " + getattr(coro, "__qualname__", type(coro).__name__)] += 1
    return _create_task(self, coro, **kwargs)
concurrent.futures.ThreadPoolExecutor.submit = submit
asyncio.BaseEventLoop.create_task = create_task
def _dump():
    while True:
        time.sleep(0.5)
        with open(os.path.join(os.environ["HOPS_DIR"], f"{os.getpid()}.txt"), "w") as f:
            f.writelines(f"{n}\\t{k}\\n" for k, n in list(_counts.items()))
def _start():
    _counts.clear()
    threading.Thread(target=_dump, daemon=True).start()
if os.environ.get("HOPS_DIR"):
    _start()
    os.register_at_fork(after_in_child=_start)
"""


def counts(directory: Path) -> collections.Counter[str]:
    time.sleep(1.2)  # every process wrote its counts since the last request
    total: collections.Counter[str] = collections.Counter()
    for path in directory.glob("*.txt"):
        for line in path.read_text().splitlines():
            n, key = line.split("\t", 1)
            total[key] += int(n)
    return total


def cpu_seconds(servers: Servers) -> float:
    total = 0
    for pid in servers.pids("ours"):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    n = args.requests
    root = Path(tempfile.mkdtemp(prefix="gwhops-"))
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "hops").mkdir()
    os.environ["HOPS_DIR"] = str(root / "hops")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(root / "site"), *sys.path[:1], os.environ.get("PYTHONPATH", "")]
    )
    servers = Servers(root / "servers")
    (root / "servers").mkdir()
    out: dict[str, Any] = {}
    try:
        servers.start(1000)
        s3 = client(servers.ours_url, 16)
        body = os.urandom(1024)
        small = [f"main/small/{i:06d}" for i in range(200)]
        committed = [f"main/list/d{i % 100:03d}/f{i // 100:05d}" for i in range(1000)]

        def put(i: int) -> None:
            s3.put_object(Bucket="repo", Key=f"main/small/{i % 100_000:06d}", Body=body)

        def get(keys: list[str]) -> Callable[[int], None]:
            return lambda i: s3.get_object(Bucket="repo", Key=keys[i % len(keys)])["Body"].read()

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket="repo", Key=k, Body=body), small))
        kinds: dict[str, Callable[[int], None]] = {
            "put": put,
            "get-staged": get(small),
            "get-committed": get(committed),
        }
        for kind, one in kinds.items():
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(one, range(1000, 1100)))  # warm-up
            before, cpu = counts(root / "hops"), cpu_seconds(servers)
            started = time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(one, range(n)))
            wall = time.perf_counter() - started
            cpu = cpu_seconds(servers) - cpu
            delta = counts(root / "hops") - before
            out[kind] = {
                "per_s": n / wall,
                "server_cpu_ms": cpu / n * 1000,
                "per_request": {k: round(v / n, 3) for k, v in delta.most_common() if v / n >= 0.005},
            }
    finally:
        servers.stop()
        shutil.rmtree(root, ignore_errors=True)
    report("gateway-hops", args=vars(args), machine=machine(), load_average=os.getloadavg()[0], **out)


if __name__ == "__main__":
    main()

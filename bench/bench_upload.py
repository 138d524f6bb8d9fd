"""Bulk upload and batched staging benchmark (issue 12).

1. ``upload_tree``: ``lakefs-core fs upload --recursive`` of ``--files`` x 1 KiB files (a fresh CLI
   process each time, as a user runs it) against ``rclone copy`` of the same tree to a local
   directory, after one untimed warm-up run of each; in each round both write a fresh tree, in
   alternating order, nothing deleted in between; best round of each and the median of the
   rounds' ratios. The CLI runs from compiled bytecode, as installed. Modes: the embedded default
   (SQLite + local namespace) and PostgreSQL + local (a ``bench_upload`` database on the test server,
   created afresh for each run).
   Target: lakefs/rclone throughput ratio >= 0.5.
2. ``upload_tree_requests`` (``--s3``): the same upload to S3 + DynamoDB on one moto_server, through
   two counting proxies (one for S3, one for DynamoDB); reports requests per object. Target: at most
   1 PUT per object plus 1/100 of a KV batch.
3. ``batched_staging``: ``Graveler.set_entries`` of batches of ``--batch`` entries on memory, SQLite
   and PostgreSQL, in-process, one batch after the other; entries/s and the median over
   ``--staging-rounds`` rounds (15: a round takes about a second, and this machine's per-round
   ratios spread from 0.20 to 0.42 within one run) of the ratio to memory in the same round.
   Target: >= 0.3. Then the same with ``--writers`` concurrent writers on every driver (context:
   how each driver scales with writers; the target is the sequential figure).

Run: ``.venv/bin/python -m bench.bench_upload [--files 5000] [--rounds 3] [--s3] [--writers 4]
[--staging-only] [--staging-rounds 15]``. Every tree is written under ``$TMPDIR``: on an ext4 mounted
with ``discard``, creating files in some directories slowed ten-fold after large deletes (RESULTS,
stop 31), so point ``TMPDIR`` at a directory where creating a file is as fast as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from bench.common import machine, make_records, report
from lakefs_core.format.records import ValueRecord
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.stores import StoreRegistry

PG_ADMIN = os.environ.get("LAKEFS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_DB = "bench_upload"


def make_tree(root: Path, files: int, size: int = 1024) -> Path:
    body = b"x" * size
    for i in range(files):
        d = root / f"d{i % 50:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:06d}.bin").write_bytes(body)
    return root


def user_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LAKEFS_CORE")}
    # An installed package runs from compiled bytecode; a checkout under PYTHONDONTWRITEBYTECODE
    # (set on some CI machines) would recompile ~100 modules per CLI process (~0.15 s here).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        USER="bench",
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "lakefs_core.cli", *args], env=env, capture_output=True, check=False
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"lakefs-core {' '.join(args)}: {proc.stderr.decode()[-2000:]}")
    return seconds


def rclone(src: Path, dst: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["env", "-u", "AWS_CA_BUNDLE", "rclone", "copy", str(src), str(dst)], check=True)
    return time.perf_counter() - t0


async def _pg_url() -> str:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN)
    try:
        # A fresh database per run: a KV table grown by earlier runs (hundreds of MB after a few)
        # makes every insert slower and the figures depend on how often the benchmark ran before.
        await conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {PG_DB}")
    finally:
        await conn.close()
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + PG_DB


def upload_tree(tmp: Path, src: Path, files: int, rounds: int, *, mode: str, kv_url: str | None) -> None:
    home = tmp / f"home-{mode}"
    env = user_env(home, **({"LAKEFS_CORE__KV_URL": kv_url} if kv_url else {}))
    repo = f"bench-{uuid.uuid4().hex[:8]}"
    cli(env, "repo", "create", f"lakefs://{repo}", f"local://{tmp / ('ns-' + repo)}")
    upload = ("fs", "upload", "-r", "--source", str(src), "--no-progress")
    cli(env, *upload, f"lakefs://{repo}/main/warm-up/")  # bytecode compiled, caches filled
    rclone(src, tmp / f"rclone-{mode}-warm-up")
    best = {"rclone": float("inf"), "lakefs": float("inf")}
    pairs: list[tuple[float, float]] = []
    for r in range(rounds):
        # Each tool writes a fresh tree and nothing is deleted between timed runs (deleting 5,000
        # files slows the next writer on this machine); the order alternates between rounds.
        os.sync()
        runs = {
            "rclone": functools.partial(rclone, src, tmp / f"rclone-{mode}-{r}"),
            "lakefs": functools.partial(cli, env, *upload, f"lakefs://{repo}/main/r{r}/"),
        }
        took: dict[str, float] = {}
        for name in sorted(runs, reverse=bool(r % 2)):
            took[name] = runs[name]()
            os.sync()  # the run's writeback must not land in the next timed run
        rc, up = took["rclone"], took["lakefs"]
        best["rclone"], best["lakefs"] = min(best["rclone"], rc), min(best["lakefs"], up)
        pairs.append((rc, up))
    ratios = sorted(rc / up for rc, up in pairs)
    report(
        "upload_tree",
        mode=mode,
        files=files,
        file_bytes=1024,
        rounds=rounds,
        rclone_seconds=round(best["rclone"], 3),
        lakefs_seconds=round(best["lakefs"], 3),
        lakefs_files_per_second=round(files / best["lakefs"], 1),
        ratio_to_rclone=round(best["rclone"] / best["lakefs"], 3),
        # each round's rclone and lakefs runs are adjacent in time: the median of their ratios is
        # steadier than best-of when the disk's speed drifts between rounds
        median_round_ratio=round(ratios[len(ratios) // 2], 3),
        rounds_seconds=[(round(rc, 2), round(up, 2)) for rc, up in pairs],
        **machine(),
    )


@contextlib.contextmanager
def _moto(tmp: Path) -> Iterator[str]:
    from tests.support.moto import MotoServer

    server = MotoServer("us-east-1")
    server.start(tmp)
    try:
        yield server.endpoint
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def _proxy(upstream: str) -> AsyncIterator[object]:
    from tests.support.s3proxy import ThrottlingProxy

    async with ThrottlingProxy(upstream, throttle_share=0.0) as proxy:
        yield proxy


async def upload_requests(tmp: Path, src: Path, files: int) -> None:
    import aioboto3

    from tests.support.moto import ACCESS_KEY, SECRET_KEY

    with _moto(tmp) as endpoint:
        async with _proxy(endpoint) as s3p, _proxy(endpoint) as kvp:
            s3_endpoint, kv_endpoint = s3p.endpoint, kvp.endpoint  # type: ignore[attr-defined]
            async with aioboto3.Session().client(
                "s3",
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY,
            ) as s3:
                await s3.create_bucket(Bucket="bench")
            config = tmp / "s3.yaml"
            config.write_text(
                f"s3:\n  region: us-east-1\n  endpoint_url: {s3_endpoint}\n"
                f"  access_key_id: {ACCESS_KEY}\n  secret_access_key: {SECRET_KEY}\n"
            )
            env = user_env(
                tmp / "home-s3",
                LAKEFS_CORE_CONFIG=str(config),
                LAKEFS_CORE__KV_URL=f"dynamodb://kvstore?region=us-east-1&endpoint={kv_endpoint}",
                AWS_ACCESS_KEY_ID=ACCESS_KEY,
                AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            )
            # repo create runs in its own process (a CLI process each), before counting starts
            await asyncio.to_thread(cli, env, "repo", "create", "lakefs://bench", "s3://bench/repo")
            for p in (s3p, kvp):
                p.reset_counts()  # type: ignore[attr-defined]
            args = ("fs", "upload", "-r", "lakefs://bench/main/t/", "--source", str(src), "--no-progress")
            seconds = await asyncio.to_thread(cli, env, *args)
            s3_counts = dict(s3p.requests)  # type: ignore[attr-defined]
            kv_requests = sum(kvp.requests.values())  # type: ignore[attr-defined]
    report(
        "upload_tree_requests",
        mode="s3+dynamodb (moto)",
        files=files,
        seconds=round(seconds, 2),
        s3_requests=s3_counts,
        s3_puts_per_object=round(s3_counts.get("PutObject", 0) / files, 4),
        dynamodb_requests=kv_requests,
        dynamodb_requests_per_object=round(kv_requests / files, 4),
    )


async def _staging_rate(tmp: Path, url: str, records: list[ValueRecord], batch: int, writers: int) -> float:
    """Entries/s of ``writers`` tasks staging disjoint slices of ``records`` but its last 10 (the
    warm-up's), each one batch after the other, on a fresh repository of a fresh store."""
    kv = await open_kv(url)
    stores = StoreRegistry()
    try:
        g = Graveler(kv, stores, GravelerSettings())
        repo = f"stage-{uuid.uuid4().hex[:8]}"
        await g.create_repository(repo, f"local://{tmp / repo}")
        # warm-up on keys of its own: staging a key again is an overwrite, which is not what is measured
        measured = records[:-10]
        await g.set_entries(repo, "main", records[-10:])

        async def writer(w: int) -> None:
            for i in range(w * batch, len(measured), writers * batch):
                await g.set_entries(repo, "main", measured[i : i + batch])

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        return len(measured) / (time.perf_counter() - t0)
    finally:
        await stores.close()
        await kv.close()


async def batched_staging(
    tmp: Path, entries: int, batch: int, pg_url: str | None, *, writers: int = 1, rounds: int = 5
) -> None:
    """Each round measures every driver once, in an order that rotates between rounds; a driver's
    ratio is the median of its per-round ratios to the memory driver of the same round (this
    machine's CPU speed drifts by 2x within a minute, which one pass per driver would pick up as a
    ratio). ``writers`` 1 is the issue's sequential measure; more shows how a driver scales."""
    records = make_records(entries + 10)
    urls = {"memory": "memory://", "sqlite": f"sqlite:///{tmp / f'staging-{writers}.sqlite3'}"}
    if pg_url:
        urls["postgres"] = pg_url
    names = list(urls)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(await _staging_rate(tmp, urls[name], records, batch, writers))
    ratios = {
        name: sorted(rate / mem for rate, mem in zip(runs[name], runs["memory"], strict=True))
        for name in names
        if name != "memory"
    }
    report(
        "batched_staging",
        entries=entries,
        batch=batch,
        writers=writers,
        rounds=rounds,
        entries_per_second_median={k: round(sorted(v)[len(v) // 2]) for k, v in runs.items()},
        median_round_ratio={k: round(v[len(v) // 2], 3) for k, v in ratios.items()},
        round_ratios={k: [round(x, 3) for x in v] for k, v in ratios.items()},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--writers", type=int, default=4, help="batched staging again with this many concurrent writers"
    )
    parser.add_argument("--staging-only", action="store_true", help="only the batched staging measures")
    parser.add_argument(
        "--staging-rounds", type=int, default=15, help="rounds of the batched staging measures"
    )
    parser.add_argument("--s3", action="store_true", help="also count requests on S3 + DynamoDB (moto)")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as name:
        tmp = Path(name)
        src = make_tree(tmp / "src", args.files)
        pg_url = None if args.no_postgres else asyncio.run(_pg_url())
        if not args.staging_only:
            upload_tree(
                tmp, src, args.files, args.rounds, mode="sqlite+local (embedded default)", kv_url=None
            )
            if pg_url:
                upload_tree(tmp, src, args.files, args.rounds, mode="postgres+local", kv_url=pg_url)
            if args.s3:
                asyncio.run(upload_requests(tmp, src, args.files))
        rounds = args.staging_rounds
        asyncio.run(batched_staging(tmp, args.entries, args.batch, pg_url, rounds=rounds))
        if args.writers > 1:
            asyncio.run(
                batched_staging(tmp, args.entries, args.batch, pg_url, writers=args.writers, rounds=rounds)
            )


if __name__ == "__main__":
    main()

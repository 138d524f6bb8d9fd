"""Shared benchmark helpers: synthetic lakeFS-like records, timing, JSON reporting."""

from __future__ import annotations

import gc
import json
import os
import platform
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from lakefs_core.format.records import ValueRecord, make_entry

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def object_key(i: int) -> bytes:
    """A realistic data-lake path: tables / partitions / part files."""
    month, day = (i // 1000) % 12 + 1, (i // 40) % 28 + 1
    return f"warehouse/table{i % 37:02d}/date=2026-{month:02d}-{day:02d}/part-{i:08d}.parquet".encode()


def make_records(n: int, *, seed: int = 0) -> list[ValueRecord]:
    """``n`` records with distinct keys, sorted, each with a real serialised Entry."""
    rng = random.Random(seed)
    keys = sorted(object_key(i) for i in range(n))
    out = []
    for key in keys:
        size = rng.randrange(1, 1 << 30)
        identity, data = make_entry(
            f"data/gabc{rng.getrandbits(40):010x}/{rng.getrandbits(96):024x}",
            size,
            f"{rng.getrandbits(128):032x}",
            last_modified=WHEN,
            content_type="application/octet-stream",
        )
        out.append(ValueRecord(key, identity, data))
    return out


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    """Best wall time of ``repeat`` runs (garbage collection disabled while timing)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        finally:
            gc.enable()
    return best


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - t0


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def report(name: str, **fields: Any) -> None:
    print(json.dumps({"bench": name, **fields}, sort_keys=True), flush=True)


def moto_s3_settings(endpoint: str, **overrides: Any) -> Any:
    """S3 settings for a moto_server (or a proxy in front of one) with the test credentials."""
    from lakefs_core.block.s3_settings import S3Settings
    from tests.support.moto import ACCESS_KEY, SECRET_KEY

    values: dict[str, Any] = {
        "region": "us-east-1",
        "endpoint_url": endpoint,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": SECRET_KEY,
    }
    return S3Settings(**(values | overrides))

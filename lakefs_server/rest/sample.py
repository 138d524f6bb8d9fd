"""``sample_data``: lakeFS's quickstart-style content for a new repository.

A README, a parquet table of lakes (at least 512 KiB: rows generated deterministically), a
markdown note on its source and a folder of images, committed on the default branch, which is then
protected (lakeFS's quickstart protects ``main``).
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Final

from lakefs_core.offloop import run_cpu
from lakefs_core.refs.model import Repository
from lakefs_core.repos.protection import Rules
from lakefs_server.rest.app import RestDeps

ROWS: Final = 40_000
README: Final = b"""# Welcome to the lakeFS sample repository

This repository was created with sample data: `lakes.parquet` (a table of lakes),
`data/lakes.source.md` (where the table comes from) and `images/` (pictures).
The default branch is protected: create a branch, change it, commit and merge back.
"""
SOURCE_NOTE: Final = b"""# Source of lakes.parquet

Generated rows in the shape of the lakeFS quickstart's lakes table
(name, country, type, depth in metres, area in square kilometres, elevation).
"""
COUNTRIES: Final = ("Canada", "Finland", "Russia", "United States", "Sweden", "Chile", "Kenya", "China")
KINDS: Final = ("tectonic", "glacial", "volcanic", "oxbow", "reservoir")


def lakes_parquet() -> bytes:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = pa.table(
        {
            "lake_name": [f"Lake {i:05d}" for i in range(ROWS)],
            "country": [COUNTRIES[(i * 7) % len(COUNTRIES)] for i in range(ROWS)],
            "type": [KINDS[(i * 3) % len(KINDS)] for i in range(ROWS)],
            "depth_m": [float((i * 7919) % 1700) + 0.5 for i in range(ROWS)],
            "area_sq_km": [float((i * 104729) % 82100) / 10 for i in range(ROWS)],
            "elevation_m": [int((i * 15485863) % 5000) - 400 for i in range(ROWS)],
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="NONE")
    return out.getvalue()


def png(width: int, height: int, seed: int) -> bytes:
    """A small deterministic RGB PNG."""
    rows = b"".join(
        b"\x00" + bytes((x * seed + y * 31) % 256 for x in range(width) for _ in range(3))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


async def populate(deps: RestDeps, repo: Repository, committer: str) -> None:
    files: dict[str, tuple[bytes, str]] = {
        "README.md": (README, "text/markdown"),
        "lakes.parquet": (await run_cpu(lakes_parquet), "application/octet-stream"),
        "data/lakes.source.md": (SOURCE_NOTE, "text/markdown"),
    }
    for i, name in enumerate(("duckdb-main-02.png", "lakefs-logo.png", "waterfall.png")):
        files[f"images/{name}"] = (png(64, 48, i + 3), "image/png")
    branch = repo.default_branch
    for path, (data, content_type) in files.items():
        await deps.objects.upload(repo.id, branch, path, data, content_type=content_type)
    await deps.graveler.commit(repo.id, branch, committer=committer, message="Add sample data")
    await deps.graveler.set_branch_protection(repo.id, Rules.of([branch]), None)

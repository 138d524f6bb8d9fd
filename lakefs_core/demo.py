"""``make demo``: a short tour of lakefs-core on the embedded default (SQLite + a local directory).

Creates a repository in a fresh demo directory, writes objects, commits, branches, changes and
deletes on the branch, diffs, merges back, tags, reads an old version, and finally shows that the
committed metadata are real lakeFS-compatible SSTables (ranges and a metarange) by inspecting them.
No server is started. Run ``python -m lakefs_core.demo [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from pydantic import SecretStr

from lakefs_core.cli.sst import inspect_table
from lakefs_core.committed.model import DiffRecord
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core

SIGNS = {"added": "+", "removed": "-", "changed": "~"}


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def show_diff(records: list[DiffRecord]) -> None:
    for d in records:
        print(f"  {SIGNS[d.type.value]} {d.key.decode()}")


async def tour(root: Path) -> None:
    # The same opening as the CLI's (lakefs_core.wiring): KV, block stores, caches, Graveler, Objects.
    core = await open_core(CoreSettings(kv_url=SecretStr(f"sqlite:///{root / 'kv.sqlite3'}")))
    g, objects = core.graveler, core.objects
    try:
        namespace = f"local://{root / 'storage' / 'demo-repo'}"
        say(f"create repository demo-repo at {namespace}")
        await g.create_repository("demo-repo", namespace)

        say("upload 5 objects to main and commit")
        for day in range(1, 6):
            body = f"day,visits\n2026-01-0{day},{day * 100}\n".encode()
            key = f"events/day={day}/part-0.csv"
            await objects.upload("demo-repo", "main", key, body, content_type="text/csv")
        first = await g.commit("demo-repo", "main", committer="demo", message="Load five days of events")
        print(f"  commit {first.id[:16]}  metarange {first.metarange_id[:16]}")

        say("branch 'cleanup' from main; change one object, delete another")
        await g.create_branch("demo-repo", "cleanup", "main")
        await objects.upload("demo-repo", "cleanup", "events/day=3/part-0.csv", b"day,visits\n2026-01-03,0\n")
        await objects.delete("demo-repo", "cleanup", "events/day=5/part-0.csv")
        show_diff([d async for d in g.diff_uncommitted("demo-repo", "cleanup")])
        await g.commit("demo-repo", "cleanup", committer="demo", message="Fix day 3, drop day 5")

        say("merge cleanup into main")
        merged = await g.merge("demo-repo", "cleanup", "main", committer="demo")
        print(f"  merge commit {merged.id[:16]} parents {[p[:12] for p in merged.parents]}")
        show_diff([d async for d in g.diff("demo-repo", "main~1", "main")])
        await g.create_tag("demo-repo", "v1", "main")

        say("read the same path at three refs")
        for ref in ("main~1", "v1", first.id):
            data = await objects.read_all("demo-repo", ref, "events/day=3/part-0.csv")
            text = data.decode().splitlines()[-1]
            print(f"  {ref[:16]:16}  events/day=3/part-0.csv -> {text}")

        say("log of main (first parent)")
        async for c in g.log("demo-repo", "main"):
            print(f"  {c.id[:16]}  {c.message}")

        say("the commit's metadata are RocksDB-compatible SSTables (lakeFS ranges/metaranges)")
        tables = sorted((root / "storage" / "demo-repo" / "_lakefs").glob("[0-9a-f]" * 64))
        for path in tables:
            report = inspect_table(path.read_bytes(), str(path), records=False)
            print(
                f"  {path.name[:16]}  kind={report['kind']:10}  records={report['count']}  "
                f"id_ok={report['computed_id'] == path.name}"
            )
    finally:
        await core.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description="A short tour of lakefs-core on the embedded default.")
    parser.add_argument("--dir", type=Path, help="demo directory (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="lakefs-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"demo directory: {root}")
    try:
        asyncio.run(tour(root.resolve()))
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("\ndemo finished")


if __name__ == "__main__":
    main()

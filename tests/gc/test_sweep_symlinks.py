"""GC never deletes through a symbolic link planted in a local namespace (issue 32, item 2).

Real ``lakefs-gc mark --lite`` and ``lakefs-gc sweep`` processes on SQLite + local namespaces:

- a genuine mark lists real garbage under ``data/<slice>/``; then ``data/<slice>`` is replaced by a
  link to an outside directory holding files of the same names (the mark files are not touched, so
  a sweep that checks their digests runs all the same): the sweep deletes nothing outside, reports
  those keys failed (``SymlinkRefused``, in ``sweep/failed.text``) and deletes the other garbage;
- a namespace whose ``data/`` is a link to ANOTHER repository's ``data/``: GC of the first lists
  nothing there and deletes none of the second's live objects, which still read.

On c5cbe05 the first sweep deleted the outside files and the second run deleted every object of
the other repository.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from lakefs_core.block.local_keys import SYMLINK_REFUSED
from lakefs_core.kv import open_kv
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.repos.objects import Objects
from lakefs_gc.runs.layout import RunLayout
from tests.block.test_local_symlinks import snapshot
from tests.gc.mark_support import MARK_NOW, Clock, build_repo
from tests.gc.test_mark import deleted_set
from tests.support.timing import scaled

GC = [sys.executable, "-m", "lakefs_gc.cli"]
NOW = MARK_NOW.isoformat().replace("+00:00", "Z")


def gc(config: Path, *args: str) -> dict[str, object]:
    proc = subprocess.run(
        [*GC, *args, "--config", str(config)], capture_output=True, timeout=scaled(300), check=False
    )
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0 and "Traceback" not in err, f"{args}: exit {proc.returncode}: {err}"
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


async def test_a_sweep_never_deletes_through_a_linked_slice(tmp_path: Path) -> None:
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    root = tmp_path / "ns"
    config = tmp_path / "core.yaml"
    config.write_text(f"kv_url: {kv_url}\n")
    kv = await open_kv(kv_url)
    clock = Clock()
    g = Graveler(kv, StoreRegistry(), clock=clock)
    try:
        built = await build_repo(g, clock, "repo1", f"local://{root}", local_root=str(root))
        run_id = str(gc(config, "mark", "lakefs://repo1", "--lite", "--now", NOW)["mark"]["run_id"])  # type: ignore[index]
        marked = await deleted_set(g, built, run_id)
    finally:
        await g.stores.close()
        await kv.close()
    in_slices = sorted(a for a in marked if a.startswith("data/"))
    assert in_slices, "the mark found garbage under data/"
    victim_slice = in_slices[0].split("/")[1]
    captured = sorted(a for a in marked if a.startswith(f"data/{victim_slice}/"))
    # The slice moves aside; in its place a link to a directory holding files of the same names.
    outside = tmp_path / "outside"
    outside.mkdir()
    for address in captured:
        (outside / address.rsplit("/", 1)[1]).write_bytes(b"someone else's data")
    (root / "data" / victim_slice).rename(tmp_path / "aside")
    (root / "data" / victim_slice).symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)

    report = gc(config, "sweep", "lakefs://repo1", "--mark-id", run_id)

    assert snapshot(outside) == before  # nothing outside the namespace was deleted
    assert report["failed"] == len(captured) and report["deleted"] == len(marked) - len(captured)
    # still garbage: listed, with why, for the operator and a later sweep
    failed_log = (root / RunLayout(StorageNamespace(f"local://{root}"), run_id).failed).read_text()
    for address in captured:
        assert f"{address}\t{SYMLINK_REFUSED}" in failed_log, failed_log
    for address in set(marked) - set(captured):
        assert not (root / address).exists()


async def test_gc_of_a_namespace_whose_data_links_to_another_repository(tmp_path: Path) -> None:
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    config = tmp_path / "core.yaml"
    config.write_text(f"kv_url: {kv_url}\n")
    ns_a, ns_b = tmp_path / "ns-a", tmp_path / "ns-b"
    kv = await open_kv(kv_url)
    clock = Clock()
    g = Graveler(kv, StoreRegistry(), clock=clock)
    objects = Objects(g)
    try:
        await g.create_repository("victim", f"local://{ns_b}")
        for i in range(5):
            await objects.upload("victim", "main", f"live/{i}.csv", f"victim row {i}".encode())
        await g.commit("victim", "main", committer="t", message="live data")
        await g.create_repository("attacker", f"local://{ns_a}")
        await objects.upload("attacker", "main", "own.csv", b"attacker's own")
        await g.commit("attacker", "main", committer="t", message="own")
    finally:
        await g.stores.close()
        await kv.close()
    # The attacker's data/ becomes a link to the victim's (as a hostile operator, or a shared
    # mount, could make it).
    shutil.rmtree(ns_a / "data")
    (ns_a / "data").symlink_to(ns_b / "data", target_is_directory=True)
    before = snapshot(ns_b / "data")

    mark = gc(config, "mark", "lakefs://attacker", "--lite", "--now", NOW)["mark"]
    sweep = gc(config, "sweep", "lakefs://attacker", "--mark-id", str(mark["run_id"]))  # type: ignore[index]

    assert snapshot(ns_b / "data") == before
    assert sweep["deleted"] == 0
    kv = await open_kv(kv_url)
    g = Graveler(kv, StoreRegistry())
    try:
        for i in range(5):
            assert await Objects(g).read_all("victim", "main", f"live/{i}.csv") == f"victim row {i}".encode()
    finally:
        await g.stores.close()
        await kv.close()

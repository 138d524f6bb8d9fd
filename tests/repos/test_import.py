"""Import (lakefs_core/repos/importing.py): entries pointing at existing objects in place, one commit,
never through staging; the destination prefix replaced, the rest of the branch and its staging kept;
hostile keys refused; S3 sources on moto; retention GC never deletes imported objects; a ``lakefs-core
import`` process killed with SIGKILL mid-import leaves no commit and a re-run completes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, CanceledError, NoChangesError, NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.importing import WATCH_EVERY, ImportWatch
from lakefs_core.repos.objects import Objects
from tests.block.conftest import create_bucket, raw_client, s3_settings
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer

FILES = {"a/x.csv": b"ax", "a/y.csv": b"ay", "b.txt": b"b", "c/d/e.parquet": b"cde", "a.txt": b"a-dot"}


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)


async def listing(o: Objects, repo: str, ref: str, prefix: str = "") -> dict[str, bytes]:
    page = await o.list(repo, ref, prefix=prefix, amount=1000)
    return {s.path: await o.read_all(repo, ref, s.path) for s in page.objects}


@pytest.fixture
async def g(tmp_path: Path) -> Graveler:
    graveler = Graveler(MemoryKVStore(), StoreRegistry())
    await graveler.create_repository("imp1", f"local://{tmp_path / 'ns'}")
    return graveler


async def test_import_replaces_the_prefix_in_one_commit(g: Graveler, tmp_path: Path) -> None:
    o = Objects(g)
    await o.upload("imp1", "main", "imported/stale.csv", b"old")
    await o.upload("imp1", "main", "keep/me.csv", b"kept")
    await g.commit("imp1", "main", committer="t", message="before")
    await o.upload("imp1", "main", "staged.csv", b"staged")
    src = tmp_path / "src"
    write_tree(src, FILES)
    head = (await g.branch("imp1", "main")).commit_id
    result = await g.import_objects("imp1", "main", "imported", str(src), committer="importer")
    assert result.entries == len(FILES)
    commit = await g.get_commit("imp1", result.commit_id)
    assert commit.parents == (head,) and commit.metadata["import_source"] == f"local://{src}"
    assert await listing(o, "imp1", result.commit_id, "imported/") == {
        f"imported/{k}": v for k, v in FILES.items()
    }
    stat = await o.stat("imp1", "main", "imported/a/x.csv")
    assert stat.address_type == "FULL" and stat.physical_address == f"local://{src}/a/x.csv"
    assert await o.read_all("imp1", "main", "keep/me.csv") == b"kept"
    assert await o.read_all("imp1", "main", "staged.csv") == b"staged"  # staging untouched
    assert (await g.branch("imp1", "main")).commit_id == result.commit_id
    # Re-import after the source changed: the prefix is replaced, not merged.
    (src / "b.txt").unlink()
    (src / "new.bin").write_bytes(b"n")
    again = await g.import_objects("imp1", "main", "imported/", f"local://{src}", committer="importer")
    got = await listing(o, "imp1", again.commit_id, "imported/")
    assert "imported/b.txt" not in got and got["imported/new.bin"] == b"n" and len(got) == len(FILES)


async def test_import_into_the_root_and_refusals(g: Graveler, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src, {"x": b"1"})
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="no objects under"):
        await g.import_objects("imp1", "main", "p/", str(tmp_path / "empty"), committer="t")
    with pytest.raises(NotFoundError, match="no such directory"):
        await g.import_objects("imp1", "main", "p/", str(tmp_path / "missing"), committer="t")
    with pytest.raises(BadInputError, match="not a directory"):
        await g.import_objects("imp1", "main", "p/", str(src / "x"), committer="t")
    await g.import_objects("imp1", "main", "p/", str(src), committer="t")
    with pytest.raises(NoChangesError, match="changes nothing"):  # the same objects again
        await g.import_objects("imp1", "main", "p/", str(src), committer="t")
    with pytest.raises(NotFoundError):
        await g.import_objects("imp1", "nope", "p/", str(src), committer="t")
    long = tmp_path / "long"
    write_tree(long, {"d/" + "k" * 250 + "/" + "z" * 250: b"x"})
    head = (await g.branch("imp1", "main")).commit_id
    with pytest.raises(BadInputError, match="1024 bytes"):
        await g.import_objects("imp1", "main", "p" * 600 + "/", str(long), committer="t")
    assert (await g.branch("imp1", "main")).commit_id == head  # nothing committed
    root = await g.import_objects("imp1", "main", "", str(src), committer="t")
    assert await listing(Objects(g), "imp1", root.commit_id) == {"x": b"1"}


async def test_import_from_s3(moto: Callable[[str], MotoServer], tmp_path: Path) -> None:
    server = moto("us-east-1")
    await create_bucket(server, "imports")
    async with raw_client(server) as s3:
        for key, body in FILES.items():
            await s3.put_object(Bucket="imports", Key=f"landing/{key}", Body=body)
        await s3.put_object(Bucket="imports", Key="elsewhere/z", Body=b"z")
    g = Graveler(MemoryKVStore(), StoreRegistry(s3=s3_settings(server.endpoint)))
    try:
        await g.create_repository("imp2", f"local://{tmp_path / 'ns2'}")
        result = await g.import_objects("imp2", "main", "raw/", "s3://imports/landing", committer="t")
        o = Objects(g)
        assert await listing(o, "imp2", "main", "raw/") == {f"raw/{k}": v for k, v in FILES.items()}
        assert (await o.stat("imp2", "main", "raw/a.txt")).physical_address == "s3://imports/landing/a.txt"
        assert result.entries == len(FILES)
    finally:
        await g.stores.close()


async def test_gc_never_deletes_imported_objects(g: Graveler, tmp_path: Path) -> None:
    from lakefs_core.compute.executor import LiteExecutor
    from lakefs_core.service.deleter import store_deleter
    from lakefs_gc.mark.mark import MarkOptions, run_mark
    from lakefs_gc.rules import GCRules, save_rules
    from lakefs_gc.sweep.sweep import run_sweep

    with pytest.raises(BadInputError, match="overlaps"):  # lakeFS's rule: never from the namespace
        await g.import_objects("imp1", "main", "v1/", str(tmp_path / "ns" / "landing"), committer="t")
    with pytest.raises(BadInputError, match="overlaps"):
        await g.import_objects("imp1", "main", "v1/", str(tmp_path), committer="t")
    # Nor from another repository's namespace: ITS retention GC would delete what we point at.
    await g.create_repository("other", f"local://{tmp_path / 'other-ns'}")
    write_tree(tmp_path / "other-ns" / "data", {"o": b"theirs"})
    with pytest.raises(BadInputError, match="storage namespace of repository 'other'"):
        await g.import_objects("imp1", "main", "v1/", str(tmp_path / "other-ns" / "data"), committer="t")
    # Nor from a deleted repository's namespace: the reconciler purges it after the grace period.
    await g.delete_repository("other")
    with pytest.raises(BadInputError, match="deleted repository 'other'"):
        await g.import_objects("imp1", "main", "v1/", str(tmp_path / "other-ns" / "data"), committer="t")
    src = tmp_path / "landing"
    write_tree(src, FILES)
    await g.import_objects("imp1", "main", "v1/", str(src), committer="t")
    await g.import_objects("imp1", "main", "v1/", str(src / "a"), committer="t")  # v1's first import expires
    repo = await g.repository("imp1")
    ns = StorageNamespace.parse(repo.storage_namespace)
    store = await g.namespace_store(ns)
    await save_rules(store, ns, GCRules.of(0))
    now = datetime.now(UTC) + timedelta(days=3)
    with LiteExecutor(workers=2) as lite:
        marked = await run_mark(g, "imp1", lite, options=MarkOptions(now=now, min_age=timedelta(0)))
    await run_sweep(g, "imp1", marked.run_id, deleter=store_deleter(store))
    for rel, body in FILES.items():
        assert (src / rel).read_bytes() == body  # the first import's objects: expired, yet kept


async def test_sigkill_mid_import_leaves_no_commit_and_a_rerun_completes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    config = tmp_path / "core.yaml"
    config.write_text(f"kv_url: {kv_url}\n")
    kv = await open_kv(kv_url)
    g = Graveler(kv, StoreRegistry())
    src = tmp_path / "big"
    for d in range(40):
        write_tree(src, {f"d{d:02}/f{i:04}": f"{d}/{i}".encode() for i in range(100)})
    try:
        await g.create_repository("imp3", f"local://{tmp_path / 'ns3'}")
        head = (await g.branch("imp3", "main")).commit_id
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_CORE")}, "HOME": str(home)}
        cmd = [sys.executable, "-m", "lakefs_core.cli", "--config", str(config), "import", "--from", str(src),
               "--to", "lakefs://imp3/main/big/"]  # fmt: skip
        # SIGKILL with every range stored and the commit not yet made, then at random moments.
        for fault, delay in (("import:before-commit:kill", None), (None, 0.05), (None, 0.15)):
            run_env = {**env, "LAKEFS_CORE_FAULT": fault} if fault else env
            proc = await asyncio.create_subprocess_exec(
                *cmd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            if delay is not None:
                await asyncio.sleep(delay)
                if proc.returncode is None:
                    proc.send_signal(signal.SIGKILL)
            await proc.wait()
            assert proc.returncode == -signal.SIGKILL, "the import ended before its kill"
            assert (await g.branch("imp3", "main")).commit_id == head, "a killed import moved the branch"
        done = await asyncio.create_subprocess_exec(
            *cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _, err = await done.communicate()
        assert done.returncode == 0, err.decode()[-2000:]
        log = [c async for c in g.log("imp3", "main")]
        imports = [c for c in log if "import_source" in c.metadata]
        assert len(imports) == 1 and log[0].id == imports[0].id and log[0].parents == (head,)
        page = await Objects(g).list("imp3", "main", prefix="big/", amount=5000)
        assert len(page.objects) == 4000
    finally:
        await g.stores.close()
        await kv.close()


async def test_sigkill_mid_import_from_s3_then_rerun(
    moto: Callable[[str], MotoServer], tmp_path: Path
) -> None:
    """The same crash on an S3 source (moto): the killed import moved nothing, the re-run commits
    every object once."""
    import yaml

    server = moto("us-east-1")
    await create_bucket(server, "kill-imports")
    async with raw_client(server) as s3:
        for i in range(300):
            await s3.put_object(Bucket="kill-imports", Key=f"in/d{i % 5}/o{i:04}", Body=b"x")
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    config = tmp_path / "core.yaml"
    creds = {"source": "static", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
    s3_conf = {"endpoint_url": server.endpoint, "region": "us-east-1", "credentials": creds}
    config.write_text(yaml.safe_dump({"kv_url": kv_url, "s3": s3_conf}))
    kv = await open_kv(kv_url)
    g = Graveler(kv, StoreRegistry())
    try:
        await g.create_repository("imp4", f"local://{tmp_path / 'ns4'}")
        head = (await g.branch("imp4", "main")).commit_id
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_CORE")},
            "HOME": str(tmp_path),
        }
        cmd = [sys.executable, "-m", "lakefs_core.cli", "--config", str(config), "import", "--from",
               "s3://kill-imports/in", "--to", "lakefs://imp4/main/s3/"]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *cmd, env={**env, "LAKEFS_CORE_FAULT": "import:before-commit:kill"}, stderr=subprocess.PIPE
        )
        _, err = await proc.communicate()
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        assert (await g.branch("imp4", "main")).commit_id == head
        done = await asyncio.create_subprocess_exec(
            *cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _, err = await done.communicate()
        assert done.returncode == 0, err.decode()[-2000:]
        page = await Objects(g).list("imp4", "main", prefix="s3/", amount=1000)
        assert len(page.objects) == 300
        assert [
            c.parents for c in [await g.get_commit("imp4", (await g.branch("imp4", "main")).commit_id)]
        ] == [(head,)]
    finally:
        await g.stores.close()
        await kv.close()


class Watch(ImportWatch):
    """Records the checkpoints; stops the import once ``stop_at`` entries were built, or at its
    commit checkpoint when ``stop_at_commit``."""

    def __init__(self, stop_at: int | None = None, stop_at_commit: bool = False) -> None:
        self.built_deltas: list[int] = []
        self.commits = 0
        self.stop_at, self.stop_at_commit = stop_at, stop_at_commit

    async def built(self, entries: int) -> None:
        self.built_deltas.append(entries)
        if self.stop_at is not None and sum(self.built_deltas) >= self.stop_at:
            raise CanceledError("Canceled")

    async def committing(self) -> None:
        self.commits += 1
        if self.stop_at_commit:
            raise CanceledError("Canceled")


async def test_a_watch_sees_progress_and_stops_the_import(g: Graveler, tmp_path: Path) -> None:
    """Checkpoints every WATCH_EVERY entries and once before the commit; a stop at either leaves
    the branch as it was (no commit, nothing staged)."""
    src = tmp_path / "many"
    for d in range(5):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(500):
            (src / f"d{d}" / f"{i:03d}").write_bytes(b"")
    head = (await g.branch("imp1", "main")).commit_id
    for watch in (Watch(stop_at=WATCH_EVERY), Watch(stop_at_commit=True)):
        with pytest.raises(CanceledError):
            await g.import_objects("imp1", "main", "in/", str(src), committer="t", watch=watch)
        assert (await g.branch("imp1", "main")).commit_id == head
        assert await listing(Objects(g), "imp1", "main") == {}
    assert watch.built_deltas == [WATCH_EVERY, WATCH_EVERY, 500] and watch.commits == 1
    full = Watch()
    result = await g.import_objects("imp1", "main", "in/", str(src), committer="t", watch=full)
    assert sum(full.built_deltas) == result.entries == 2500 and full.commits == 1
    assert max(full.built_deltas) <= WATCH_EVERY

"""The sweep decides from the KV, never from the namespace (issue 32): every file a mark writes,
truncated, extended with a live address or one outside ``data/``, or swapped with another run's;
a part added or removed; the run record gone or not ``complete``; a checkpoint planted or edited.
Each time the sweep refuses (:class:`TamperedError`, exit 18), marks the run failed in its KV
record, and deletes nothing at all. SQLite KV + local namespace and PostgreSQL KV + S3 on moto.

One mark per store (plus a second run to swap files with); between variants the run's files and
its record pointer are put back as the mark left them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import TamperedError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.repos.objects import Objects
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.faults import ENV, InjectedFault
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, ns_relative
from lakefs_gc.runs.record import RunRecord, RunRecords, digest_of
from lakefs_gc.sweep.sweep import SweepOptions, SweepReport, run_sweep
from tests.block.conftest import create_bucket, s3_settings
from tests.gc.mark_support import Built, Clock, build_repo, stored_objects
from tests.gc.test_mark import options
from tests.support.moto import MotoServer
from tests.support.pg import PgDatabase

BUCKET = "gc-tampering"
OUTSIDE = ("../../outside/secret.txt", "_lakefs/dummy", "data/../../x", "/etc/passwd")


@dataclass(frozen=True)
class Spec:
    name: str
    kv_url: str
    namespace: str
    local_root: str | None
    s3: MotoServer | None = None


@pytest.fixture(params=["sqlite-local", pytest.param("postgres-s3", marks=pytest.mark.postgres)])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    """Resolved outside the test's event loop (the PostgreSQL fixture runs its own)."""
    if request.param == "sqlite-local":
        root = tmp_path / "ns"
        return Spec("sqlite-local", f"sqlite:///{tmp_path / 'kv.sqlite3'}", f"local://{root}", str(root))
    db: PgDatabase = request.getfixturevalue("pg_database")
    moto: Callable[[str], MotoServer] = request.getfixturevalue("moto")
    return Spec("postgres-s3", db.url, f"s3://{BUCKET}/t{uuid.uuid4().hex[:12]}", None, moto("us-east-1"))


@dataclass
class World:
    g: Graveler
    kv: KVStore
    built: Built
    store: BlockStore
    mark_id: str = ""
    other_id: str = ""
    saved: dict[str, bytes] = field(default_factory=dict)
    pointer: str = ""
    live: str = ""  # main's committed head object (relative)

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.built.ns, self.mark_id)

    async def record(self) -> tuple[str, RunRecord] | None:
        return await RunRecords(self.g, self.built.repo).read(self.mark_id)

    async def run_files(self, run_id: str) -> list[str]:
        """Every stored key of a run: its directory and its commits.csv."""
        layout = RunLayout(self.built.ns, run_id)
        prefix = self.built.ns.gc_path(run_id) + "/"
        keys = [i.key async for i in self.store.list(prefix) if isinstance(i, ObjectInfo)]
        return sorted([*keys, layout.commits_csv])

    async def restore(self) -> None:
        """The run's files and record pointer as the mark left them."""
        for key in await self.run_files(self.mark_id):
            if key not in self.saved:
                await self.store.delete(key)
        for key, data in self.saved.items():
            await self.store.put(key, data)
        partition = (await self.g.repository(self.built.repo)).partition
        await self.kv.set(partition, kvkeys.gc_run_key(self.mark_id), self.pointer.encode())

    async def sweep(self, **kw: object) -> SweepReport:
        return await run_sweep(
            self.g, self.built.repo, self.mark_id, deleter=store_deleter(self.store),
            options=SweepOptions(**kw),  # type: ignore[arg-type]
        )  # fmt: skip

    async def refused(self, what: str, reason: str | None = None) -> TamperedError:
        """The sweep refuses, deletes nothing, and the record says failed; then restore."""
        before = await stored_objects(self.store, self.built.ns)
        with pytest.raises(TamperedError) as refused:
            await self.sweep()
        error = refused.value
        assert await stored_objects(self.store, self.built.ns) == before, f"{what}: something was deleted"
        assert reason is None or error.reason == reason, f"{what}: {error.reason}: {error}"
        assert error.exit_code == 18 and "\n" not in str(error)
        found = await self.record()
        if error.reason != "no-record":
            assert found is not None and found[1].state == "failed", what
        assert self.built.ns.uri.split("://")[1].split("/")[0] in str(error) or error.file is None
        await self.restore()
        return error


async def _head_object(g: Graveler, b: Built) -> str:
    """The relative address of an object committed at main's head."""
    stat = (await Objects(g).list(b.repo, "main", amount=1)).objects[0]
    relative = stat.address_type == "RELATIVE"
    address = stat.physical_address if relative else b.ns.relative_of(stat.physical_address, 2)
    assert address is not None
    return address


@pytest.fixture
async def world(spec: Spec) -> AsyncIterator[World]:
    stores = StoreRegistry()
    if spec.s3 is not None:
        await create_bucket(spec.s3, BUCKET)
        stores = StoreRegistry(s3=s3_settings(spec.s3.endpoint))
    kv = await open_kv(spec.kv_url)
    clock = Clock()
    g = Graveler(kv, stores, clock=clock)
    try:
        built = await build_repo(
            g, clock, f"r{uuid.uuid4().hex[:8]}", spec.namespace, local_root=spec.local_root
        )
        w = World(g, kv, built, await g.namespace_store(built.ns))
        with LiteExecutor(workers=2) as executor:
            if spec.s3 is None:  # a second run to swap files with (on S3 a mark costs ~10 s)
                w.other_id = (await run_mark(g, built.repo, executor, options=options(partitions=3))).run_id
                await Objects(g).upload(built.repo, "main", "late.txt", b"late")  # the runs differ
            parts = 3 if spec.s3 is None else 1  # S3: each partition opens its own clients
            w.mark_id = (await run_mark(g, built.repo, executor, options=options(partitions=parts))).run_id
        w.saved = {key: await w.store.get(key) for key in await w.run_files(w.mark_id)}
        found = await w.record()
        assert found is not None and found[1].state == "complete"
        w.pointer = found[0]
        w.live = await _head_object(g, built)
        yield w
    finally:
        await stores.close()
        await kv.close()


def _variants(w: World, n: int, key: str, data: bytes, other: bytes | None) -> Iterator[tuple[str, bytes]]:
    name = key.rsplit("/", 2)[-2:]
    if data:
        yield f"{name} truncated", data[: len(data) // 2]
    yield f"{name} extended with a live address", data + f"{w.live}\n".encode()
    outside = OUTSIDE[n % len(OUTSIDE)]  # one per file, each used (the digest refuses them alike)
    yield f"{name} extended with {outside}", data + f"{outside}\n".encode()
    if other is not None and other != data:
        yield (
            f"{name} swapped with another run's" if w.other_id else f"{name} swapped with another file",
            other,
        )


async def every_tampered_file_is_refused(w: World) -> None:
    record = await w.record()
    assert record is not None
    recorded = {w.built.ns.key(rel) for rel in record[1].files}
    # Every file the sweep trusts is in the record (the Parquet report is not read by the sweep).
    trusted = {k for k in w.saved if "/deleted/" not in k and "/sweep" not in k}
    assert recorded == trusted and len(recorded) >= 7
    swapped, keys = 0, sorted(recorded)
    for n, key in enumerate(keys):
        if w.other_id:
            other_key = key.replace(w.mark_id, w.other_id)
            other = await w.store.get(other_key) if await w.store.exists(other_key) else None
        else:
            other = w.saved[keys[(n + 1) % len(keys)]]  # the run's next file
        variants = list(_variants(w, n, key, w.saved[key], other))
        if not w.other_id:  # the second store: one variant per file, every kind used in turn
            variants = [variants[n % len(variants)]]
        for what, body in variants:
            await w.store.put(key, body)
            await w.refused(what)
            swapped += "swapped" in what
    assert swapped >= (3 if w.other_id else 1)  # run.json, summary.json and uncommitted/ differ


async def parts_added_or_removed_and_records_are_refused(w: World) -> None:
    layout = w.layout
    await w.store.put(f"{layout.deleted_text}/part-99999", f"{w.live}\n".encode())
    await w.refused("an extra deleted.text part", "extra-file")
    await w.store.put(f"{layout.ranges}/part-99999", b"0" * 64 + b"\n")
    await w.refused("an extra ranges.txt part", "extra-file")
    await w.store.delete((await list_parts(w.store, layout.deleted_text))[-1])
    await w.refused("a deleted.text part removed", "missing-file")
    await w.store.delete(layout.commits_csv)
    await w.refused("commits.csv removed", "missing-file")
    await w.store.put(layout.checkpoint, b'{"mark_id": "%s", "part": 3}' % w.mark_id.encode())
    await w.refused("a planted checkpoint", "extra-file")
    partition = (await w.g.repository(w.built.repo)).partition
    await w.kv.delete(partition, kvkeys.gc_run_key(w.mark_id))
    await w.refused("no run record", "no-record")
    await w.store.put(
        f"{layout.deleted_text}/part-00000", w.saved[f"{layout.deleted_text}/part-00000"] + b"x\n"
    )
    with pytest.raises(TamperedError):
        await w.sweep()
    found = await w.record()
    assert found is not None and found[1].state == "failed"
    assert found[1].reason is not None and found[1].reason.startswith("digest: ")
    # The files put back as the mark left them: the run stays refused (its record is failed).
    for key, data in w.saved.items():
        await w.store.put(key, data)
    await w.refused("a run whose record is failed", "not-complete")


async def a_tampered_checkpoint_is_refused_and_a_clean_resume_completes(
    w: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "sweep:batch:3")  # killed after two checkpoints
    with pytest.raises(InjectedFault):
        await w.sweep(batch_size=1, checkpoint_every_batches=1)
    monkeypatch.delenv(ENV)
    found = await w.record()
    assert found is not None and found[1].state == "complete"
    assert found[1].checkpoint is not None and found[1].previous_checkpoint is not None
    checkpoint = await w.store.get(w.layout.checkpoint)
    w.saved = {key: await w.store.get(key) for key in await w.run_files(w.mark_id)}
    w.pointer = found[0]
    moved = json.loads(checkpoint) | {"part": 99}  # past every part: nothing would be swept
    await w.store.put(w.layout.checkpoint, json.dumps(moved).encode())
    await w.refused("a checkpoint moved forward", "digest")
    await w.store.delete(w.layout.checkpoint)
    await w.refused("the checkpoint removed", "missing-file")
    # A planted sweep.json is not taken for the sweep's: the sweep runs and replaces it.
    await w.store.put(w.layout.sweep_report, b'{"mark_id": "%s", "deleted": 0}' % w.mark_id.encode())
    report = await w.sweep(batch_size=1)
    assert report.deleted >= 1
    swept = await w.record()
    ns = w.built.ns
    assert swept is not None and swept[1].state == "swept"
    stored_report = await w.store.get(w.layout.sweep_report)
    assert swept[1].sweep_files[ns_relative(ns, w.layout.sweep_report)] == digest_of(stored_report)
    assert set(swept[1].sweep_files) == {
        ns_relative(ns, w.layout.sweep_report),
        ns_relative(ns, w.layout.failed),
    }
    assert await Objects(w.g).read_all(w.built.repo, "main", "a1")


async def test_a_tampered_run_is_refused_and_deletes_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One mark per store; every variant put back before the next (see the module docstring)."""
    await every_tampered_file_is_refused(world)
    await parts_added_or_removed_and_records_are_refused(world)
    await world.restore()
    if world.other_id:  # the checkpoint's handling does not depend on the store: SQLite + local only
        await a_tampered_checkpoint_is_refused_and_a_clean_resume_completes(world, monkeypatch)


async def test_reproduction_1_a_live_address_appended_to_the_marks_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32, reproduction 1: main's head object appended to ``deleted.text/part-00000``, then
    ``lakefs-gc sweep lakefs://repo --mark-id RUN``: refused with exit 18 on one line, the run
    marked failed, the head still readable."""
    import click

    from lakefs_core.service.cli import run
    from lakefs_gc.cli.jobs import sweep_cmd

    @click.group()
    def gc() -> None:
        """A stand-in group: the real one is lakefs_gc.cli's."""

    gc.add_command(sweep_cmd)
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    root = tmp_path / "ns"
    kv = await open_kv(kv_url)
    clock = Clock()
    g = Graveler(kv, StoreRegistry(), clock=clock)
    try:
        built = await build_repo(g, clock, "repo1", f"local://{root}", local_root=str(root))
        with LiteExecutor(workers=2) as executor:
            run_id = (await run_mark(g, built.repo, executor, options=options())).run_id
        store = await g.namespace_store(built.ns)
        head = await _head_object(g, built)
        part = f"{RunLayout(built.ns, run_id).deleted_text}/part-00000"
        await store.put(part, await store.get(part) + f"{head}\n".encode())
        config = tmp_path / "core.yaml"
        config.write_text(f"kv_url: {kv_url}\n")
        capsys.readouterr()
        args = ["sweep", "lakefs://repo1", "--mark-id", run_id, "--config", str(config)]
        assert await asyncio.to_thread(run, gc, args, "lakefs-gc") == 18
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "deleted.text/part-00000" in err and "run record" in err
        assert await store.exists(built.ns.key(head))
        page = await Objects(g).list(built.repo, "main", amount=1000)
        for stat in page.objects:  # every object of the namespace main references is readable
            if stat.address_type == "RELATIVE" or built.ns.relative_of(stat.physical_address, 2):
                await Objects(g).read_all(built.repo, "main", stat.path)
        found = await RunRecords(g, built.repo).read(run_id)
        assert found is not None and found[1].state == "failed"
    finally:
        await g.stores.close()
        await kv.close()

"""Mirror pins: a paused mirror's head (a source commit past retention) keeps its objects through a
mark and a sweep on the source; an unreachable mirrors database aborts the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import LakeFSError
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.pins import CombinedPins, StaticPins, open_mirror_pins
from lakefs_gc.sweep.sweep import SweepOptions, run_sweep
from lakefs_mirror.db import MirrorsDB, MirrorStatus
from lakefs_mirror.pins import MirrorPins
from tests.gc.mark_support import stored_objects
from tests.gc.test_mark import Env, deleted_set, expected, options


async def paused_mirror(url: str, head: str) -> None:
    async with await MirrorsDB.open(url) as db:
        mirror = await db.create_mirror(
            source_repo="repo1",
            source_region="eu",
            name="repo1-copy",
            region="us",
            storage_namespace="s3://mirror-bucket/repo1",
            paused=True,
        )
        await db.upsert_status(MirrorStatus(mirror.id, "branch", "main", source_head=head, mirror_head=head))
        # Another source repository's mirror head must not pin anything here.
        other = await db.create_mirror(
            source_repo="other", source_region="eu", name="o", region="us", storage_namespace="s3://b/o"
        )
        await db.upsert_status(MirrorStatus(other.id, "branch", "main", candidate="f" * 64))


async def test_paused_mirror_head_survives_mark_and_sweep(env: Env, tmp_path: Path) -> None:
    b = env.built
    url = f"sqlite:///{tmp_path / 'mirrors.sqlite3'}"
    await paused_mirror(url, b.commits["c1"])
    pins = await open_mirror_pins(url, source_region="eu")
    try:
        assert await pins.pinned_commits("repo1") == {b.commits["c1"]}
        with LiteExecutor() as executor:
            # Tags ignored: only the mirror's pin keeps c1 (a2 and a1 live nowhere else).
            result = await run_mark(env.g, b.repo, executor, options=options(tags_policy="ignore"), pins=pins)
        marked = await deleted_set(env.g, b, result.run_id)
        assert result.manifest.pins == (b.commits["c1"],)
        assert marked == (await expected(env, ["c3", "d", "c1"]))[1]
        assert b.addr["a2"] not in marked and b.addr["a1"] not in marked
        store = await env.g.namespace_store(b.ns)
        await run_sweep(
            env.g, b.repo, result.run_id, deleter=store_deleter(store), options=SweepOptions(), pins=pins
        )
        left = await stored_objects(store, b.ns)
        assert b.addr["a2"] in left and b.addr["a1"] in left
    finally:
        await pins.aclose()


async def test_unreachable_mirrors_db_aborts_the_mark(env: Env, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mirrors.sqlite3'}"
    await paused_mirror(url, env.built.commits["c1"])
    db = await MirrorsDB.open(url)
    await db.close()  # a closed database answers nothing: the pins are unknown
    pins = CombinedPins(StaticPins(), MirrorPins(db))
    with LiteExecutor() as executor, pytest.raises(LakeFSError):
        await run_mark(env.g, env.built.repo, executor, options=options(), pins=pins)


async def test_pin_sources_are_opened_from_the_registry(tmp_path: Path) -> None:
    """GC opens the mirror's pins by name (entry point ``mirror`` of ``lakefs_open.pin_sources``,
    which lakefs_mirror declares); an unknown source is a start-up error naming the group."""
    from importlib.metadata import entry_points

    from lakefs_core.errors import StartupError
    from lakefs_gc.pins import PIN_SOURCES_GROUP, CheckedPins, PinSource, open_pin_source
    from lakefs_mirror.pins import MirrorPins

    (mirror,) = [ep for ep in entry_points(group=PIN_SOURCES_GROUP) if ep.name == "mirror"]
    assert mirror.value == "lakefs_mirror.pins:open_pins"
    url = f"sqlite:///{tmp_path / 'mirrors.sqlite3'}"
    await paused_mirror(url, "a" * 64)
    pins = await open_mirror_pins(url, source_region="eu")
    try:
        assert isinstance(pins, CheckedPins) and isinstance(pins, PinSource)
        assert isinstance(pins._source, MirrorPins)
        assert await pins.pinned_commits("repo1") == {"a" * 64}
    finally:
        await pins.aclose()
    with pytest.raises(StartupError, match=f"'nowhere' is not installed .*{PIN_SOURCES_GROUP}") as info:
        await open_pin_source("nowhere", url)
    assert info.value.exit_code == 16


async def test_every_pinned_id_is_checked_whoever_answers(env: Env, tmp_path: Path) -> None:
    """A status row may hold anything: a malformed pin stops the mark (dropping it could expire a
    mirror head's objects), whether the source came from the registry or was handed in."""
    from lakefs_core.errors import CorruptDataError

    url = f"sqlite:///{tmp_path / 'mirrors.sqlite3'}"
    await paused_mirror(url, "not-a-commit")
    db = await MirrorsDB.open(url)
    try:
        with LiteExecutor() as executor, pytest.raises(CorruptDataError, match="not a commit id"):
            await run_mark(env.g, env.built.repo, executor, options=options(), pins=MirrorPins(db))
    finally:
        await db.close()
    pins = await open_mirror_pins(url)
    try:
        with pytest.raises(CorruptDataError, match="pin source 'mirror'"):
            await pins.pinned_commits("repo1")
    finally:
        await pins.aclose()

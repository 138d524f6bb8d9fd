"""``lakefs-gc mark`` / ``sweep`` commands (lakefs_gc.cli.jobs) on a SQLite core: a full lite run, the
sweep-only command refusing an unknown mark, and the lease refusing a second runner."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import click
import pytest

from lakefs_core.compute.child import build_command
from lakefs_core.compute.session import check_master, spark_session
from lakefs_core.errors import BadInputError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.service.cli import run
from lakefs_core.service.lease import kv_lease
from lakefs_gc.cli.jobs import mark_cmd, parse_duration, sweep_cmd
from tests.cli.helpers import run_probe
from tests.gc.mark_support import MARK_NOW, Built, Clock, build_repo, stored_objects
from tests.gc.test_mark import deleted_set


@click.group()
def gc() -> None:
    """A stand-in group: the real one is lakefs_gc.cli's."""


gc.add_command(mark_cmd)
gc.add_command(sweep_cmd)


@contextlib.asynccontextmanager
async def sqlite_repo(tmp_path: Path) -> AsyncIterator[tuple[Graveler, KVStore, Built, Path]]:
    """``build_repo``'s repository on a SQLite KV and a local namespace, with its core config file."""
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    root = tmp_path / "ns"
    kv = await open_kv(kv_url)
    clock = Clock()
    g = Graveler(kv, StoreRegistry(), clock=clock)
    try:
        built = await build_repo(g, clock, "repo1", f"local://{root}", local_root=str(root))
        config = tmp_path / "core.yaml"
        config.write_text(f"kv_url: {kv_url}\n")
        yield g, kv, built, config
    finally:
        await g.stores.close()
        await kv.close()


async def test_cli_mark_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with sqlite_repo(tmp_path) as (g, kv, built, config):
        now = MARK_NOW.isoformat().replace("+00:00", "Z")
        common = ["--config", str(config)]
        capsys.readouterr()
        # The CLI runs its own event loop: run it in a thread from this test's loop.
        code = await asyncio.to_thread(
            run, gc, ["mark", "lakefs://repo1", "--lite", "--now", now, *common], "t"
        )
        assert code == 0
        mark = json.loads(capsys.readouterr().out)["mark"]
        assert mark["success"] is True and mark["num_deleted_objects"] > 0
        marked = await deleted_set(g, built, mark["run_id"])
        store = await g.namespace_store(built.ns)
        before = set(await stored_objects(store, built.ns))
        args = ["sweep", "lakefs://repo1", "--mark-id", mark["run_id"], *common]
        assert await asyncio.to_thread(run, gc, args, "t") == 0
        report = json.loads(capsys.readouterr().out)
        assert (
            report["deleted"] == len(marked) and before - set(await stored_objects(store, built.ns)) == marked
        )
        # Unknown mark: not found (exit 2); the repository's lease held elsewhere: conflict (exit 3).
        args = ["sweep", "lakefs://repo1", "--mark-id", "nope", *common]
        assert await asyncio.to_thread(run, gc, args, "t") == 2
        lease = kv_lease(kv, "gc/repo1", "someone-else", 60)
        assert await lease.try_acquire()
        args = ["mark", "lakefs://repo1", "--lite", "--now", now, *common]
        assert await asyncio.to_thread(run, gc, args, "t") == 3


def test_parse_duration() -> None:
    assert parse_duration("24h").total_seconds() == 86400
    assert parse_duration("90").total_seconds() == 90
    assert parse_duration("0s").total_seconds() == 0
    with pytest.raises(Exception, match="duration"):
        parse_duration("1w")
    assert parse_duration("36500d").days == 36500
    # Bounded (was an OverflowError from timedelta), ASCII digits only (\d takes any script's).
    for text, needle in [
        ("36501d", "longer than 36500 days"),
        ("999999999999999999999d", "not a duration"),
        ("\u0663d", "not a duration"),
    ]:
        with pytest.raises(BadInputError, match=rf"^min_age: .*{needle}"):
            parse_duration(text)


@pytest.mark.parametrize("master", ["local\udcff", "local [2]", "", "x" * 513, "local\t[2]"])
def test_a_spark_master_that_cannot_name_one_is_refused_before_spark_starts(master: str) -> None:
    for build in (
        lambda: check_master(master),
        lambda: build_command(
            "mark", Path("a"), Path("r"), launcher="python", master=master, executor="spark", conf={}
        ),
        lambda: spark_session(master),
    ):
        with pytest.raises(BadInputError, match=r"^master: must be a Spark master URL"):
            build()
    for fine in ("local[*]", "local[2]", "yarn", "spark://host:7077", "k8s://https://h:443"):
        assert check_master(fine) == fine


_PROBE = """
import json, sys
from lakefs_gc.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


async def test_a_lite_run_on_sqlite_imports_neither_sqlalchemy_nor_pandas(tmp_path: Path) -> None:
    """``lakefs-gc mark --lite --sweep`` on the embedded default, in a fresh interpreter: its lease is
    a KV record (SQLAlchemy is ~0.45 s of CPU to import) and its Parquet report is built from
    buffers (``pa.array`` would import pandas, ~0.4 s), each a large share of a run that takes ~1 s."""
    async with sqlite_repo(tmp_path) as (*_, config):
        pass  # built and closed: the command opens the KV itself
    now = MARK_NOW.isoformat().replace("+00:00", "Z")
    argv = ["mark", "lakefs://repo1", "--lite", "--sweep", "--now", now, "--config", str(config)]
    result = await asyncio.to_thread(run_probe, tmp_path, _PROBE, *argv)
    assert result["code"] == 0
    modules = set(result["modules"])
    assert "lakefs_gc.mark.parquet" in modules and "lakefs_gc.sweep.sweep" in modules  # it ran both
    assert not {m.split(".")[0] for m in modules} & {"sqlalchemy", "pandas"}

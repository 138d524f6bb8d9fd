"""A ``lakefs-core`` command imports only what it uses (module sets, never timings).

Each run is ``lakefs_core.cli.main`` in a fresh interpreter with this checkout first on the path; it
reports the names in ``sys.modules`` after the command. On the embedded default (SQLite + a local
namespace) nothing of PostgreSQL, DynamoDB or S3 is imported, nor SQLAlchemy, nor tqdm when no
progress bar is shown, and only the invoked command's module of the CLI is; a PostgreSQL-configured
run imports asyncpg and still no SQLAlchemy (the KV store drives asyncpg directly).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import click
import pytest

from lakefs_core.cli import cli
from lakefs_core.service.cli import CLIGroup
from tests.cli.helpers import InProcess, run_probe
from tests.support.pg import PgDatabase

_PROBE = """
import json, sys
from lakefs_core.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""

# Drivers of backends the embedded default does not use.
OTHER_BACKENDS = (
    "sqlalchemy.dialects.postgresql",
    "asyncpg",
    "aioboto3",
    "aiobotocore",
    "botocore",
    "boto3",
    "lakefs_core.kv.dynamodb",
    "lakefs_core.block.s3",
)
COMMAND_MODULES = tuple(
    f"lakefs_core.cli.{name}"
    for name in ("branch", "config_cmd", "fs", "import_cmd", "refs_cmds", "repo", "sst")
)
# The facade's commit, import and purge paths, loaded when first used (~20 ms of start-up).
WRITE_PATHS = ("lakefs_core.repos.committing", "lakefs_core.repos.importing", "lakefs_core.repos.purge")
# What the group alone needs neither: the configuration schema and the session machinery.
CONFIGURATION = ("lakefs_core.cli.context", "pydantic", "yaml", "asyncio", "sqlalchemy")


def imported(tmp_path: Path, *args: str, **env: str) -> set[str]:
    """The modules imported by one successful CLI run in a fresh interpreter."""
    result = run_probe(tmp_path, _PROBE, *args, **env)
    assert result["code"] == 0, result
    return set(result["modules"])


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Each of ``names`` that is in ``modules``, itself or through one of its submodules."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def test_version_imports_no_configuration_and_no_command(tmp_path: Path) -> None:
    modules = imported(tmp_path, "--version")
    assert loaded(modules, CONFIGURATION + COMMAND_MODULES) == []


def test_fs_on_the_embedded_default_imports_no_other_backend(tmp_path: Path) -> None:
    namespace = f"local://{tmp_path / 'ns'}"
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "d" / "b.txt").write_text("b\n")
    imported(tmp_path, "repo", "create", "lakefs://startup", namespace)
    others = tuple(m for m in COMMAND_MODULES if m != "lakefs_core.cli.fs")
    for args in (
        ("fs", "upload", "-r", "-s", str(tree), "lakefs://startup/main/up/"),
        ("fs", "ls", "lakefs://startup/main/up/"),
        ("--json", "fs", "ls", "--recursive", "lakefs://startup/main/"),
    ):
        modules = imported(tmp_path, *args)
        assert "lakefs_core.kv.sqlite" in modules, args  # the probe saw the KV store opened
        # SQLite is driven through the sqlite3 module: no SQLAlchemy (~0.13 s of start-up); no
        # progress bar without a terminal, so no tqdm (~20 ms)
        unused = OTHER_BACKENDS + others + ("yaml", "sqlalchemy", "aiosqlite", "tqdm") + WRITE_PATHS
        assert loaded(modules, unused) == [], args


def test_a_postgresql_configured_run_imports_asyncpg_only(tmp_path: Path, pg_database: PgDatabase) -> None:
    env = {"LAKEFS_CORE__KV_URL": pg_database.url}
    namespace = f"local://{tmp_path / 'ns'}"
    (tmp_path / "f").write_text("one\n")
    imported(tmp_path, "repo", "create", "lakefs://startpg", namespace, **env)
    imported(tmp_path, "fs", "upload", "-s", str(tmp_path / "f"), "lakefs://startpg/main/f", **env)
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "g").write_text("two\n")
    for args in (
        ("fs", "upload", "-r", "-s", str(tmp_path / "tree"), "lakefs://startpg/main/up/"),
        ("fs", "ls", "lakefs://startpg/main/"),
    ):
        modules = imported(tmp_path, *args, **env)
        assert "asyncpg" in modules and "lakefs_core.kv.sql" in modules, args
        # ~0.24 s of a process's start-up were SQLAlchemy's import and engine
        assert loaded(modules, ("sqlalchemy", "lakefs_core.sqlengine", "lakefs_core.kv.sqlite")) == [], args


def test_each_lazy_command_is_the_command_of_its_name() -> None:
    with click.Context(cli) as ctx:
        for name in cli.list_commands(ctx):
            command = cli.get_command(ctx, name)
            assert isinstance(command, click.Command) and command.name == name, name


def test_an_unknown_command_suggests_lazy_ones(run: InProcess) -> None:
    result = run("brnch")
    assert result.returncode == 64
    assert "No such command 'brnch'. Did you mean 'branch'?" in result.err


@pytest.mark.parametrize("args", [("--help",), ("fs", "--help"), ("sst", "inspect", "--help")])
def test_help_still_shows(run: InProcess, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 0 and result.out.startswith("Usage: lakefs-core")


@pytest.mark.parametrize("entry", ["lakefs_core.cli", "lakefs_gc.cli", "lakefs_mirror.cli"])
def test_each_summary_is_its_commands_short_help(entry: str) -> None:
    # the group's --help shows the summaries without importing the commands: they must not drift
    group = importlib.import_module(entry).cli
    assert isinstance(group, CLIGroup) and set(group.summaries) == set(group.lazy_subcommands)
    with click.Context(group) as ctx:
        for name, summary in group.summaries.items():
            command = group.get_command(ctx, name)
            assert command is not None and command.get_short_help_str(limit=1000) == summary, name

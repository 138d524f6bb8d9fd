"""``Cli(zygote=...)`` forks only where the child runs as its own process would (tests/cli/helpers.py's
``forkable``): a user's directories, the test's name and ``LAKEFS_CORE*`` settings may differ from
the zygote's environment; a variable read at import or interpreter start may not. Without this,
a difference in every test's environment would send every command back to a process of its own
unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import Cli, forkable, unforkable, user_env
from tests.support.zygote import Zygote


def test_a_users_environment_forks(tmp_path: Path, core_zygote: Zygote) -> None:
    assert unforkable(user_env(tmp_path / "home"), core_zygote) == set()
    # A test that imported polars in this worker left jemalloc's variable in os.environ (a CI run
    # failed that way): not the user's environment.
    import polars  # noqa: F401

    assert unforkable(user_env(tmp_path / "home"), core_zygote) == set()
    assert unforkable(user_env(tmp_path / "home", LAKEFS_CORE__KV_URL="sqlite:///kv"), core_zygote) == set()


@pytest.mark.parametrize(
    "extra",
    [
        {"LAKEFS_PURE_PYTHON": "1"},  # lakefs_core.format.accel reads it at import
        {"PYTHONHASHSEED": "3"},  # the interpreter's start
        {"PYTHONWARNINGS": "error"},
        {"LC_ALL": "C"},  # the standard streams' encoding
    ],
)
def test_an_import_time_variable_runs_a_process(
    tmp_path: Path, core_zygote: Zygote, extra: dict[str, str]
) -> None:
    env = user_env(tmp_path / "home", **extra)
    assert not forkable(env, core_zygote)
    # and the command still runs, as a process of its own
    assert Cli(env, tmp_path, zygote=core_zygote).json("repo", "list") == {"results": []}


def test_a_forked_command_reads_its_stdin_environment_and_directory(
    tmp_path: Path, core_zygote: Zygote
) -> None:
    cli = Cli(user_env(tmp_path / "home"), tmp_path, zygote=core_zygote)
    cli("repo", "create", "lakefs://forked", f"local://{tmp_path / 'ns'}").ok()
    assert (tmp_path / "home/data/lakefs-core/kv.sqlite3").is_file()  # the child's HOME's
    (tmp_path / "here.txt").write_bytes(b"from the cwd")
    cli("fs", "upload", "lakefs://forked/main/a", "--source", "here.txt").ok()  # relative to the child's cwd
    cli("fs", "upload", "lakefs://forked/main/b", "--source", "-", stdin=b"piped").ok()
    assert cli("fs", "cat", "lakefs://forked/main/a").ok().raw == b"from the cwd"
    assert cli("fs", "cat", "lakefs://forked/main/b").ok().raw == b"piped"

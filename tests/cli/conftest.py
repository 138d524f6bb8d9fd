"""Shared fixtures of the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import PRELOAD, InProcess, set_user_env, user_env
from tests.support.zygote import Zygote


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> InProcess:
    """The CLI in-process, with its own user dirs (embedded default) under ``tmp_path`` as cwd."""
    set_user_env(monkeypatch, tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    return InProcess(capsys)


@pytest.fixture(scope="session")
def core_zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    """One pre-imported ``lakefs-core`` per worker (``Cli(..., zygote=core_zygote)``), started with
    ``user_env``'s environment (its PYTHONWARNINGS included) so that only a user's directories differ."""
    env = user_env(tmp_path_factory.mktemp("zygote") / "home")
    with Zygote("tests.cli.forked:main", PRELOAD, env) as zygote:
        yield zygote

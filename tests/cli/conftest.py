"""Shared fixtures of the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import InProcess, set_user_env


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> InProcess:
    """The CLI in-process, with its own user dirs (embedded default) under ``tmp_path`` as cwd."""
    set_user_env(monkeypatch, tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    return InProcess(capsys)

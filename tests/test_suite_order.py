"""The files the suite starts with (tests/conftest.py, SLOW_FILES_FIRST) exist: a renamed one would
silently fall back to the end of the run, where it keeps one worker busy after the other is done."""

from __future__ import annotations

from tests.conftest import REPO_ROOT, SLOW_FILES_FIRST


def test_the_slow_files_listed_first_exist() -> None:
    missing = [path for path in SLOW_FILES_FIRST if not (REPO_ROOT / path).is_file()]
    assert not missing, missing
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)

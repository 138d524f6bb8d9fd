"""Prerequisites: skip locally with a reason, fail under CI (``CI`` set)."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = bool(os.environ.get("CI"))


def skip_or_fail(reason: str) -> None:
    """Skip locally; under CI a missing prerequisite is a failure, not a skip."""
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def require_tool(name: str, package: str) -> str:
    """The path of command ``name`` (from Debian package ``package``), or skip/fail."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} (Debian package {package}) is not installed")
        raise AssertionError("unreachable")
    return path

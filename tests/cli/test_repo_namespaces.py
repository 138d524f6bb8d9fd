"""``repo create`` refuses a storage namespace another repository owns, with its own exit code."""

from __future__ import annotations

from pathlib import Path

from lakefs_core.errors import BadInputError, NamespaceConflictError
from tests.cli.helpers import Cli, InProcess, user_env


def test_nested_namespace_exits_with_the_namespace_conflict_code(tmp_path: Path) -> None:
    cli = Cli(user_env(tmp_path / "home"), cwd=tmp_path)
    cli("repo", "create", "lakefs://repo1", f"local://{tmp_path}/ns/repo1").ok()
    line = cli("repo", "create", "lakefs://repo2", f"local://{tmp_path}/ns/repo1/data").failed(
        NamespaceConflictError.exit_code, "repo1", "storage namespace"
    )
    assert NamespaceConflictError.exit_code == 15, line


def test_in_process_conflicts_and_system_directories(run: InProcess, tmp_path: Path) -> None:
    run("repo", "create", "lakefs://repo1", f"local://{tmp_path}/ns/repo1").ok()
    for other in ("ns/repo1", "ns/repo1/_lakefs", "ns", ""):
        run("repo", "create", "lakefs://repo2", f"local://{tmp_path}/{other}".rstrip("/")).failed(
            NamespaceConflictError.exit_code, "repo1"
        )
    for system in ("local:///", "local:///etc", "local:///etc/lakefs"):
        run("repo", "create", "lakefs://repo3", system).failed(BadInputError.exit_code, "storage_namespace")
    run("repo", "delete", "lakefs://repo1", "-y").ok()
    run("repo", "create", "lakefs://repo2", f"local://{tmp_path}/ns").ok()

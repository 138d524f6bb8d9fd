"""User-facing errors: one line on stderr (no traceback), the error class's distinct exit code, and
never a secret. Most run in-process (fast); the unreachable KV runs as a real process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lakefs_core.coreconfig import default_kv_url
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    MergeConflictError,
    NoChangesError,
    NotFoundError,
    PreconditionFailedError,
    ReadOnlyError,
    TooManyRetriesError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv import open_kv
from lakefs_core.refs.store import RefStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from tests.cli.helpers import Cli, InProcess, user_env
from tests.support.moto import free_port

USAGE = 64


@pytest.fixture
def run(run: InProcess, tmp_path: Path) -> InProcess:
    """The shared in-process CLI, with a small file ``f`` to upload."""
    (tmp_path / "f").write_text("one\n")
    return run


@pytest.fixture
def demo(run: InProcess, tmp_path: Path) -> InProcess:
    run("repo", "create", "lakefs://demo", f"local://{tmp_path / 'ns'}").ok()
    return run


def _error_tree() -> list[type[LakeFSError]]:
    import lakefs_core.errors as errors_module

    # Import every package that could define an error class of its own, so a class declared
    # outside errors.py (the one tree) still shows up here and its code is checked.
    for name in ("lakefs_core.block", "lakefs_core.kv", "lakefs_core.repos.graveler", "lakefs_mirror.api"):
        __import__(name)
    seen: list[type[LakeFSError]] = []
    todo: list[type[LakeFSError]] = [LakeFSError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    # Refinements elsewhere (carrying a field, say) are fine; a class with a code of its own is not.
    own_codes = {
        c.__qualname__ for c in seen if "exit_code" in vars(c) and c.__module__ != errors_module.__name__
    }
    assert not own_codes, f"error classes with their own exit code outside errors.py: {own_codes}"
    return seen


def test_exit_codes_are_distinct() -> None:
    classes = [c for c in _error_tree() if "exit_code" in vars(c)]
    listed = {NotFoundError, BadInputError, MergeConflictError, ReadOnlyError, TooManyRetriesError}
    assert listed | {NoChangesError, ConflictError, UnreachableError, TransientError} <= set(classes)
    codes = [c.exit_code for c in classes]
    assert len(set(codes)) == len(codes) and USAGE not in codes, sorted(
        (c.exit_code, c.__name__) for c in classes
    )


def test_not_found(demo: InProcess) -> None:
    demo("log", "lakefs://nope/main").failed(NotFoundError.exit_code, "repository 'nope' not found")
    demo("fs", "upload", "lakefs://demo/nobranch/x", "-s", "f").failed(
        NotFoundError.exit_code, "branch 'nobranch'"
    )
    demo("fs", "cat", "lakefs://demo/v9/x").failed(NotFoundError.exit_code, "'v9'")
    demo("fs", "cat", "lakefs://demo/main~5/x").failed(NotFoundError.exit_code, "history is shorter")
    demo("fs", "stat", "lakefs://demo/main/missing").failed(NotFoundError.exit_code, "'missing'")
    demo("fs", "upload", "lakefs://demo/main/x", "-s", "no-such-file").failed(
        NotFoundError.exit_code, "no-such-file"
    )
    demo("fs", "rm", "lakefs://demo/main/nothing/", "-r").failed(NotFoundError.exit_code, "nothing/")


def test_bad_input(demo: InProcess, tmp_path: Path) -> None:
    demo("repo", "create", "lakefs://Bad_Name", f"local://{tmp_path / 'x'}").failed(
        BadInputError.exit_code, "REPOSITORY", "'Bad_Name'"
    )
    demo("repo", "create", "lakefs://ok-repo", "relative/dir").failed(
        BadInputError.exit_code, "storage_namespace"
    )
    demo("fs", "cat", "s3://bucket/key").failed(BadInputError.exit_code, "PATH", "not a lakefs:// URI")
    demo("fs", "cat", "lakefs://demo/main").failed(BadInputError.exit_code, "missing object path")
    demo("commit", "lakefs://demo/main~1", "-m", "x").failed(BadInputError.exit_code, "invalid branch id")
    demo("branch", "create", "lakefs://demo/b", "-s", "lakefs://other/main").failed(
        BadInputError.exit_code, "--source", "'other'"
    )
    demo("commit", "lakefs://demo/main", "-m", "x", "--meta", "novalue").failed(
        BadInputError.exit_code, "--meta"
    )
    demo("diff", "lakefs://demo/main~1").failed(BadInputError.exit_code, "LEFT")
    demo("fs", "upload", "lakefs://demo/main/d", "-s", str(tmp_path)).failed(
        BadInputError.exit_code, "--recursive"
    )


def test_usage_errors_exit_64(demo: InProcess) -> None:
    missing_message = demo("commit", "lakefs://demo/main")
    assert missing_message.returncode == USAGE and "--message" in missing_message.err
    assert demo("merge", "lakefs://demo/a", "lakefs://demo/b", "--strategy", "mine").returncode == USAGE
    assert demo("no-such-command").returncode == USAGE


def test_conflicts(demo: InProcess) -> None:
    demo("commit", "lakefs://demo/main", "-m", "nothing").failed(NoChangesError.exit_code, "no uncommitted")
    demo("branch", "delete", "lakefs://demo/main", "-y").failed(ConflictError.exit_code, "default branch")
    demo("repo", "create", "lakefs://demo", "local:///tmp/elsewhere").failed(
        ConflictError.exit_code, "already exists"
    )


def test_merge_conflict_lists_the_keys(demo: InProcess, tmp_path: Path) -> None:
    (tmp_path / "g").write_text("two\n")
    for path in ("shared.txt", "quiet.txt"):
        demo("fs", "upload", f"lakefs://demo/main/{path}", "-s", "f").ok()
    demo("commit", "lakefs://demo/main", "-m", "base").ok()
    demo("branch", "create", "lakefs://demo/dev", "-s", "lakefs://demo/main").ok()
    for branch, source in (("main", "f2"), ("dev", "g")):
        if source == "f2":
            (tmp_path / "f2").write_text("three\n")
        demo("fs", "upload", f"lakefs://demo/{branch}/shared.txt", "-s", source).ok()
        demo("commit", f"lakefs://demo/{branch}", "-m", f"edit on {branch}").ok()
    line = demo("merge", "lakefs://demo/dev", "lakefs://demo/main").failed(
        MergeConflictError.exit_code, "conflict", "shared.txt"
    )
    assert "quiet.txt" not in line
    merged = demo("merge", "lakefs://demo/dev", "lakefs://demo/main", "--strategy", "source-wins", "--json")
    assert merged.json()["metadata"] == {".lakefs.merge.strategy": "source-wins"}
    assert demo("fs", "cat", "lakefs://demo/main/shared.txt").ok().raw == b"two\n"


def test_read_only_repository(run: InProcess, tmp_path: Path) -> None:
    async def create() -> None:
        kv = await open_kv(default_kv_url())  # the same embedded SQLite file the CLI uses
        stores = StoreRegistry()
        try:
            await Graveler(kv, stores).create_repository(
                "mirror", f"local://{tmp_path / 'm'}", read_only=True
            )
        finally:
            await stores.close()
            await kv.close()

    asyncio.run(create())
    run("fs", "upload", "lakefs://mirror/main/x", "-s", "f").failed(ReadOnlyError.exit_code, "read-only")
    run("branch", "create", "lakefs://mirror/b", "-s", "lakefs://mirror/main").failed(ReadOnlyError.exit_code)
    assert run("fs", "ls", "lakefs://mirror/main/", "--json").json() == {"results": []}  # reads work


def test_commit_retries_exhausted(demo: InProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    demo("fs", "upload", "lakefs://demo/main/x", "-s", "f").ok()

    async def always_moved(*_args: object, **_kwargs: object) -> bytes:
        raise PreconditionFailedError("branch record changed")

    monkeypatch.setattr(RefStore, "cas_branch", always_moved)
    monkeypatch.setenv("LAKEFS_CORE__COMMIT_ATTEMPTS", "3")
    demo("commit", "lakefs://demo/main", "-m", "x").failed(TooManyRetriesError.exit_code, "'main'")


def test_config_errors_name_the_key_not_the_value(
    run: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("s3:\n  secret_acess_key: hunter2\n")
    line = run("--config", str(config), "repo", "list").failed(BadInputError.exit_code, "s3.secret_acess_key")
    assert "hunter2" not in line
    monkeypatch.setenv("LAKEFS_CORE_CONFIG", str(tmp_path / "absent.yaml"))
    run("repo", "list").failed(BadInputError.exit_code, "absent.yaml")
    monkeypatch.delenv("LAKEFS_CORE_CONFIG")
    monkeypatch.setenv("LAKEFS_CORE__UPLOAD_CONCURRENCY", "0")
    run("repo", "list").failed(BadInputError.exit_code, "upload_concurrency")


def test_unreachable_bucket_hides_the_secret(run: InProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    for key, value in {
        "S3__ENDPOINT_URL": endpoint,
        "S3__REGION": "us-east-1",
        "S3__ACCESS_KEY_ID": "AKIDEXAMPLE",
        "S3__SECRET_ACCESS_KEY": "s3-sekret-value",
        "S3__MAX_ATTEMPTS": "1",
        "S3__CONNECT_TIMEOUT": "2",
    }.items():
        monkeypatch.setenv(f"LAKEFS_CORE__{key}", value)
    result = run("repo", "create", "lakefs://remote", "s3://bucket/prefix")
    line = result.failed(UnreachableError.exit_code, "bucket")
    assert "s3-sekret-value" not in line + result.out


def test_unreachable_kv_as_a_process(tmp_path: Path) -> None:
    port = free_port()
    env = user_env(tmp_path / "home", LAKEFS_CORE__KV_URL=f"postgresql://u:sekret@127.0.0.1:{port}/x")
    result = Cli(env, cwd=tmp_path)("repo", "list")
    line = result.failed(UnreachableError.exit_code, f"127.0.0.1:{port}")
    assert "sekret" not in line and b"sekret" not in result.raw

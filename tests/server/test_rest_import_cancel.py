"""Cancelling a running import from another server process (issue 35), end to end through
``lakefs-sdk``: two ``lakefs-server`` processes on one KV (SQLite + local namespaces, PostgreSQL +
S3 on moto), the import started on A, canceled, read and probed through B.

The import is slow by size, not by sleeps: :data:`OBJECTS` source objects, so that it is still
building ranges when the cancel arrives (its ``ingested_objects`` are checked to be short of the
total; a cancel of an import that already ended would answer 409 and fail the test). The servers
refresh an import's status every :data:`HEARTBEAT` seconds (the core's ``import_heartbeat_seconds``,
lakeFS's 1 s by default), so the cancel lands a fraction of a second after the import starts, well
within the several seconds the import takes even on a fast idle machine.

What a cancel guarantees (docs/rest-api.md): the status reads ``Canceled`` at once, not completed;
the importing process sees it at its next refresh, stops at its next checkpoint and writes its final
status (later ``update_time``) within a bounded time; no commit, nothing of the import visible or
staged on the branch; a finished import's cancel is 409, an unknown id 404. A SIGTERM of the
importing process stops its import at a checkpoint and reports it failed at once; a ``kill -9``
leaves a status that B reports failed once it has not been refreshed for :data:`STALE` seconds
(``import_stale_seconds``, a minute by default; lakeFS keeps such a status running until it expires
a day later); never a commit.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.defaults import DEFAULTS
from lakefs_core.repos.import_status import CANCELED, STOPPED
from lakefs_core.repos.importing import WATCH_EVERY
from tests.server.harness import ENCRYPT_SECRET, Server
from tests.server.rest_harness import ACCESS_KEY, SECRET_KEY, RestServer, pg_s3_core, rest_server
from tests.support.lazy import lazy_module
from tests.support.timing import scaled

lakefs_sdk = lazy_module("lakefs_sdk")  # pydantic models of the whole API: imported where a test uses them

MAIN = "main"
PER_DIR = 500
OBJECTS = 60_000  # several seconds of listing and range building on an idle machine
# The servers' import_heartbeat_seconds: the cancel reaches the importing process within about this.
HEARTBEAT = 0.1
# import_stale_seconds where the test provokes it (kill -9): behaviour under test, so not scaled; 100
# refreshes, so that a loaded machine's slow refresh does not make a live import read as dead.
STALE = 10.0


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`OBJECTS` empty files in directories of :data:`PER_DIR` (chunks of sub-prefixes)."""
    root = tmp_path_factory.mktemp("import-source")
    for d in range(OBJECTS // PER_DIR):
        directory = root / f"d{d:04d}"
        directory.mkdir()
        for i in range(PER_DIR):
            os.close(os.open(directory / f"f{i:04d}.csv", os.O_CREAT | os.O_WRONLY, 0o644))
    return root


def _backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, Any], str | None]:
    if request.param == "sqlite-local":
        (tmp_path / "a" / "ns").mkdir()
        return {"kv_url": f"sqlite:///{tmp_path / 'a' / 'kv.sqlite3'}"}, None
    return pg_s3_core(request, "cancel")


@pytest.fixture
def stale_seconds() -> float:
    """The servers' ``import_stale_seconds``: lakeFS's minute where staleness is not under test, so
    a slow refresh on a loaded machine never fails a live import there."""
    return DEFAULTS.import_stale_seconds


@pytest.fixture(params=["sqlite-local", "pg-s3"])
def pair(
    request: pytest.FixtureRequest, tmp_path: Path, stale_seconds: float
) -> Iterator[tuple[RestServer, RestServer]]:
    """Two server processes (their own listeners) on one KV and namespace root, refreshing imports'
    statuses every :data:`HEARTBEAT` seconds."""
    (tmp_path / "a").mkdir()
    core, root = _backend(request, tmp_path)
    core |= {"import_heartbeat_seconds": HEARTBEAT, "import_stale_seconds": stale_seconds}
    with rest_server(tmp_path / "a", core, root) as a:
        (tmp_path / "b").mkdir()
        auth = {"encrypt": {"secret_key": ENCRYPT_SECRET}, "cache_seconds": 20}
        b = Server(tmp_path / "b", a.process.core, extra={"auth": auth}).start()
        try:
            yield a, RestServer(b.endpoint, a.namespace_root, b)
        finally:
            b.stop()


def sdk(server: RestServer) -> lakefs_sdk.ApiClient:
    cfg = lakefs_sdk.Configuration(host=server.api, username=ACCESS_KEY, password=SECRET_KEY)
    return lakefs_sdk.ApiClient(cfg)


def new_repo(server: RestServer) -> str:
    name = f"cancel-{uuid.uuid4().hex[:8]}"
    creation = lakefs_sdk.RepositoryCreation(name=name, storage_namespace=server.namespace(name))
    lakefs_sdk.RepositoriesApi(sdk(server)).create_repository(creation)
    return name


def start_import(imports: lakefs_sdk.ImportApi, repo: str, source: Path) -> str:
    location = lakefs_sdk.ImportLocation(type="common_prefix", path=f"local://{source}/", destination="in/")
    creation = lakefs_sdk.ImportCreation(paths=[location], commit=lakefs_sdk.CommitCreation(message="import"))
    return str(imports.import_start(repo, MAIN, creation).id)


def status_of(call: Callable[[], object]) -> int:
    try:
        call()
    except lakefs_sdk.ApiException as e:
        return int(e.status)
    return 200


def poll(read: Callable[[], lakefs_sdk.ImportStatus], until: Callable[[lakefs_sdk.ImportStatus], bool],
         seconds: float, what: str) -> lakefs_sdk.ImportStatus:  # fmt: skip
    deadline = time.monotonic() + seconds
    while True:
        status = read()
        if until(status):
            return status
        assert time.monotonic() < deadline, f"{what}: still {status}"
        time.sleep(0.05)


def running_with_progress(
    imports: lakefs_sdk.ImportApi, repo: str, import_id: str
) -> lakefs_sdk.ImportStatus:
    """The import's status once its process has refreshed it with some progress; still running."""

    def progressed(status: lakefs_sdk.ImportStatus) -> bool:
        assert not status.completed and status.error is None, f"ended before the cancel: {status}"
        return bool(status.ingested_objects)

    return poll(lambda: imports.import_status(repo, MAIN, import_id), progressed, scaled(60), "no progress")


def assert_nothing_imported(server: RestServer, repo: str, head: str) -> None:
    client = sdk(server)
    assert lakefs_sdk.BranchesApi(client).get_branch(repo, MAIN).commit_id == head  # no commit
    listed = lakefs_sdk.ObjectsApi(client).list_objects(repo, MAIN, prefix="in/", amount=10)
    assert listed.results == []  # nothing visible on the branch, committed or staged
    assert lakefs_sdk.BranchesApi(client).diff_branch(repo, MAIN).results == []  # nothing staged


def test_cancel_reaches_the_importing_process(pair: tuple[RestServer, RestServer], source: Path) -> None:
    a, b = pair
    on_a, on_b = lakefs_sdk.ImportApi(sdk(a)), lakefs_sdk.ImportApi(sdk(b))
    repo = new_repo(a)
    head = lakefs_sdk.BranchesApi(sdk(a)).get_branch(repo, MAIN).commit_id
    import_id = start_import(on_a, repo, source)
    before = running_with_progress(on_b, repo, import_id)  # A's refreshes, read through B

    on_b.import_cancel(repo, MAIN, import_id)  # 204
    canceled = on_b.import_status(repo, MAIN, import_id)  # at once, from any process
    assert not canceled.completed and canceled.error is not None and canceled.error.message == CANCELED
    # A sees the cancel at its next refresh (every HEARTBEAT) and stops at its next checkpoint (every
    # WATCH_EVERY entries): its final status comes after the cancel's, short of the whole source.
    stopped = poll(
        lambda: on_a.import_status(repo, MAIN, import_id),
        lambda s: s.update_time > canceled.update_time,
        scaled(15),
        "the importing process did not stop",
    )
    assert not stopped.completed and stopped.error is not None and stopped.error.message == CANCELED
    assert stopped.commit is None and stopped.metarange_id is None
    assert before.ingested_objects <= stopped.ingested_objects < OBJECTS, (before, stopped)
    assert stopped.ingested_objects % WATCH_EVERY == 0  # stopped at a checkpoint: nothing built after
    assert_nothing_imported(b, repo, head)
    for imports in (on_a, on_b):  # ended: as lakeFS, a cancel of an ended import conflicts
        assert status_of(lambda i=imports: i.import_cancel(repo, MAIN, import_id)) == 409  # type: ignore[misc]
        assert status_of(lambda i=imports: i.import_cancel(repo, MAIN, "nosuchimport")) == 404  # type: ignore[misc]
    assert on_a.import_status(repo, MAIN, import_id) == stopped  # nothing wrote it after the stop
    check_cancel_of_a_finished_import(a, b, source.parent / f"small-{uuid.uuid4().hex[:6]}")


def check_cancel_of_a_finished_import(a: RestServer, b: RestServer, small: Path) -> None:
    small.mkdir()
    (small / "x.csv").write_bytes(b"a\n")
    on_a, on_b = lakefs_sdk.ImportApi(sdk(a)), lakefs_sdk.ImportApi(sdk(b))
    repo = new_repo(a)
    import_id = start_import(on_a, repo, small)
    done = poll(
        lambda: on_b.import_status(repo, MAIN, import_id),
        lambda s: s.completed or s.error is not None,
        scaled(30),
        "import did not end",
    )
    assert done.completed and done.error is None and done.commit is not None and done.ingested_objects == 1
    assert status_of(lambda: on_b.import_cancel(repo, MAIN, import_id)) == 409
    assert status_of(lambda: on_b.import_status(repo, MAIN, "nosuchimport")) == 404
    assert on_a.import_status(repo, MAIN, import_id) == done  # the cancel changed nothing


@pytest.mark.parametrize("stale_seconds", [STALE])
@pytest.mark.parametrize("pair", ["sqlite-local"], indirect=True)  # the reader's rule: one backend
def test_importing_process_ends(pair: tuple[RestServer, RestServer], source: Path) -> None:
    """SIGTERM of the importing process: it stops the import at its next checkpoint and stores its
    status before closing, so B reports it failed at once. Restarted, then kill -9 mid-import: the
    status stays running until it has not been refreshed for STALE seconds, then B reports it
    failed, within seconds (not the default minute: the servers' setting is honoured). Never a
    commit; a cancel of either conflicts."""
    a, b = pair
    on_b = lakefs_sdk.ImportApi(sdk(b))
    repo = new_repo(a)
    head = lakefs_sdk.BranchesApi(sdk(b)).get_branch(repo, MAIN).commit_id
    import_id = start_import(lakefs_sdk.ImportApi(sdk(a)), repo, source)
    running_with_progress(on_b, repo, import_id)
    a.process.stop()  # SIGTERM, waits for the process to end
    assert a.process.process is not None and a.process.process.returncode == 0
    stopped = on_b.import_status(repo, MAIN, import_id)
    assert not stopped.completed and stopped.error is not None and stopped.error.message == STOPPED
    assert stopped.commit is None and 0 < stopped.ingested_objects < OBJECTS
    assert status_of(lambda: on_b.import_cancel(repo, MAIN, import_id)) == 409
    assert_nothing_imported(b, repo, head)

    restarted = a.process.start()  # new ports, the same KV
    on_a = lakefs_sdk.ImportApi(sdk(RestServer(restarted.endpoint, a.namespace_root, restarted)))
    import_id = start_import(on_a, repo, source)
    running_with_progress(on_b, repo, import_id)
    assert restarted.process is not None
    os.killpg(restarted.process.pid, signal.SIGKILL)
    restarted.process.wait()
    assert on_b.import_status(repo, MAIN, import_id).error is None  # not known dead yet
    failed = poll(
        lambda: on_b.import_status(repo, MAIN, import_id),
        lambda s: s.error is not None,
        STALE + scaled(30),
        "a dead process's import still running",
    )
    # Reported failed once STALE seconds passed since the last refresh (before the kill; a reader
    # does not move update_time), not earlier, and not after the default minute: the setting binds.
    since_refresh = datetime.now(UTC) - failed.update_time
    assert timedelta(seconds=STALE) < since_refresh < timedelta(seconds=DEFAULTS.import_stale_seconds)
    assert not failed.completed and failed.error.message == STOPPED and failed.commit is None
    assert_nothing_imported(b, repo, head)
    assert status_of(lambda: on_b.import_cancel(repo, MAIN, import_id)) == 409

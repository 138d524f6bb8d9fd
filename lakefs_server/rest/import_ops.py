"""Import (start, status, cancel) on top of the core's import
(:meth:`~lakefs_core.repos.graveler.Graveler.import_objects`), its status in the KV
(:mod:`lakefs_core.repos.import_status`, lakeFS's ``imports/<id>`` records).

``POST .../import`` stores a running status, starts the import as a task of this server process
and answers 202 with its id; ``GET .../import?id=`` reports it (lakeFS's ``ImportStatus``) and
``DELETE .../import?id=`` cancels it, both from any server process sharing the KV (``--workers N``,
several instances). The status record is the coordination point, moved only by compare-and-swap:
the cancel writes lakeFS's ``Canceled`` into it; the running process refreshes it every
``import_heartbeat_seconds`` (a setting of the core, 1 s by default: its progress,
``ingested_objects``) and, on seeing the cancel, asks the import to stop at its next checkpoint
(:class:`~lakefs_core.repos.importing.ImportWatch`: every 1,000 entries, and a last one before the
commit that refreshes the record itself). An import stopped there writes nothing more, makes no
commit and reports ``Canceled``; a cancel written after that last refresh is too late: the import
completes and reports its commit, with no error. A status whose process died is reported failed
``import_stale_seconds`` (60 s by default) after its last refresh, and a process that finds its own
import reported so stops it the same way; a server stopping stops its imports at their next
checkpoint and stores their status first (:func:`stop_imports`). Differences from lakeFS: each path
must be a ``common_prefix``; several paths are imported one after another, a commit each; the
commit's metadata is not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any, Final

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_core.errors import BadInputError, CanceledError, LakeFSError, NotFoundError
from lakefs_core.repos.import_status import (
    CANCELED,
    STOPPED,
    ImportStatus,
    ImportStatuses,
)
from lakefs_core.repos.importing import ImportWatch
from lakefs_server.rest.app import DEPS, Call
from lakefs_server.rest.models import ImportCreation, body, commit_json
from lakefs_server.rest.wire import message_of

MAX_RUNNING: Final = 100  # imports one server process runs at once
SHUTDOWN_SECONDS: Final = 10.0  # a server stopping waits this long for its imports to stop


def status_json(status: ImportStatus) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "completed": status.completed,
        "update_time": status.updated_at.isoformat(),
        "ingested_objects": status.progress,
    }
    if status.metarange_id:
        answer["metarange_id"] = status.metarange_id
    if status.commit is not None:
        answer["commit"] = commit_json(status.commit)
    if status.error:
        answer["error"] = {"message": status.error}
    return answer


class ImportRun(ImportWatch):
    """One import this process runs: what it reached so far, written to the KV by its watcher, and
    whether it must stop (canceled here or elsewhere), which the import learns at its checkpoints."""

    def __init__(self, statuses: ImportStatuses, repo: str, branch: str, status: ImportStatus) -> None:
        self.statuses, self.repo, self.branch = statuses, repo, branch
        self.status = status
        self.stopping = ""  # why the import must stop at its next checkpoint (the error it reports)
        self.task: asyncio.Task[None] | None = None

    async def heartbeat(self) -> bool:
        """Refresh the stored status with this run's progress; False when it has ended elsewhere
        (canceled, or reported failed because it was not refreshed for ``import_stale_seconds``)."""
        ended = False

        def refreshed(stored: ImportStatus) -> ImportStatus | None:
            nonlocal ended
            ended = not self.statuses.seen(stored).running
            if ended:
                return None
            return replace(stored, progress=self.status.progress, metarange_id=self.status.metarange_id)

        await self.statuses.update(self.repo, self.status.id, refreshed)
        return not ended

    async def built(self, entries: int) -> None:
        self.status = replace(self.status, progress=self.status.progress + entries)
        await asyncio.sleep(0)  # the watcher runs even while listing and building never wait
        if self.stopping:
            raise CanceledError(self.stopping)

    async def committing(self) -> None:
        # The record itself, not the last refresh: a cancel stored before this write stops the import.
        if not self.stopping and not await self.heartbeat():
            self.stopping = CANCELED
        if self.stopping:
            raise CanceledError(self.stopping)

    async def finish(self) -> None:
        """Store the outcome: ``completed`` only with its commit, as lakeFS (a failed or canceled
        import has an ``error`` and is not completed; the clients' wait loops rely on it); a commit
        that landed wins over a cancel that came too late; an import stopped without a commit keeps
        the reason it ended for (canceled, or reported failed)."""
        final = replace(self.status, completed=self.status.commit is not None and not self.status.error)
        if not final.completed and not final.error:  # never left reading as running
            final = replace(final, error=STOPPED)

        def ended(stored: ImportStatus) -> ImportStatus:
            seen = self.statuses.seen(stored)
            if final.commit is None and seen.error:
                return replace(final, error=seen.error)
            return final

        await self.statuses.update(self.repo, self.status.id, ended)


async def _import(call: Call, run: ImportRun, spec: ImportCreation) -> None:
    try:
        for location in spec.paths:
            result = await call.deps.graveler.import_objects(
                run.repo,
                run.branch,
                location.destination,
                location.path,
                committer=call.username,
                message=spec.commit.message,
                watch=run,
            )
            commit = await call.deps.graveler.get_commit_by_id(run.repo, result.commit_id)
            run.status = replace(run.status, metarange_id=result.metarange_id, commit=commit)
    except CanceledError as e:
        run.status = replace(run.status, error=message_of(e))
    except asyncio.CancelledError:  # interrupted (the loop closing): not canceled by anyone
        run.status = replace(run.status, error=STOPPED)
        raise
    except LakeFSError as e:
        run.status = replace(run.status, error=message_of(e))
    except Exception as e:  # a bug: the status must not read as a success (the app logs the rest)
        run.status = replace(run.status, error=f"import failed: internal error ({type(e).__name__})")
        raise


async def _heartbeat(run: ImportRun) -> bool:
    try:
        return await run.heartbeat()
    except LakeFSError:
        # A KV hiccup must not kill the import: the next refresh tries again (readers see the
        # status stale only if refreshes keep failing for import_stale_seconds).
        return True


async def _run(call: Call, run: ImportRun, spec: ImportCreation) -> None:
    """The import, with a watcher refreshing its status and stopping it when canceled elsewhere."""
    work = asyncio.ensure_future(_import(call, run, spec))
    try:
        while not work.done():
            await asyncio.wait({work}, timeout=run.statuses.heartbeat_seconds)
            if not work.done() and not run.stopping and not await _heartbeat(run):
                run.stopping = CANCELED  # stops at its next checkpoint, never inside its commit
        with contextlib.suppress(asyncio.CancelledError):
            await work
    finally:
        if not work.done():  # this task itself was cancelled: let a commit under way complete
            run.stopping = run.stopping or STOPPED
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({work})
        if not work.done():  # cancelled again: interrupt it
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        with contextlib.suppress(LakeFSError):  # unreachable KV: readers see it stale
            await asyncio.shield(run.finish())
        call.deps.imports.pop(run.status.id, None)


async def import_start(call: Call) -> web.StreamResponse:
    repo_id, branch = call.param("repository"), call.param("branch")
    spec = await body(call.request, ImportCreation)
    nodes: list[perms.Node] = [
        perms.Permission(perms.WRITE_OBJECT, perms.branch_arn(repo_id, branch)),
        perms.Permission(perms.CREATE_COMMIT, perms.branch_arn(repo_id, branch)),
    ]
    for location in spec.paths:
        if location.type != "common_prefix":
            raise BadInputError("only common_prefix imports are served here", field="paths.type")
        nodes.append(perms.Permission(perms.IMPORT_FROM_STORAGE, perms.storage_namespace_arn(location.path)))
    if not spec.paths:
        raise BadInputError("at least one path", field="paths")
    await call.authorize(perms.AllOf(tuple(nodes)))
    await call.deps.graveler.branch(repo_id, branch)
    running = call.deps.imports
    if len(running) >= MAX_RUNNING:
        raise BadInputError("too many imports running", field="paths")
    statuses = ImportStatuses(call.deps.graveler)
    await statuses.expire(repo_id)
    run = ImportRun(statuses, repo_id, branch, await statuses.create(repo_id))
    running[run.status.id] = run
    run.task = asyncio.get_running_loop().create_task(_run(call, run, spec))
    return web.json_response({"id": run.status.id}, status=202)


async def stop_imports(app: web.Application) -> None:
    """Server shutdown, before the core closes: this process's imports stop at their next
    checkpoint (a commit under way completes) and store their status (failed: :data:`STOPPED`)."""
    runs = [run for run in app[DEPS].imports.values() if isinstance(run, ImportRun)]
    for run in runs:
        run.stopping = run.stopping or STOPPED
    tasks = [run.task for run in runs if run.task is not None]
    if tasks:
        await asyncio.wait(tasks, timeout=SHUTDOWN_SECONDS)


def _import_id(call: Call) -> str:
    import_id = call.request.query.get("id", "")
    if not import_id or len(import_id) > 64 or not import_id.isalnum():
        raise NotFoundError("import not found")
    return import_id


async def import_status(call: Call) -> web.StreamResponse:
    repo_id, branch = call.param("repository"), call.param("branch")
    await call.authorize(perms.Permission(perms.READ_BRANCH, perms.branch_arn(repo_id, branch)))
    status = await ImportStatuses(call.deps.graveler).get(repo_id, _import_id(call))
    return web.json_response(status_json(status))


async def import_cancel(call: Call) -> web.StreamResponse:
    repo_id, branch = call.param("repository"), call.param("branch")
    await call.authorize(perms.Permission(perms.IMPORT_CANCEL, perms.branch_arn(repo_id, branch)))
    import_id = _import_id(call)
    await ImportStatuses(call.deps.graveler).cancel(repo_id, import_id)
    run = call.deps.imports.get(import_id)
    if isinstance(run, ImportRun):
        run.stopping = CANCELED  # ours: stop at the next checkpoint rather than after the next refresh
    return web.Response(status=204)


R = "/repositories/{repository}/branches/{branch}/import"
ROUTES = [("POST", R, import_start), ("GET", R, import_status), ("DELETE", R, import_cancel)]

"""Import (start, status, cancel) on top of the core's import
(:meth:`~lakefs_core.repos.graveler.Graveler.import_objects`).

``POST .../import`` starts the import as a task of this server process and answers 202 with its id;
``GET .../import?id=`` reports it (lakeFS's ``ImportStatus``); ``DELETE .../import?id=`` cancels it
(an import cancelled before its branch compare-and-swap leaves no commit). Differences from lakeFS:
each path must be a ``common_prefix``; several paths are imported one after another, a commit
each; the commit's metadata is not recorded; the status lives in the process that runs the import
(behind a load balancer, ask the same instance), for an hour after it ends.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError
from lakefs_core.refs.model import Commit
from lakefs_server.rest.app import Call, RestDeps
from lakefs_server.rest.models import ImportCreation, body, commit_json
from lakefs_server.rest.wire import message_of

KEEP_SECONDS: Final = 3600
MAX_RUNNING: Final = 100


@dataclass
class ImportTask:
    id: str
    repo: str
    branch: str
    task: asyncio.Task[None] | None = None
    completed: bool = False
    ingested: int = 0
    commit: Commit | None = None
    metarange_id: str = ""
    error: str | None = None
    updated: float = field(default_factory=time.time)
    ended: float | None = None

    def to_json(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "completed": self.completed,
            "update_time": datetime.fromtimestamp(self.updated, UTC).isoformat(),
            "ingested_objects": self.ingested,
        }
        if self.metarange_id:
            status["metarange_id"] = self.metarange_id
        if self.commit is not None:
            status["commit"] = commit_json(self.commit)
        if self.error is not None:
            status["error"] = {"message": self.error}
        return status


def _tasks(deps: RestDeps) -> dict[str, ImportTask]:
    tasks = deps.imports
    now = time.time()
    for key in [
        k for k, t in tasks.items() if isinstance(t, ImportTask) and t.ended and now - t.ended > KEEP_SECONDS
    ]:
        del tasks[key]
    return tasks


async def _run(call: Call, job: ImportTask, spec: ImportCreation) -> None:
    try:
        for location in spec.paths:
            result = await call.deps.graveler.import_objects(
                job.repo,
                job.branch,
                location.destination,
                location.path,
                committer=call.username,
                message=spec.commit.message,
            )
            job.ingested += result.entries
            job.metarange_id = result.metarange_id
            job.commit = await call.deps.graveler.get_commit_by_id(job.repo, result.commit_id)
            job.updated = time.time()
    except asyncio.CancelledError:
        job.error = "import canceled"
        raise
    except LakeFSError as e:
        job.error = message_of(e)
    finally:
        job.completed = True
        job.updated = job.ended = time.time()


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
    tasks = _tasks(call.deps)
    if sum(1 for t in tasks.values() if isinstance(t, ImportTask) and not t.completed) >= MAX_RUNNING:
        raise BadInputError("too many imports running", field="paths")
    job = ImportTask(uuid.uuid4().hex, repo_id, branch)
    job.task = asyncio.get_running_loop().create_task(_run(call, job, spec))
    tasks[job.id] = job
    return web.json_response({"id": job.id}, status=202)


def _job(call: Call) -> ImportTask:
    job = _tasks(call.deps).get(call.request.query.get("id", ""))
    if (
        not isinstance(job, ImportTask)
        or job.repo != call.param("repository")
        or job.branch != call.param("branch")
    ):
        raise NotFoundError("import not found")
    return job


async def import_status(call: Call) -> web.StreamResponse:
    repo_id, branch = call.param("repository"), call.param("branch")
    await call.authorize(perms.Permission(perms.READ_BRANCH, perms.branch_arn(repo_id, branch)))
    return web.json_response(_job(call).to_json())


async def import_cancel(call: Call) -> web.StreamResponse:
    repo_id, branch = call.param("repository"), call.param("branch")
    await call.authorize(perms.Permission(perms.IMPORT_CANCEL, perms.branch_arn(repo_id, branch)))
    job = _job(call)
    if job.completed:
        raise BadInputError("the import has already completed", field="id")
    if job.task is not None:
        job.task.cancel()
    return web.Response(status=204)


R = "/repositories/{repository}/branches/{branch}/import"
ROUTES = [("POST", R, import_start), ("GET", R, import_status), ("DELETE", R, import_cancel)]

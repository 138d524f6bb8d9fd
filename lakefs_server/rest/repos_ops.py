"""Repositories: list, create, get, delete (lakeFS's ``/repositories`` operations)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_core.auth.policy import check_permission, has_action_on_any_resource
from lakefs_core.errors import BadInputError
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import RepositoryCreation, body, repository_json
from lakefs_server.rest.wire import UnauthorizedError, amount_of, page, query_bool


async def list_repositories(call: Call) -> web.StreamResponse:
    # lakeFS skips authorize() here: a user allowed fs:ListRepositories somewhere sees the
    # repositories whose ARN allows it.
    policies = await call.deps.auth.store.effective_policies(call.username)
    if not has_action_on_any_resource(policies, perms.LIST_REPOSITORIES):
        raise UnauthorizedError(f"user {call.username}: not allowed to {perms.LIST_REPOSITORIES}")
    prefix = call.request.query.get("prefix", "")
    search = call.request.query.get("search", "")
    after = call.request.query.get("after", "")
    amount = amount_of(call.request)
    results: list[dict[str, Any]] = []
    has_more = False
    async for repo in call.deps.graveler.list_repositories():
        if repo.id <= after or not repo.id.startswith(prefix) or search not in repo.id:
            continue
        if not check_permission(perms.repo_arn(repo.id), call.username, policies, perms.LIST_REPOSITORIES):
            continue
        if len(results) == amount:
            has_more = True
            break
        results.append(repository_json(repo))
    next_offset = results[-1]["id"] if results else ""
    return web.json_response(page(results, has_more, next_offset, amount))


async def create_repository(call: Call) -> web.StreamResponse:
    spec = await body(call.request, RepositoryCreation)
    if spec.storage_id:
        raise BadInputError("this server has one storage; storage_id must be empty", field="storage_id")
    await call.authorize(
        perms.AllOf(
            (
                perms.Permission(perms.CREATE_REPOSITORY, perms.repo_arn(spec.name)),
                perms.Permission(
                    perms.ATTACH_STORAGE_NAMESPACE, perms.storage_namespace_arn(spec.storage_namespace)
                ),
            )
        )
    )
    bare = query_bool(call.request, "bare")
    graveler = call.deps.graveler
    repo = await graveler.create_repository(
        spec.name, spec.storage_namespace, spec.default_branch or "main", read_only=spec.read_only, bare=bare
    )
    if bare:
        # lakeFS's plumbing answer (the target of a refs restore): no sample data, no read_only field.
        answer = repository_json(repo)
        del answer["read_only"]
        return web.json_response(answer, status=201)
    if spec.sample_data:
        from lakefs_server.rest import sample

        await sample.populate(call.deps, repo, call.username)
    return web.json_response(repository_json(repo), status=201)


async def get_repository(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.READ_REPOSITORY, perms.repo_arn(repo_id)))
    # As lakeFS's repository cache (5 s there): the record writers use, at most write_cache_seconds
    # old and dropped at once when this process deletes the repository or changes read-only.
    # lakefs-spec reads it before every upload.
    return web.json_response(repository_json(await call.deps.graveler.recent_repository(repo_id)))


async def delete_repository(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.DELETE_REPOSITORY, perms.repo_arn(repo_id)))
    repo = await call.deps.graveler.repository(repo_id)
    if repo.read_only and not query_bool(call.request, "force"):
        from lakefs_core.errors import ReadOnlyError

        raise ReadOnlyError(f"repository {repo_id!r} is read-only")
    await call.deps.graveler.delete_repository(repo_id)
    return web.Response(status=204)


ROUTES = [
    ("GET", "/repositories", list_repositories),
    ("POST", "/repositories", create_repository),
    ("GET", "/repositories/{repository}", get_repository),
    ("DELETE", "/repositories/{repository}", delete_repository),
]

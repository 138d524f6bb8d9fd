"""Branches, tags, commits, logs, diffs and merges (lakeFS's ref operations).

Branch protection as lakeFS applies it (:mod:`.protection`): a protected branch refuses staging
writes (uploads, deletes, resets of uncommitted changes), commits and hard resets with 403 before
anything changes; merges, reverts and cherry-picks into it are allowed (lakeFS's quickstart merges
into its protected ``main``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_core.committed.model import DiffRecord, MergeStrategy
from lakefs_core.errors import BadInputError, NoChangesError, NotFoundError, ProtectedBranchError, encode_utf8
from lakefs_core.format.records import decode_entry
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import (
    BranchCreation,
    CherryPickCreation,
    CommitCreation,
    MergeBody,
    ResetCreation,
    RevertCreation,
    TagCreation,
    body,
    commit_json,
    ref_json,
)
from lakefs_server.rest.wire import amount_of, page, query_bool, refuse_dirty


def _branch_node(action: str, call: Call, branch: str) -> perms.Permission:
    return perms.Permission(action, perms.branch_arn(call.param("repository"), branch))


def _repo_node(action: str, call: Call) -> perms.Permission:
    return perms.Permission(action, perms.repo_arn(call.param("repository")))


# -- branches ----------------------------------------------------------------------------------------


async def list_branches(call: Call) -> web.StreamResponse:
    await call.authorize(_repo_node(perms.LIST_BRANCHES, call))
    q = call.request.query
    prefix, after, amount = q.get("prefix", ""), q.get("after", ""), amount_of(call.request)
    show_hidden = query_bool(call.request, "show_hidden")
    results: list[dict[str, Any]] = []
    has_more = False
    start = max(after, _before(prefix))
    async for branch in call.deps.graveler.list_branches(call.param("repository"), start):
        if branch.id <= after or (branch.hidden and not show_hidden):
            continue
        if not branch.id.startswith(prefix):
            if branch.id > prefix:
                break
            continue
        if len(results) == amount:
            has_more = True
            break
        results.append(ref_json(branch.id, branch.commit_id))
    return web.json_response(page(results, has_more, results[-1]["id"] if results else "", amount))


def _before(prefix: str) -> str:
    # list_branches(after=...) is exclusive: start just before the prefix.
    return prefix[:-1] if prefix else ""


async def create_branch(call: Call) -> web.StreamResponse:
    spec = await body(call.request, BranchCreation)
    await call.authorize(
        perms.AllOf((_branch_node(perms.CREATE_BRANCH, call, spec.name), _repo_node(perms.READ_COMMIT, call)))
    )
    repo_id = call.param("repository")
    graveler = call.deps.graveler
    branch = await graveler.create_branch(
        repo_id, spec.name, spec.source, force=spec.force, hidden=spec.hidden
    )
    return web.Response(status=201, text=branch.commit_id, content_type="text/html")


async def get_branch(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(_branch_node(perms.READ_BRANCH, call, name))
    branch = await call.deps.graveler.branch(call.param("repository"), name)
    return web.json_response(ref_json(branch.id, branch.commit_id))


async def delete_branch(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(_branch_node(perms.DELETE_BRANCH, call, name))
    repo = await call.deps.graveler.repository(call.param("repository"))
    if name == repo.default_branch:
        raise ProtectedBranchError("cannot delete the repository's default branch")
    await call.deps.graveler.delete_branch(repo.id, name, force=query_bool(call.request, "force"))
    return web.Response(status=204)


async def reset_branch(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(_branch_node(perms.REVERT_BRANCH, call, name))
    spec = await body(call.request, ResetCreation)
    repo_id = call.param("repository")
    await call.deps.graveler.branch(repo_id, name)
    match spec.type:
        case "reset":
            await call.deps.graveler.reset_branch(repo_id, name, force=spec.force)
        case "object" | "common_prefix":
            await call.deps.graveler.reset_changes(
                repo_id, name, encode_utf8(spec.path, "path"), prefix=spec.type != "object", force=spec.force
            )
        case _:
            raise BadInputError("must be reset, object or common_prefix", field="type")
    return web.Response(status=204)


async def hard_reset_branch(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(_branch_node(perms.REVERT_BRANCH, call, name))
    ref = call.request.query.get("ref")
    if not ref:
        raise BadInputError("missing", field="ref")
    repo_id = call.param("repository")
    await call.deps.graveler.reset_branch(repo_id, name, ref, force=query_bool(call.request, "force"))
    return web.Response(status=204)


async def revert_branch(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(_branch_node(perms.REVERT_BRANCH, call, name))
    spec = await body(call.request, RevertCreation)
    repo_id = call.param("repository")
    await refuse_dirty(call.deps.graveler, repo_id, name)
    overrides = spec.commit_overrides
    await call.deps.graveler.revert(
        repo_id,
        name,
        spec.ref,
        committer=call.username,
        parent_number=spec.parent_number or 1,
        message=overrides.message or f"Revert {spec.ref}",  # lakeFS names the ref as given
        metadata=overrides.metadata,
        allow_empty=spec.allow_empty,
        force=spec.force,
    )
    return web.Response(status=204)


async def cherry_pick(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(
        perms.AllOf((_branch_node(perms.CREATE_COMMIT, call, name), _repo_node(perms.READ_COMMIT, call)))
    )
    spec = await body(call.request, CherryPickCreation)
    repo_id = call.param("repository")
    await refuse_dirty(call.deps.graveler, repo_id, name)
    commit = await call.deps.graveler.cherry_pick(
        repo_id,
        name,
        spec.ref,
        committer=call.username,
        parent_number=spec.parent_number,
        message=spec.commit_overrides.message,
        metadata=spec.commit_overrides.metadata,
        force=spec.force,
    )
    return web.json_response(commit_json(commit), status=201)


# -- commits -----------------------------------------------------------------------------------------


async def commit(call: Call) -> web.StreamResponse:
    name = call.param("branch")
    await call.authorize(_branch_node(perms.CREATE_COMMIT, call, name))
    if call.request.query.get("source_metarange"):
        raise BadInputError("commit from a source metarange is not served here", field="source_metarange")
    spec = await body(call.request, CommitCreation)
    repo_id = call.param("repository")
    created = await call.deps.graveler.commit(
        repo_id,
        name,
        committer=call.username,
        message=spec.message,
        metadata=spec.metadata,
        allow_empty=spec.allow_empty,
        force=spec.force,
        date=None if spec.date is None else datetime.fromtimestamp(spec.date, UTC),
    )
    return web.json_response(commit_json(created), status=201)


async def get_commit(call: Call) -> web.StreamResponse:
    await call.authorize(_repo_node(perms.READ_COMMIT, call))
    found = await call.deps.graveler.get_commit(call.param("repository"), call.param("commitId"))
    return web.json_response(commit_json(found))


async def log_commits(call: Call) -> web.StreamResponse:
    ref = call.param("ref")
    await call.authorize(_branch_node(perms.READ_BRANCH, call, ref))
    from lakefs_server.rest import history

    return web.json_response(await history.log_page(call, ref))


# -- diffs and merges -----------------------------------------------------------------------------------


def diff_json(record: DiffRecord) -> dict[str, Any]:
    value = record.right if record.right is not None else record.left
    size = decode_entry(value.data).size if value is not None else None
    return {
        "type": record.type.value,
        "path": record.key.decode("utf-8", "backslashreplace"),
        "path_type": "object",
        "size_bytes": size,
    }


async def diff_page(call: Call, records: AsyncIterator[DiffRecord]) -> dict[str, Any]:
    q = call.request.query
    after, prefix, delimiter = q.get("after", ""), q.get("prefix", ""), q.get("delimiter", "")
    amount = amount_of(call.request)
    results: list[dict[str, Any]] = []
    has_more = False
    last_prefix = ""
    async for record in records:
        path = record.key.decode("utf-8", "backslashreplace")
        if not path.startswith(prefix):
            continue
        item = diff_json(record)
        if delimiter:
            cut = path.find(delimiter, len(prefix))
            if cut >= 0:
                common = path[: cut + len(delimiter)]
                if common == last_prefix:
                    continue
                last_prefix = common
                item = {"type": "prefix_changed", "path": common, "path_type": "common_prefix"}
        if item["path"] <= after:
            continue
        if len(results) == amount:
            has_more = True
            break
        results.append(item)
    return page(results, has_more, results[-1]["path"] if results else "", amount)


async def diff_branch(call: Call) -> web.StreamResponse:
    await call.authorize(_repo_node(perms.LIST_OBJECTS, call))
    records = call.deps.graveler.diff_uncommitted(call.param("repository"), call.param("branch"))
    return web.json_response(await diff_page(call, records))


async def diff_refs(call: Call) -> web.StreamResponse:
    await call.authorize(_repo_node(perms.LIST_OBJECTS, call))
    repo_id, left, right = call.param("repository"), call.param("leftRef"), call.param("rightRef")
    kind = call.request.query.get("type", "three_dot")
    if kind not in ("two_dot", "three_dot"):
        raise BadInputError("must be two_dot or three_dot", field="type")
    if kind == "three_dot":
        base = await call.deps.graveler.merge_base(repo_id, left, right)
        if base is None:
            raise NotFoundError(f"{left!r} and {right!r} have no common ancestor")
        left = base.id
    records = call.deps.graveler.diff(repo_id, left, right)
    return web.json_response(await diff_page(call, records))


STRATEGIES = {
    "": MergeStrategy.NONE,
    "dest-wins": MergeStrategy.DEST_WINS,
    "source-wins": MergeStrategy.SOURCE_WINS,
}


async def merge(call: Call) -> web.StreamResponse:
    dest = call.param("destinationBranch")
    await call.authorize(_branch_node(perms.CREATE_COMMIT, call, dest))
    spec = await body(call.request, MergeBody) if call.request.can_read_body else MergeBody()
    strategy = STRATEGIES.get(spec.strategy or "")
    if strategy is None:
        raise BadInputError("must be dest-wins or source-wins", field="strategy")
    repo_id, source = call.param("repository"), call.param("sourceRef")
    await refuse_dirty(call.deps.graveler, repo_id, dest)
    graveler = call.deps.graveler
    message = spec.message or f"Merge '{source}' into '{dest}'"
    try:
        merged = await graveler.merge(
            repo_id,
            source,
            dest,
            committer=call.username,
            message=message,
            strategy=strategy,
            metadata=spec.metadata,
            force=spec.force,
            squash=spec.squash_merge,
        )
    except NoChangesError:
        if not spec.allow_empty:
            raise
        merged = await graveler.get_commit(repo_id, dest)
    return web.json_response({"reference": merged.id})


async def find_merge_base(call: Call) -> web.StreamResponse:
    await call.authorize(_repo_node(perms.LIST_COMMITS, call))
    repo_id, source, dest = call.param("repository"), call.param("sourceRef"), call.param("destinationBranch")
    graveler = call.deps.graveler
    base = await graveler.merge_base(repo_id, source, dest)
    if base is None:
        raise NotFoundError(f"{source!r} and {dest!r} have no common ancestor")
    return web.json_response(
        {
            "source_commit_id": (await graveler.get_commit(repo_id, source)).id,
            "destination_commit_id": (await graveler.get_commit(repo_id, dest)).id,
            "base_commit_id": base.id,
        }
    )


async def create_tag(call: Call) -> web.StreamResponse:
    spec = await body(call.request, TagCreation)
    await call.authorize(perms.Permission(perms.CREATE_TAG, perms.tag_arn(call.param("repository"), spec.id)))
    tag = await call.deps.graveler.create_tag(call.param("repository"), spec.id, spec.ref, force=spec.force)
    return web.json_response(ref_json(tag.id, tag.commit_id), status=201)


async def list_tags(call: Call) -> web.StreamResponse:
    await call.authorize(_repo_node(perms.LIST_TAGS, call))
    q = call.request.query
    prefix, after, amount = q.get("prefix", ""), q.get("after", ""), amount_of(call.request)
    results: list[dict[str, Any]] = []
    has_more = False
    async for tag in call.deps.graveler.list_tags(call.param("repository")):
        if tag.id <= after or not tag.id.startswith(prefix):
            continue
        if len(results) == amount:
            has_more = True
            break
        results.append(ref_json(tag.id, tag.commit_id))
    return web.json_response(page(results, has_more, results[-1]["id"] if results else "", amount))


async def get_tag(call: Call) -> web.StreamResponse:
    name = call.param("tag")
    await call.authorize(perms.Permission(perms.READ_TAG, perms.tag_arn(call.param("repository"), name)))
    tag = await call.deps.graveler.tag(call.param("repository"), name)
    return web.json_response(ref_json(tag.id, tag.commit_id))


async def delete_tag(call: Call) -> web.StreamResponse:
    name = call.param("tag")
    await call.authorize(perms.Permission(perms.DELETE_TAG, perms.tag_arn(call.param("repository"), name)))
    await call.deps.graveler.delete_tag(
        call.param("repository"), name, force=query_bool(call.request, "force")
    )
    return web.Response(status=204)


R = "/repositories/{repository}"
ROUTES = [
    ("GET", R + "/branches", list_branches),
    ("POST", R + "/branches", create_branch),
    ("GET", R + "/branches/{branch}", get_branch),
    ("DELETE", R + "/branches/{branch}", delete_branch),
    ("PUT", R + "/branches/{branch}", reset_branch),
    ("PUT", R + "/branches/{branch}/hard_reset", hard_reset_branch),
    ("POST", R + "/branches/{branch}/revert", revert_branch),
    ("POST", R + "/branches/{branch}/cherry-pick", cherry_pick),
    ("GET", R + "/branches/{branch}/diff", diff_branch),
    ("POST", R + "/branches/{branch}/commits", commit),
    ("GET", R + "/commits/{commitId}", get_commit),
    ("GET", R + "/refs/{ref}/commits", log_commits),
    ("GET", R + "/refs/{leftRef}/diff/{rightRef}", diff_refs),
    ("POST", R + "/refs/{sourceRef}/merge/{destinationBranch}", merge),
    ("GET", R + "/refs/{sourceRef}/merge/{destinationBranch}", find_merge_base),
    ("GET", R + "/tags", list_tags),
    ("POST", R + "/tags", create_tag),
    ("GET", R + "/tags/{tag}", get_tag),
    ("DELETE", R + "/tags/{tag}", delete_tag),
]

"""``GET /refs/{ref}/commits``: lakeFS's log, with its paging and filters.

Without ``first_parent`` every ancestor is listed, newest generation then newest date first (as
lakeFS's commit iterator orders them); with it, the first-parent chain. ``objects`` and ``prefixes``
keep only commits that changed one of the objects or something under one of the prefixes against
their first parent; ``stop_at`` ends the walk at that commit (included); ``limit`` returns at most
``amount`` with no further page.
"""

from __future__ import annotations

import heapq
from datetime import UTC, datetime
from typing import Any

from lakefs_core.errors import BadInputError, NotFoundError, encode_utf8
from lakefs_core.refs.model import Commit
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import commit_json
from lakefs_server.rest.wire import amount_of, page, query_bool

MAX_FILTERS = 1000


async def _changed(
    call: Call, repo_id: str, commit: Commit, objects: list[bytes], prefixes: list[bytes]
) -> bool:
    graveler = call.deps.graveler
    parent = commit.parents[0] if commit.parents else None
    for key in objects:
        mine = await _identity(call, repo_id, commit.id, key)
        theirs = await _identity(call, repo_id, parent, key) if parent else None
        if mine != theirs:
            return True
    if prefixes:
        base = parent
        if base is None:
            return False
        async for record in graveler.diff(repo_id, base, commit.id):
            if any(record.key.startswith(p) for p in prefixes):
                return True
    return False


async def _identity(call: Call, repo_id: str, ref: str, key: bytes) -> bytes | None:
    try:
        return (await call.deps.graveler.get_entry(repo_id, ref, key)).identity
    except NotFoundError:
        return None


async def _walk(call: Call, repo_id: str, ref: str, first_parent: bool):  # type: ignore[no-untyped-def]
    graveler = call.deps.graveler
    head = await graveler.get_commit(repo_id, ref)
    if first_parent:
        current: Commit | None = head
        while current is not None:
            yield current
            current = (
                await graveler.get_commit_by_id(repo_id, current.parents[0]) if current.parents else None
            )
        return
    heap: list[tuple[int, float, str, Commit]] = [
        (-head.generation, -head.creation_date.timestamp(), head.id, head)
    ]
    seen = {head.id}
    while heap:
        _, _, _, commit = heapq.heappop(heap)
        yield commit
        for pid in commit.parents:
            if pid not in seen:
                seen.add(pid)
                parent = await graveler.get_commit_by_id(repo_id, pid)
                heapq.heappush(heap, (-parent.generation, -parent.creation_date.timestamp(), pid, parent))


def _since(raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise BadInputError("must be an RFC 3339 date-time", field="since") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def log_page(call: Call, ref: str) -> dict[str, Any]:
    q = call.request.query
    repo_id = call.param("repository")
    after = q.get("after", "")
    amount = amount_of(call.request)
    objects = [encode_utf8(o, "objects") for o in q.getall("objects", [])]
    prefixes = [encode_utf8(p, "prefixes") for p in q.getall("prefixes", [])]
    if len(objects) + len(prefixes) > MAX_FILTERS:
        raise BadInputError(f"at most {MAX_FILTERS} objects and prefixes", field="objects")
    limit = query_bool(call.request, "limit")
    first_parent = query_bool(call.request, "first_parent")
    stop_at = q.get("stop_at", "")
    since = _since(q.get("since", ""))
    results: list[dict[str, Any]] = []
    has_more = False
    skipping = bool(after)
    async for commit in _walk(call, repo_id, ref, first_parent):
        if since is not None and commit.creation_date < since:
            break
        if skipping:
            skipping = commit.id != after
            continue
        if (objects or prefixes) and not await _changed(call, repo_id, commit, objects, prefixes):
            if stop_at and commit.id.startswith(stop_at):
                break
            continue
        if len(results) == amount:
            has_more = not limit
            break
        results.append(commit_json(commit))
        if stop_at and commit.id.startswith(stop_at):
            break
    return page(results, has_more, results[-1]["id"] if results else "", amount)

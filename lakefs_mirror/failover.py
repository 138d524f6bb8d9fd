"""Failover and failback of a mirror: the answer to "the source region is gone".

:func:`promote` (``POST .../mirrors/{id}/promote``, ``lakefs-mirror promote``) makes a mirror's
destination repository writable, where every branch and tag already points at a fully validated
commit (the engine never moves a mirror ref to anything else, so nothing partly arrived is ever
exposed), and stops mirroring into it. In order:

1. it refuses (409) while the source region is reachable (its KV answers for the source repository
   within ``probe_timeout`` seconds) and the mirror is not paused, unless ``force``;
2. with the source reachable (a planned switch), the source repository is made read-only first, so
   writes have exactly one home from then on, and the live source heads are recorded; otherwise the
   source heads the destination daemon last saw (its status rows) are recorded;
3. the promotion row is inserted (the destination daemon stops mirroring the mirror from its next
   pass on; a second promote of the same mirror completes an interrupted one and returns the record),
   then the destination repository is made writable, then its heads are read and recorded.

A pass already in flight may still move a ref to a further fully validated commit before it sees
the promotion (never past a user's write: its moves are compare-and-swaps on the old head).

:func:`failback` (``POST .../mirrors/{id}/failback``) runs once the old source region is back. For
every branch of the old source repository whose head is not the last commit mirrored out of it
(the head the destination had when it was promoted), that head is kept on a new branch
``failback-<UTC time>-<branch>`` (lakeFS branch names have no ``/``) and the branch is moved back
(compare-and-swap) to the last mirrored commit; a branch never mirrored is kept the same way and
then deleted; tags that are not in the promoted repository are kept as branches
``failback-<time>-tag-<tag>``. Kept branches are never overwritten: the mirror engine never deletes
or moves a ``failback-`` branch. Then the old source repository is made read-only and the reverse
mirror (promoted repository -> old source repository, same namespace) is created; the promotion
records what was kept (``note``, shown by both mirrors' status). Once the reverse mirror caught up,
promoting it returns writes to the original region.

Errors are the project's typed errors: 404 unknown mirror, 409 a refused promotion or failback
(naming why, also a region this daemon has no configuration for), 503 a region it cannot reach
when it must (the failback's old source region).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from lakefs_core.errors import (
    ConflictError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.repos.graveler import Graveler
from lakefs_mirror.db import Mirror, MirrorsDB, Promotion

__all__ = ["FAILBACK_PREFIX", "FailbackResult", "failback", "promote", "source_reachable"]

FAILBACK_PREFIX = "failback-"
PROBE_TIMEOUT = 5.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def _heads(g: Graveler, repo_id: str) -> dict[str, str]:
    """``{"branch:NAME": commit, "tag:NAME": commit}`` of a repository."""
    heads = {f"branch:{b.id}": b.commit_id async for b in g.list_branches(repo_id)}
    heads.update({f"tag:{t.id}": t.commit_id async for t in g.list_tags(repo_id)})
    return heads


async def source_reachable(
    gravelers: Mapping[str, Graveler], mirror: Mirror, probe_seconds: float = PROBE_TIMEOUT
) -> dict[str, str] | None:
    """The live source heads, or None when the source region does not answer (not configured
    here, unreachable, or slower than ``probe_seconds``). A missing source repository is reachable: {}."""
    src = gravelers.get(mirror.source_region)
    if src is None:
        return None
    try:
        return await asyncio.wait_for(_heads(src, mirror.source_repo), probe_seconds)
    except NotFoundError:
        return {}
    except (LakeFSError, TimeoutError, OSError):
        return None


def _destination(gravelers: Mapping[str, Graveler], mirror: Mirror) -> Graveler:
    dst = gravelers.get(mirror.region)
    if dst is None:
        raise ConflictError(  # a fact of this deployment, not a transient state: no 503
            f"this daemon has no access to region {mirror.region!r}'s KV store (not configured here): "
            "promote the mirror through a daemon (or configuration) of that region"
        )
    return dst


async def promote(
    db: MirrorsDB,
    gravelers: Mapping[str, Graveler],
    mirror_id: str,
    *,
    force: bool = False,
    probe_timeout: float = PROBE_TIMEOUT,
    clock: Callable[[], datetime] = _utcnow,
) -> Promotion:
    """Promote mirror ``mirror_id`` (see the module docstring); returns the recorded promotion."""
    mirror = await db.get_mirror(mirror_id)
    dst = _destination(gravelers, mirror)
    done = await db.promotion(mirror.id)
    if done is not None:  # a re-run completes an interrupted promotion
        await _make_writable(db, dst, mirror)
        return await db.promotion(mirror.id) or done
    live = await source_reachable(gravelers, mirror, probe_timeout)
    if live is not None and not mirror.paused and not force:
        raise ConflictError(
            f"the source region {mirror.source_region!r} is reachable and mirror {mirror.id} is not paused: "
            "stop the writers, wait until its status says caught_up, pause it (PATCH "
            '{"paused": true}) and promote again, or promote with force'
        )
    if live is not None and live:
        source = gravelers[mirror.source_region]
        await source.set_read_only(mirror.source_repo, True)  # writes get exactly one home
        live = await _heads(source, mirror.source_repo)
    if live is not None:
        source_heads = live
    else:
        source_heads = {
            f"{s.kind}:{s.branch}": s.source_head for s in await db.list_status(mirror.id) if s.source_head
        }
    await db.record_promotion(
        Promotion(
            mirror_id=mirror.id,
            promoted_at=clock(),
            forced=force,
            source_reachable=live is not None,
            heads={},
            source_heads=source_heads,
        )
    )
    await _make_writable(db, dst, mirror)
    promoted = await db.promotion(mirror.id)
    assert promoted is not None
    return promoted


async def _make_writable(db: MirrorsDB, dst: Graveler, mirror: Mirror) -> None:
    repo = await dst.repository(mirror.name)
    if repo.read_only:
        await dst.set_read_only(mirror.name, False)
    await db.update_promotion(mirror.id, heads=await _heads(dst, mirror.name))


@dataclass(frozen=True)
class FailbackResult:
    reverse: Mirror  # the new mirror: promoted repository -> old source repository
    kept: dict[str, str]  # old source branch/tag ("branch:NAME") -> the failback branch keeping it
    note: str


async def failback(
    db: MirrorsDB,
    gravelers: Mapping[str, Graveler],
    mirror_id: str,
    *,
    mode: str | None = None,
    clock: Callable[[], datetime] = _utcnow,
) -> FailbackResult:
    """Create the reverse mirror of promoted mirror ``mirror_id``, keeping what diverged (module
    docstring). 409 unless it was promoted, or when a failback already ran."""
    mirror = await db.get_mirror(mirror_id)
    promotion = await db.promotion(mirror.id)
    if promotion is None:
        raise ConflictError(f"mirror {mirror.id} was not promoted: there is nothing to fail back")
    if promotion.failback_mirror_id is not None:
        raise ConflictError(
            f"mirror {mirror.id} was already failed back by mirror {promotion.failback_mirror_id}"
        )
    old = gravelers.get(mirror.source_region)
    if old is None:
        raise ConflictError(
            f"this daemon has no access to region {mirror.source_region!r}'s KV store (not configured here)"
        )
    _destination(gravelers, mirror)
    old_repo = await old.repository(mirror.source_repo)
    stamp = clock().strftime("%Y%m%dT%H%M%SZ")
    kept = await _keep_divergence(old, mirror.source_repo, promotion.heads, stamp)
    if not old_repo.read_only:
        await old.set_read_only(mirror.source_repo, True)
    note = _describe(kept, stamp)
    reverse = await db.create_mirror(
        source_repo=mirror.name,
        source_region=mirror.region,
        name=mirror.source_repo,
        region=mirror.source_region,
        storage_namespace=old_repo.storage_namespace,
        branch_filter=mirror.branch_filter,
        mode=mode or mirror.mode,  # type: ignore[arg-type]
        mirror_tags=mirror.mirror_tags,
    )
    await db.update_promotion(mirror.id, note=note, failback_mirror_id=reverse.id)
    return FailbackResult(reverse, kept, note)


async def _keep_divergence(
    old: Graveler, repo_id: str, mirrored: Mapping[str, str], stamp: str
) -> dict[str, str]:
    """Keep every old-source ref that moved past what was mirrored out of it on a failback branch,
    and move branches back to the last mirrored commit (compare-and-swap)."""
    kept: dict[str, str] = {}
    branches = [b async for b in old.list_branches(repo_id) if not b.id.startswith(FAILBACK_PREFIX)]
    default = (await old.repository(repo_id)).default_branch
    for branch in branches:
        last = mirrored.get(f"branch:{branch.id}")
        if last == branch.commit_id:
            continue
        keeper = f"{FAILBACK_PREFIX}{stamp}-{branch.id}"[:256]
        await old.set_branch_head_if(repo_id, keeper, None, branch.commit_id, force=True)
        kept[f"branch:{branch.id}"] = keeper
        try:
            if last is not None:
                await old.set_branch_head_if(repo_id, branch.id, branch.commit_id, last, force=True)
            elif branch.id != default:
                await old.delete_branch(repo_id, branch.id, force=True)
        except PreconditionFailedError as e:
            raise ConflictError(
                f"branch {branch.id!r} of {repo_id!r} moved during the failback (kept on {keeper}); "
                "stop the writers in the old source region and fail back again"
            ) from e
    async for tag in old.list_tags(repo_id):
        if mirrored.get(f"tag:{tag.id}") != tag.commit_id:
            keeper = f"{FAILBACK_PREFIX}{stamp}-tag-{tag.id}"[:256]
            if all(c.isalnum() or c in "-_" for c in keeper):
                await old.set_branch_head_if(repo_id, keeper, None, tag.commit_id, force=True)
                kept[f"tag:{tag.id}"] = keeper
    return kept


def _describe(kept: Mapping[str, str], stamp: str) -> str:
    if not kept:
        return f"failback at {stamp}: the old source had nothing after the last mirrored commits"
    parts = ", ".join(f"{ref} on {branch}" for ref, branch in sorted(kept.items()))
    return (
        f"failback at {stamp}: commits written on the old source after the last mirrored commit are "
        f"kept (never overwritten): {parts}"
    )

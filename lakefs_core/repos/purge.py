"""Audited purge: destroy the physical objects a path had, keep history and commit ids unchanged.

The compliance case (issue 11): a file must be gone from storage, everywhere, now, and the history
must not be rewritten. :func:`purge_path` finds the addresses ``path`` had

- at one ``ref`` (a branch's staged value included), or
- with ``all_history``, in every commit of the repository (reachable or not) and in the current value
  of every branch (staging included),

and, only when ``yes`` is given (dry run otherwise), :func:`record_purge` carries it out:

0. announces that the repository has purges (once; :func:`~.purge_markers.announce` then waits
   a second, so that readers' "no purge here" answers expire before any marker exists);
1. writes ``purging/<audit id>`` (the purge is unfinished: what the GC daemon looks for);
2. writes the audit record ``purges/<audit id>`` (create-only: who, when, why, which addresses);
3. writes a marker ``purged/<address>`` -> audit id per address, in one KV batch;
4. deletes the objects, one by one (a missing one counts as deleted);
5. marks the record done (compare-and-swap from the stored record) and drops ``purging/``.

**A purge is purged before its first delete.** Every user read of an object (``Objects.stat``,
``read``, ``read_stat``: ``fs cat``, ``fs stat``, ``fs download``) checks its marker first and
answers :class:`~lakefs_core.errors.PurgedError` (exit 17, HTTP 410) naming the record, whether or
not the object is still in the store; the markers are durable before anything is deleted, and the
announcement of step 0 makes sure no reader still trusts an older "no purge here"
(:mod:`.purge_markers` argues it).

**A crashed purge is completed, never repeated.** A re-run of the same purge (same path, ref and
``all_history``) finds the unfinished record (by its target, or through the markers of the addresses
it would purge) and completes THAT record; only addresses no purge covers yet go into a new one.
The GC daemon completes, on its own, records left unfinished longer than its grace
(:func:`complete_stuck_purges`). Completing deletes exactly the addresses the record names, and
only data objects (:func:`is_data_object`: never ``_lakefs/``, never outside the namespace).

The dry run also names every other ref and path that shares an object the purge would destroy
(:mod:`.purge_shared`), so the operator sees the collateral before ``--yes``.

External addresses (outside the repository's namespace) are never deleted: they are listed as
skipped. Entries keep pointing at the purged addresses; commit ids, metaranges and ranges are
unchanged. Mirrors copy the records and markers into their own repositories and delete their copies
(:func:`record_purge` is what they call).
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.faults import fault_point
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import decode_entry
from lakefs_core.keys import DATA_DIR, TABLES_DIR
from lakefs_core.kv.base import Expect, KVEntry
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Repository
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.namespace_claims import check_for_gc
from lakefs_core.repos.purge_markers import announce, lookup_markers
from lakefs_core.repos.purge_shared import SharedUse
from lakefs_core.repos.reading import get_entry

if TYPE_CHECKING:
    from lakefs_core.repos.purge_shared import CommitMap

MAX_REASON = 1024
MAX_ADDRESSES = 100_000  # one purge record stays a bounded KV value
MAX_RECORD_BYTES = 64 << 20
# What one record may take when written: under DynamoDB's 400 KB item limit, so every KV driver
# behaves alike (a bigger purge is refused before anything is written; purge commit by commit).
MAX_STORED_RECORD_BYTES = 350_000
MAX_PATH_BYTES = 1024
_AUDIT_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")
_SETTLE_ATTEMPTS = 5
_OPEN_SCAN = 1000  # unfinished-purge entries looked at per call of complete_stuck_purges


class PurgeRecord(BaseModel):
    """The audit record: who purged what, when, why, and the addresses destroyed."""

    model_config = ConfigDict(extra="forbid")

    audit_id: str
    repository: str
    ref: str
    path: str
    all_history: bool
    reason: str
    actor: str
    created_at: datetime
    addresses: list[str] = Field(max_length=MAX_ADDRESSES)
    skipped_external: list[str] = Field(default_factory=list, max_length=MAX_ADDRESSES)
    state: Literal["deleting", "done"] = "deleting"
    deleted: int = 0
    source: str | None = None  # a mirror's copy: the source repository's record it applies

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def parse(cls, raw: bytes, where: str) -> PurgeRecord:
        if len(raw) > MAX_RECORD_BYTES:
            raise CorruptDataError(f"purge record larger than {MAX_RECORD_BYTES} bytes", file=where)
        try:
            return cls.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as e:
            raise CorruptDataError(f"invalid purge record: {type(e).__name__}", file=where) from None


class PurgeReport(BaseModel):
    """What :func:`purge_path` found and (without dry run) did."""

    model_config = ConfigDict(extra="forbid")

    repository: str
    ref: str
    path: str
    all_history: bool
    dry_run: bool
    audit_id: str | None = None
    commits_searched: int = 0
    addresses: list[str] = Field(default_factory=list)
    skipped_external: list[str] = Field(default_factory=list)
    # inside the namespace but not a data object (``_lakefs/...``, odd shapes): a hostile entry;
    # never deleted
    skipped_not_data: list[str] = Field(default_factory=list)
    # objects of ``addresses`` an earlier purge covers -> its audit id (never put in a new record)
    already_purged: dict[str, str] = Field(default_factory=dict)
    # unfinished purges this call completed (a dry run: would complete), oldest audit id first
    completed: list[str] = Field(default_factory=list)
    # objects deleted by the purges this call created or completed (``audit_id``: the last of them)
    deleted: int = 0
    # the dry run's collateral: other refs and paths naming objects of ``addresses``
    shared: list[SharedUse] = Field(default_factory=list)
    shared_truncated: bool = False
    shared_note: str | None = None  # why ``shared`` is partial, when it is


def check_reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise BadInputError("a purge needs a reason", field="reason")
    if len(reason) > MAX_REASON or not reason.isprintable():
        raise BadInputError(f"at most {MAX_REASON} printable characters", field="reason")
    return reason


def check_path(path: str) -> str:
    try:
        size = len(path.encode()) if isinstance(path, str) else 0
    except UnicodeEncodeError:  # a lone surrogate
        size = 0
    if not size or size > MAX_PATH_BYTES or "\0" in path:
        raise BadInputError(f"must be a non-empty UTF-8 path of at most {MAX_PATH_BYTES} bytes", field="path")
    return path


def check_actor(actor: str) -> str:
    if not isinstance(actor, str) or not actor or len(actor) > 256 or not actor.isprintable():
        raise BadInputError("must name who purges (1-256 printable characters)", field="actor")
    return actor


def check_audit_id(audit_id: str) -> str:
    if not isinstance(audit_id, str) or not _AUDIT_ID.fullmatch(audit_id):
        raise BadInputError(f"{audit_id!r} is not a purge audit id", field="audit_id")
    return audit_id


def new_audit_id(now: datetime) -> str:
    return f"purge-{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}"


def is_data_object(relative: str) -> bool:
    """Only objects a purge may delete: under ``data/`` (any depth) or a legacy root object, never
    ``_lakefs/`` (the rule of the GC sweep; a hostile entry or record must not reach metadata)."""
    parts = relative.split("/")
    ok = (parts[0] == DATA_DIR and len(parts) >= 3) or (len(parts) == 1 and parts[0] != TABLES_DIR)
    return ok and not any(p in ("", ".", "..") for p in parts)


def _relative(ns: StorageNamespace, address: str, address_type: int) -> str | None:
    return ns.relative_of(address, address_type)


@dataclass
class _Walk:
    found: set[tuple[str, int]]  # (address, address type)
    commits_searched: int
    resolved_commit: str
    commits: CommitMap | None  # the dry run's: every commit by metarange, for the collateral search


async def _walk(
    ctx: RepoContext, repo: Repository, ref: str, key: bytes, *, all_history: bool, collect: bool
) -> _Walk:
    """``(address, address type)`` of ``key`` at ``ref`` or in every commit and branch; with
    ``collect``, every commit is also enumerated (in the same pass) into a :class:`CommitMap`."""
    from lakefs_core.repos.purge_shared import CommitMap

    found: set[tuple[str, int]] = set()

    async def at(where: str) -> None:
        try:
            record = await get_entry(ctx, repo.id, where, key)
        except NotFoundError:
            return
        entry = decode_entry(record.data)
        full = entry.address_type == catalog_pb2.Entry.AddressType.FULL
        found.add((entry.address, 2 if full else 1))

    resolved = await ctx.resolve(repo, ref)  # an unknown ref is NotFoundError, not an empty purge
    walk = _Walk(found, 0 if all_history else 1, resolved.commit.id, CommitMap() if collect else None)
    if not all_history:
        await at(ref)
        if not collect:
            return walk
    seen_metaranges: set[str] = set()
    async for commit in ctx.refs.list_commits(repo):
        node = commit.node()
        if walk.commits is not None:
            walk.commits.add(node)
        if not all_history:
            continue
        walk.commits_searched += 1
        if node.metarange_id and node.metarange_id not in seen_metaranges:
            seen_metaranges.add(node.metarange_id)
            await at(node.id)
    if all_history:
        async for branch in ctx.refs.list_branches(repo):
            await at(branch.id)  # its staged value, if any
    return walk


def _classify(ns: StorageNamespace, found: set[tuple[str, int]]) -> tuple[set[str], set[str], set[str]]:
    """Relative data addresses, external addresses, and inside-but-not-data relatives."""
    inside: set[str] = set()
    outside: set[str] = set()
    not_data: set[str] = set()
    for address, address_type in found:
        relative = _relative(ns, address, address_type)
        if relative is None:
            outside.add(address)
        else:
            (inside if is_data_object(relative) else not_data).add(relative)
    return inside, outside, not_data


@dataclass(frozen=True)
class _Request:
    repo: Repository
    ref: str
    path: str
    all_history: bool
    reason: str
    actor: str

    def same_target(self, record: PurgeRecord) -> bool:
        """A record of this purge (a mirror's copy never is: it applies another repository's)."""
        target = (record.ref, record.path, record.all_history)
        return record.source is None and target == (self.ref, self.path, self.all_history)


async def purge_path(
    ctx: RepoContext,
    repo_id: str,
    ref: str,
    path: str,
    *,
    all_history: bool,
    reason: str,
    actor: str,
    yes: bool,
) -> PurgeReport:
    """Purge ``path`` (see the module). Dry run unless ``yes``."""
    check_reason(reason)
    check_path(path)
    check_actor(actor)
    req = _Request(await ctx.repository(repo_id), ref, path, all_history, reason, actor)
    ns = StorageNamespace.parse(req.repo.storage_namespace)
    walk = await _walk(ctx, req.repo, ref, path.encode(), all_history=all_history, collect=not yes)
    inside, outside, not_data = _classify(ns, walk.found)
    if len(inside) > MAX_ADDRESSES:
        raise BadInputError(f"more than {MAX_ADDRESSES} objects to purge at once", field="path")
    report = PurgeReport(
        repository=repo_id,
        ref=ref,
        path=path,
        all_history=all_history,
        dry_run=not yes,
        commits_searched=walk.commits_searched,
        addresses=sorted(inside),
        skipped_external=sorted(outside),
        skipped_not_data=sorted(not_data),
    )
    if not inside:
        return report
    unfinished = await _unfinished(ctx, req, inside)
    already = await purged_addresses(ctx, req.repo, inside)
    for r in unfinished:
        already.update((a, r.audit_id) for a in r.addresses if a in inside and a not in already)
    report.already_purged = dict(sorted(already.items()))
    report.completed = [r.audit_id for r in unfinished]
    fresh = sorted(inside - set(already))
    if not yes:
        report.shared, report.shared_note = await _collateral(ctx, req, walk, inside)
        report.shared_truncated = report.shared_note is not None
        return report
    record = _new_record(ctx, req, fresh, report.skipped_external) if fresh else None
    done = [await record_purge(ctx, req.repo, r) for r in unfinished]  # the crashed purges, finished first
    if record is not None:
        done.append(await record_purge(ctx, req.repo, record))
    if done:
        report.audit_id, report.deleted = done[-1].audit_id, sum(r.deleted for r in done)
    return report


def _new_record(
    ctx: RepoContext, req: _Request, addresses: list[str], skipped_external: list[str]
) -> PurgeRecord:
    now = ctx.clock()
    record = PurgeRecord(
        audit_id=new_audit_id(now),
        repository=req.repo.id,
        ref=req.ref,
        path=req.path,
        all_history=req.all_history,
        reason=req.reason,
        actor=req.actor,
        created_at=now,
        addresses=addresses,
        skipped_external=skipped_external,
    )
    if len(record.to_bytes()) > MAX_STORED_RECORD_BYTES:
        raise BadInputError(
            f"{len(addresses)} objects make an audit record over {MAX_STORED_RECORD_BYTES} bytes;"
            " purge at fewer refs (one commit id at a time)",
            field="path",
        )
    return record


async def _collateral(
    ctx: RepoContext, req: _Request, walk: _Walk, inside: set[str]
) -> tuple[list[SharedUse], str | None]:
    from lakefs_core.repos.purge_shared import CommitMap, Target, find_shared

    target = Target(req.path.encode(), req.all_history, walk.resolved_commit, req.ref)
    return await find_shared(ctx, req.repo, inside, walk.commits or CommitMap(), target)


async def _unfinished(ctx: RepoContext, req: _Request, inside: set[str]) -> list[PurgeRecord]:
    """Records still ``deleting`` that a re-run of this purge completes: the same target's (found
    among the records, so a crash before the markers counts too), and the ones whose markers name
    some of ``inside`` (a crashed purge of another target covering these objects)."""
    repo = req.repo
    found: dict[str, PurgeRecord] = {}
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, kvkeys.PURGES_PREFIX)) as items:  # type: ignore[type-var]
        async for item in items:
            if not item.key.startswith(kvkeys.PURGES_PREFIX):
                break
            if b'"deleting"' not in item.value:
                continue  # a settled record (cheap filter: a record's JSON names its state)
            record = PurgeRecord.parse(item.value, f"{item.key.decode(errors='replace')} of {repo.id}")
            if record.state == "deleting" and req.same_target(record):
                found[record.audit_id] = record
    for audit_id in sorted(set((await purged_addresses(ctx, repo, inside)).values()) - set(found)):
        try:
            record = await purge_record(ctx, repo.id, audit_id)
        except (NotFoundError, BadInputError):
            continue  # a marker without its record (a mirror's copy from elsewhere): nothing to finish
        if record.state == "deleting":
            found[audit_id] = record
    return [found[a] for a in sorted(found)]


async def record_purge(ctx: RepoContext, repo: Repository, record: PurgeRecord) -> PurgeRecord:
    """Record, mark, delete, settle (see the module). Idempotent: a re-run of a record already
    stored continues the STORED record (whatever ``record`` says). Works on read-only (mirror)
    repositories too. Fault points (``LAKEFS_CORE_FAULT``): ``purge:recorded`` after the record,
    ``purge:delete:<n>`` before the n-th delete."""
    check_audit_id(record.audit_id)
    key = kvkeys.purge_key(record.audit_id)
    unfinished = kvkeys.purging_key(record.audit_id)
    await announce(ctx, repo)  # every reader looks markers up before the first is written
    await ctx.kv.set(repo.partition, unfinished, record.created_at.isoformat().encode())
    raw = record.to_bytes()
    try:
        await ctx.kv.set_if(repo.partition, key, raw, Expect.ABSENT)
    except PreconditionFailedError:
        record, raw = await _stored(ctx, repo, record.audit_id)
        if record.state == "done":
            await ctx.kv.delete(repo.partition, unfinished)
            return record
    fault_point("purge:recorded")
    marker = record.audit_id.encode()
    # Defence in depth (a mirror applies its source's records): only data objects are ever touched.
    addresses = [a for a in record.addresses if is_data_object(a)]
    await ctx.kv.set_many([(repo.partition, kvkeys.purged_key(a), marker) for a in addresses])
    # Reads already answer purged; the deletes wait for a namespace that still leads where recorded
    # and overlaps no other repository's (GC's check: a refused purge stays unfinished, a re-run or
    # the GC daemon completes it once the namespace is sound again).
    ns = await check_for_gc(ctx, repo.id)
    store = await ctx.namespace_store(ns)
    deleted = 0
    for n, address in enumerate(addresses, 1):
        fault_point("purge:delete", n)
        # already gone: a re-run, another process completing the same record, or a mirror that
        # never received it
        with contextlib.suppress(NotFoundError):
            await store.delete(ns.key(address))
        deleted += 1
    settled = await _settle(ctx, repo, record, raw, deleted)
    await ctx.kv.delete(repo.partition, unfinished)
    return settled


async def _stored(ctx: RepoContext, repo: Repository, audit_id: str) -> tuple[PurgeRecord, bytes]:
    raw = await ctx.kv.get(repo.partition, kvkeys.purge_key(audit_id))
    return PurgeRecord.parse(raw, f"purges/{audit_id} of {repo.id}"), raw


async def _settle(
    ctx: RepoContext, repo: Repository, record: PurgeRecord, raw: bytes, deleted: int
) -> PurgeRecord:
    """``done`` by compare-and-swap from the stored bytes: when another process completing the same
    record settled it first, its settled record is the answer."""
    key = kvkeys.purge_key(record.audit_id)
    for _ in range(_SETTLE_ATTEMPTS):
        settled = record.model_copy(update={"state": "done", "deleted": deleted})
        try:
            await ctx.kv.set_if(repo.partition, key, settled.to_bytes(), Expect.equals(raw))
            return settled
        except PreconditionFailedError:
            record, raw = await _stored(ctx, repo, record.audit_id)
            if record.state == "done":
                return record
    raise ConflictError(f"purge record {record.audit_id} kept changing while being settled")


async def complete_stuck_purges(
    ctx: RepoContext, repo: Repository, *, older_than: datetime, limit: int
) -> list[PurgeRecord]:
    """Complete up to ``limit`` purges of ``repo`` left unfinished since before ``older_than`` (their
    process died; the GC daemon calls this each pass). Entries of ``purging/`` whose record is
    settled, or was never written (a crash before it: nothing was marked or deleted), are dropped."""
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, kvkeys.PURGING_PREFIX)) as items:  # type: ignore[type-var]
        pending: list[KVEntry] = []
        async for item in items:
            if not item.key.startswith(kvkeys.PURGING_PREFIX) or len(pending) >= _OPEN_SCAN:
                break
            pending.append(item)
    done: list[PurgeRecord] = []
    for item in pending:
        audit_id = item.key[len(kvkeys.PURGING_PREFIX) :].decode("utf-8", "replace")
        try:
            record, _ = await _stored(ctx, repo, check_audit_id(audit_id))
        except BadInputError:
            continue  # not a name purge writes: left alone
        except NotFoundError:
            if _started(item.value) < older_than:
                await ctx.kv.delete(repo.partition, item.key)
            continue
        if record.state == "done":
            await ctx.kv.delete(repo.partition, item.key)
        elif record.created_at < older_than and len(done) < limit:
            done.append(await record_purge(ctx, repo, record))
    return done


def _started(raw: bytes) -> datetime:
    """When a ``purging/`` entry's purge started (unreadable: long ago, so it is cleaned up)."""
    try:
        when = datetime.fromisoformat(raw[:64].decode())
    except (UnicodeDecodeError, ValueError):
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def purge_record(ctx: RepoContext, repo_id: str, audit_id: str) -> PurgeRecord:
    repo = await ctx.repository(repo_id)
    check_audit_id(audit_id)
    try:
        raw = await ctx.kv.get(repo.partition, kvkeys.purge_key(audit_id))
    except NotFoundError:
        raise NotFoundError(f"no purge {audit_id!r} in repository {repo_id!r}") from None
    return PurgeRecord.parse(raw, f"purges/{audit_id} of {repo_id}")


async def list_purges(ctx: RepoContext, repo_id: str) -> list[PurgeRecord]:
    repo = await ctx.repository(repo_id)
    out = []
    async for item in ctx.kv.scan(repo.partition, kvkeys.PURGES_PREFIX):
        if not item.key.startswith(kvkeys.PURGES_PREFIX):
            break
        out.append(PurgeRecord.parse(item.value, f"{item.key.decode(errors='replace')} of {repo_id}"))
    return out


async def purged_addresses(ctx: RepoContext, repo: Repository, addresses: Iterable[str]) -> dict[str, str]:
    """Relative address -> audit id, for those of ``addresses`` that a purge destroyed.

    A mirror asks this for every object it found missing (tens of thousands in a big commit): the
    common case (no purge ever) costs one KV read, and a long list is merged with one paged scan of
    the markers (:func:`~lakefs_core.repos.purge_markers.lookup_markers`)."""
    return await lookup_markers(ctx, repo, addresses)


__all__ = [
    "PurgeRecord",
    "PurgeReport",
    "complete_stuck_purges",
    "list_purges",
    "purge_path",
    "purge_record",
    "purged_addresses",
    "record_purge",
]

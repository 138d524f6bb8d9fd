"""Audited purge: destroy the physical objects a path had, keep history and commit ids unchanged.

The compliance case (issue 11): a file must be gone from storage, everywhere, now, and the history
must not be rewritten. :func:`purge_path` finds the addresses ``path`` had

- at one ``ref`` (a branch's staged value included), or
- with ``all_history``, in every commit of the repository (reachable or not) and in the current value
  of every branch (staging included),

and, only when ``yes`` is given (dry run otherwise):

1. writes the audit record ``purges/<audit id>`` (create-only: who, when, why, which addresses);
2. writes a marker ``purged/<address>`` -> audit id per address (so a read that finds the object
   missing answers :class:`~lakefs_core.errors.PurgedError`, HTTP 410, naming the record, instead of
   a plain "missing");
3. deletes the objects (a missing one counts as deleted: a re-run after a crash completes the purge);
4. marks the record done.

Records and markers are written before anything is deleted, so a crash leaves a purge that a re-run
finishes and readers already see as purged. External addresses (outside the repository's namespace)
are never deleted: they are listed as skipped. Entries keep pointing at the purged addresses; commit
ids, metaranges and ranges are unchanged. Mirrors copy the records and markers into their own
repositories and delete their copies (:func:`record_purge` is what they call).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError, PreconditionFailedError
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import decode_entry
from lakefs_core.keys import DATA_DIR, TABLES_DIR
from lakefs_core.kv.base import Expect
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Repository
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.reading import get_entry

MAX_REASON = 1024
MAX_ADDRESSES = 100_000  # one purge record stays a bounded KV value
MAX_RECORD_BYTES = 64 << 20
# What one record may take when written: under DynamoDB's 400 KB item limit, so every KV driver
# behaves alike (a bigger purge is refused before anything is written; purge commit by commit).
MAX_STORED_RECORD_BYTES = 350_000
MAX_PATH_BYTES = 1024
_AUDIT_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")


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
    deleted: int = 0


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


async def _addresses(
    ctx: RepoContext, repo: Repository, ref: str, key: bytes, *, all_history: bool
) -> tuple[set[tuple[str, int]], int]:
    """``(address, address type)`` of ``key`` at ``ref`` or in every commit and branch."""
    found: set[tuple[str, int]] = set()

    async def at(where: str) -> None:
        try:
            record = await get_entry(ctx, repo.id, where, key)
        except NotFoundError:
            return
        entry = decode_entry(record.data)
        full = entry.address_type == catalog_pb2.Entry.AddressType.FULL
        found.add((entry.address, 2 if full else 1))

    await ctx.resolve(repo, ref)  # an unknown ref is NotFoundError, not an empty purge
    if not all_history:
        await at(ref)
        return found, 1
    commits = 0
    seen_metaranges: set[str] = set()
    async for commit in ctx.refs.list_commits(repo):
        node = commit.node()
        commits += 1
        if node.metarange_id and node.metarange_id not in seen_metaranges:
            seen_metaranges.add(node.metarange_id)
            await at(node.id)
    async for branch in ctx.refs.list_branches(repo):
        await at(branch.id)  # its staged value, if any
    return found, commits


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
    repo = await ctx.repository(repo_id)
    ns = StorageNamespace.parse(repo.storage_namespace)
    found, commits = await _addresses(ctx, repo, ref, path.encode(), all_history=all_history)
    inside: set[str] = set()
    outside: set[str] = set()
    not_data: set[str] = set()
    for address, address_type in found:
        relative = _relative(ns, address, address_type)
        if relative is None:
            outside.add(address)
        else:
            (inside if is_data_object(relative) else not_data).add(relative)
    if len(inside) > MAX_ADDRESSES:
        raise BadInputError(f"more than {MAX_ADDRESSES} objects to purge at once", field="path")
    report = PurgeReport(
        repository=repo_id,
        ref=ref,
        path=path,
        all_history=all_history,
        dry_run=not yes,
        commits_searched=commits,
        addresses=sorted(inside),
        skipped_external=sorted(outside),
        skipped_not_data=sorted(not_data),
    )
    if not yes or not inside:
        return report
    now = ctx.clock()
    record = PurgeRecord(
        audit_id=new_audit_id(now),
        repository=repo_id,
        ref=ref,
        path=path,
        all_history=all_history,
        reason=reason,
        actor=actor,
        created_at=now,
        addresses=report.addresses,
        skipped_external=report.skipped_external,
    )
    if len(record.to_bytes()) > MAX_STORED_RECORD_BYTES:
        raise BadInputError(
            f"{len(inside)} objects make an audit record over {MAX_STORED_RECORD_BYTES} bytes;"
            " purge at fewer refs (one commit id at a time)",
            field="path",
        )
    done = await record_purge(ctx, repo, record)
    report.audit_id, report.deleted = done.audit_id, done.deleted
    return report


async def record_purge(ctx: RepoContext, repo: Repository, record: PurgeRecord) -> PurgeRecord:
    """Record, mark, delete, settle (see the module). Idempotent: a re-run of a record already
    stored continues it. Works on read-only (mirror) repositories too."""
    check_audit_id(record.audit_id)
    key = kvkeys.purge_key(record.audit_id)
    try:
        await ctx.kv.set_if(repo.partition, key, record.to_bytes(), Expect.ABSENT)
    except PreconditionFailedError:
        record = await purge_record(ctx, repo.id, record.audit_id)
        if record.state == "done":
            return record
    marker = record.audit_id.encode()
    # Defence in depth (a mirror applies its source's records): only data objects are ever touched.
    addresses = [a for a in record.addresses if is_data_object(a)]
    await ctx.kv.set_many([(repo.partition, kvkeys.purged_key(a), marker) for a in addresses])
    ns = StorageNamespace.parse(repo.storage_namespace)
    store = await ctx.namespace_store(ns)
    deleted = 0
    for address in addresses:
        # already gone: a re-run, or a mirror that never received it
        with contextlib.suppress(NotFoundError):
            await store.delete(ns.key(address))
        deleted += 1
    settled = record.model_copy(update={"state": "done", "deleted": deleted})
    await ctx.kv.set(repo.partition, key, settled.to_bytes())
    return settled


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


_POINT_READS = 64  # up to this many addresses are looked up one by one; more are merged with a scan
_YIELD_EVERY = 512


async def purged_addresses(ctx: RepoContext, repo: Repository, addresses: Iterable[str]) -> dict[str, str]:
    """Relative address -> audit id, for those of ``addresses`` that a purge destroyed.

    A mirror asks this for every object it found missing (tens of thousands in a big commit), so the
    common case (no purge ever) costs one KV read, and a long list is merged with one paged scan of
    the markers between its first and last key instead of a read per address."""
    if not await _any_marker(ctx, repo):
        return {}
    wanted: dict[bytes, str] = {}
    for n, address in enumerate(addresses, 1):
        if n % _YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a daemon's loop keeps answering while a long list is keyed
        try:
            wanted[kvkeys.purged_key(address)] = address
        except BadInputError:
            continue  # not a name a marker can have: never purged
    if not wanted:
        return {}
    out: dict[str, str] = {}
    if len(wanted) <= _POINT_READS:
        for key, address in wanted.items():
            try:
                out[address] = (await ctx.kv.get(repo.partition, key)).decode("utf-8", "replace")
            except NotFoundError:
                continue
        return out
    last = max(wanted)
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, min(wanted))) as markers:  # type: ignore[type-var]
        async for item in markers:
            if item.key > last:
                break
            hit = wanted.get(item.key)
            if hit is not None:
                out[hit] = item.value.decode("utf-8", "replace")
    return out


async def _any_marker(ctx: RepoContext, repo: Repository) -> bool:
    async with contextlib.aclosing(ctx.kv.scan(repo.partition, kvkeys.PURGED_PREFIX, page_size=1)) as items:  # type: ignore[type-var]
        async for item in items:
            return item.key.startswith(kvkeys.PURGED_PREFIX)
    return False


async def raise_if_purged(
    ctx: RepoContext, repo: Repository, address: str, address_type: int, path: str
) -> None:
    """Called when an object's data is missing: :class:`PurgedError` when a purge destroyed it."""
    from lakefs_core.errors import PurgedError

    try:
        relative = _relative(StorageNamespace.parse(repo.storage_namespace), address, address_type)
    except BadInputError:
        return
    if relative is None:
        return
    found = await purged_addresses(ctx, repo, [relative])
    if relative in found:
        audit = found[relative]
        raise PurgedError(f"{path!r} was purged (audit record {audit})", audit_id=audit)


__all__ = [
    "PurgeRecord",
    "PurgeReport",
    "list_purges",
    "purge_path",
    "purge_record",
    "purged_addresses",
    "raise_if_purged",
    "record_purge",
]

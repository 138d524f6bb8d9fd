"""The hard-delete journal (GC spec §3c) and the uncommitted-address seam of retention GC (§3a step 3).

Why it can work: an address here is always fresh and create-only (:meth:`Objects.upload` allocates a
new ``data/<slice>/<id>`` and PUTs it with ``If-None-Match``; a multipart upload's completion,
:meth:`Objects.upload_written`, completes the store's upload of an address reserved when the
upload was created, create-only too), and no API copies or links an address into a second entry.
So an uploaded address can only reach a commit through the staging token it was staged in, and its
fate is decided by two point lookups instead of reference counts.

Records (key formats in :mod:`lakefs_core.refs.kvkeys`, all in the repository's partition; values are
small JSON objects, parsed as hostile: bounded size, checked schema, :class:`CorruptDataError` naming
the record):

- ``gc-settings`` = ``{"hard_delete_journal": bool, "since": unix s}``. Absent: off (repositories
  created by lakeFS or before the journal existed). ``since`` is when it was last turned on.
- ``gc-intents/<address>`` = ``{"branch", "key", "t", "state": "pending"|"stored"|"deleting",
  "t_stored"?, "next"?, "checks"?, "batch"?}``: written create-only before the upload's PUT
  (``pending``). The upload settles it to ``stored`` by compare-and-swap IN the conditional KV batch
  that stages its entry (:class:`~lakefs_core.repos.staging_writes.Settle`,
  :meth:`Journal.settle_single`): the entry is staged if and only if the intent was still the
  ``pending`` bytes the upload wrote. The reconciler CASes it to ``deleting`` before deleting the
  address (:meth:`Journal.claim`). Of the two CASes on one intent exactly one wins: an upload that
  lost stages nothing and fails (:class:`~lakefs_core.errors.ConflictError`); a reconciler that
  lost leaves the object.
- ``gc-settled/<batch>``: a batch upload's settle record. A batch upload writes the intents of the
  whole batch, each naming the batch (32 hex digits), and this record ``{"state": "open", "t"}``
  in one KV batch before its PUTs; the conditional batch that stages its entries CASes it from those
  open bytes to ``{"t_stored": unix s}`` (:meth:`Journal.settle_batch`). A ``pending`` intent
  whose batch record is settled reads as ``stored`` at its ``t_stored``
  (:meth:`Journal.effective`). The reconciler claims a still-pending intent of a batch by first
  DELETING the batch's record (:meth:`Journal.claim`): the upload's settle, conditional on the
  open bytes, can never succeed after that, so the decision the reconciler makes next (its
  re-check right before the delete) is final; if the upload settled just before, its entries are
  staged and that re-check keeps them. The reconciler prunes records (open or settled) older than
  the longer of its pending timeout and grace (:meth:`Journal.prune_settled`): a settled one then
  decides nothing any more, an open one fences an upload that outlived the pending timeout.
- ``gc-consumed/<branch>/<token>/<commit>`` = ``{"t": unix s}``: written by every commit attempt before
  its branch CAS, for each token it owns (for a no-op attempt, ``<commit>`` is the unchanged head).

:meth:`Journal.decide` answers, for a due intent, with point lookups only:

- ``wait``: not due yet (``t_stored`` + grace for a stored intent, ``t`` + the upload timeout for a
  pending one whose PUT may still be in flight);
- ``staged``: the address is the value of its key in the live or a sealed token of its branch;
- ``committed``: a commit that consumed one of the branch's tokens since ``t`` (less a clock-skew
  margin) holds the key with that address, or the journal cannot prove anything (turned off, or turned
  on after the intent: commits of that window wrote no consumed records): retention GC's business;
- ``delete``: neither: the address is garbage (overwritten or deleted before a commit, reset away,
  left on a deleted branch, or never staged after a crash).

The deletion itself is the GC daemon's (its rate-limited deleter). Time decides only WHEN an intent
is looked at, never what happens to an upload in flight: an upload whose staging write comes after
its intent was claimed (it took longer than the pending timeout, default 24 h, at least
:data:`MIN_PENDING_TIMEOUT_SECONDS`) fails cleanly with nothing staged, however long it stalled.
The grace (default 1 h) only keeps overwritten or deleted data readable a while. Retention GC's mark
never takes the address of an intent that is still in the journal (:meth:`Journal.intent_addresses`),
whatever its ``min_age``. When another writer that keeps no journal (lakeFS itself) commits in the
same repository, the journal must stay off: its commits record nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.format.records import ValueRecord, decode_entry
from lakefs_core.kv.base import Expect
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Commit, Repository
from lakefs_core.refs.store import DeletedRepository, parse_json_record, where_of
from lakefs_core.repos.context import HasContext, RepoContext
from lakefs_core.repos.staging_writes import Settle

Decision = Literal["delete", "committed", "staged", "wait"]
IntentState = Literal["pending", "stored", "deleting"]
_STATES: frozenset[str] = frozenset(("pending", "stored", "deleting"))

DEFAULT_GRACE_SECONDS = 3600.0
DEFAULT_PENDING_TIMEOUT_SECONDS = 86400.0
DEFAULT_CLOCK_SKEW_SECONDS = 300.0
# The shortest pending timeout a reconciler may use: uploads settle by compare-and-swap, so a shorter
# one deletes nothing staged, but it fails every upload slower than it (a PUT of a few GB), and the
# clock-skew margin must be small beside it (an uploader's clock behind by the margin loses that much).
MIN_PENDING_TIMEOUT_SECONDS = 3600.0
MAX_INTENT_BYTES = 8192  # an object key is at most a few KiB; anything bigger is hostile
# consumed_since runs once per decision and a branch has few consumption records since an intent: a
# small page keeps each scan from reading a full page of the (sorted-after) intents.
CONSUMED_PAGE = 32
COMMIT_CACHE = 4096  # commit records (immutable) a Journal keeps for its decisions
SETTLED_CACHE = 4096  # batches whose settle record a Journal remembers
MAX_SETTLED_BYTES = 256
_BATCH_ID = re.compile(r"[0-9a-f]{32}")


def new_batch_id() -> str:
    """A fresh batch id for :meth:`Journal.record_intents` (random: batches never share one)."""
    return secrets.token_hex(16)


def _number(doc: dict[str, object], name: str, where: str, *, optional: bool = False) -> float | None:
    value = doc.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CorruptDataError(f"field {name!r} must be a number", file=where)
    return float(value)


@dataclass(frozen=True)
class GCSettings:
    """A repository's GC settings; absent means the journal is off."""

    hard_delete_journal: bool = False
    since: float = 0.0

    def to_bytes(self) -> bytes:
        doc = {"hard_delete_journal": self.hard_delete_journal, "since": self.since}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> GCSettings:
        doc = parse_json_record(raw, where, "GC settings")
        on = doc.get("hard_delete_journal", False)
        if not isinstance(on, bool):
            raise CorruptDataError("field 'hard_delete_journal' must be a boolean", file=where)
        return cls(on, _number(doc, "since", where, optional=True) or 0.0)


# One encoder for every intent: json.dumps with sort_keys builds a new encoder per call. The bytes are
# identical to json.dumps(doc, sort_keys=True).
_ENCODE = json.JSONEncoder(sort_keys=True).encode
# What that encoder writes for a string (ensure_ascii): the C function it calls itself.
_ENCODE_STR = json.encoder.encode_basestring_ascii


def batch_bytes(intents: Sequence[Intent]) -> list[bytes]:
    """``intent.to_bytes()`` of each intent, byte for byte: what a batch upload writes per object.

    The intents of a batch share their batch, branch, state and time, so the JSON around the key is
    built once per distinct ``(batch, branch, state, t, t_stored)`` (sorted keys: ``batch``,
    ``branch``, ``key``, ``state``, ``t``, ``t_stored``) and each intent costs one string escape; a
    per-intent ``JSONEncoder`` call cost several times more. An intent with ``next`` or ``checks``
    (never one of a batch), or times that are not finite floats, takes :meth:`Intent.to_bytes`."""
    shells: dict[tuple[object, ...], tuple[str, str]] = {}
    out: list[bytes] = []
    for intent in intents:
        t, ts = intent.t, intent.t_stored
        if (
            intent.next_check is not None
            or intent.checks
            or type(t) is not float
            or not math.isfinite(t)
            or (ts is not None and (type(ts) is not float or not math.isfinite(ts)))
        ):
            out.append(intent.to_bytes())
            continue
        # copysign: -0.0 == 0.0 as a key, but the two are written differently
        shell_key = (
            intent.batch,
            intent.branch,
            intent.state,
            t,
            math.copysign(1.0, t),
            ts,
            None if ts is None else math.copysign(1.0, ts),
        )
        shell = shells.get(shell_key)
        if shell is None:
            batch = "" if intent.batch is None else f'"batch": {_ENCODE_STR(intent.batch)}, '
            stored = "" if ts is None else f', "t_stored": {float.__repr__(ts)}'
            shell = shells[shell_key] = (
                f'{{{batch}"branch": {_ENCODE_STR(intent.branch)}, "key": ',
                f', "state": {_ENCODE_STR(intent.state)}, "t": {float.__repr__(t)}{stored}}}',
            )
        out.append(
            (shell[0] + _ENCODE_STR(intent.key.decode("utf-8", "surrogateescape")) + shell[1]).encode()
        )
    return out


@dataclass(frozen=True)
class Intent:
    """One upload's journal record; ``raw`` is its stored bytes (the CAS predicate)."""

    address: str
    branch: str
    key: bytes
    t: float
    state: IntentState = "pending"
    t_stored: float | None = None
    next_check: float | None = None
    checks: int = 0
    batch: str | None = None  # the batch upload that recorded it (see gc-settled/ above)
    raw: bytes = field(default=b"", compare=False)

    def due_at(self, grace: float, pending_timeout: float) -> float:
        """When the reconciler may decide it (a claimed intent is due: it was when claimed)."""
        if self.state == "deleting":
            return self.t
        if self.state == "stored" and self.t_stored is not None:
            return self.t_stored + grace
        return self.t + pending_timeout

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {
            "branch": self.branch,
            "key": self.key.decode("utf-8", "surrogateescape"),
            "t": self.t,
            "state": self.state,
        }
        if self.t_stored is not None:
            doc["t_stored"] = self.t_stored
        if self.next_check is not None:
            doc["next"] = self.next_check
        if self.checks:
            doc["checks"] = self.checks
        if self.batch is not None:
            doc["batch"] = self.batch
        return _ENCODE(doc).encode()

    def with_raw(self, raw: bytes) -> Intent:
        """This intent with its stored bytes."""
        return self._copy(self.state, self.t_stored, raw)

    def _copy(self, state: IntentState, t_stored: float | None, raw: bytes) -> Intent:
        # Not dataclasses.replace: it costs several times more, and batches make one per object.
        return Intent(
            self.address,
            self.branch,
            self.key,
            self.t,
            state,
            t_stored,
            self.next_check,
            self.checks,
            self.batch,
            raw,
        )

    @classmethod
    def parse(cls, address: str, raw: bytes, where: str) -> Intent:
        doc = parse_json_record(raw, where, "a journal intent", MAX_INTENT_BYTES)
        branch, key, state, checks = doc.get("branch"), doc.get("key"), doc.get("state"), doc.get("checks", 0)
        if not isinstance(branch, str) or not branch or "/" in branch:
            raise CorruptDataError("field 'branch' must be a branch name", file=where)
        if not isinstance(key, str) or not key:
            raise CorruptDataError("field 'key' must be a non-empty string", file=where)
        if state not in _STATES:
            raise CorruptDataError(f"field 'state' must be one of {sorted(_STATES)}", file=where)
        if isinstance(checks, bool) or not isinstance(checks, int) or checks < 0:
            raise CorruptDataError("field 'checks' must be a non-negative integer", file=where)
        batch = doc.get("batch")
        if batch is not None and not (isinstance(batch, str) and _BATCH_ID.fullmatch(batch)):
            raise CorruptDataError("field 'batch' must be 32 lowercase hex digits", file=where)
        t = _number(doc, "t", where)
        t_stored = _number(doc, "t_stored", where, optional=True)
        if state == "stored" and t_stored is None:
            raise CorruptDataError("a stored intent needs 't_stored'", file=where)
        try:
            key_bytes = key.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise CorruptDataError("field 'key' is not an object key", file=where) from e
        return cls(
            address,
            branch,
            key_bytes,
            t or 0.0,
            state,  # type: ignore[arg-type]  # checked against _STATES above
            t_stored,
            _number(doc, "next", where, optional=True),
            checks,
            batch,
            raw,
        )


@dataclass(frozen=True)
class Consumed:
    """A commit attempt that consumed ``token`` of ``branch`` (``commit_id`` may never be published)."""

    branch: str
    token: str
    commit_id: str
    t: float


async def read_settings(repos: HasContext, repo: Repository) -> GCSettings:
    key = kvkeys.gc_settings_key()
    try:
        raw = await repos.context.kv.get(repo.partition, key)
    except NotFoundError:
        return GCSettings()
    return GCSettings.from_bytes(raw, where_of(repo.partition, key))


async def journal_enabled(ctx: RepoContext, repo: Repository, *, cached: bool = True) -> bool:
    """Whether the repository keeps the journal; ``cached`` answers may be ``write_cache_seconds``
    old (uploads); commits read it fresh, so a commit never skips its consumption record."""
    now = time.monotonic()
    hit = ctx.journal_flags.get(repo, now, ctx.settings.write_cache_seconds)
    if cached and hit is not None:
        return hit
    on = (await read_settings(ctx, repo)).hard_delete_journal
    ctx.journal_flags.keep(repo, on, now)
    return on


class Journal:
    """The journal of one repository instance, for the writers (upload, commit) and the reconciler."""

    def __init__(self, repos: HasContext, repo: Repository) -> None:
        self.ctx = repos.context
        self.repo = repo
        self.partition = repo.partition
        self._commits: dict[str, Commit] = {}  # immutable records: a cache is never stale
        # batch -> its settle record's t_stored (written once, never changed: a hit is never stale)
        self._settled: dict[str, float] = {}
        # batch -> the deletion of its record by a claim of one of its intents (shared by concurrent
        # claims of the batch: a record is only ever created before its intents exist, so once
        # deleted it never comes back, and one delete per batch fences its upload)
        self._fences: dict[str, asyncio.Future[None]] = {}

    def now(self) -> datetime:
        """The repositories' clock (the one that stamps intents and consumption records)."""
        return self.ctx.clock()

    async def settings(self) -> GCSettings:
        return await read_settings(self.ctx, self.repo)

    # -- writers --------------------------------------------------------------------------------------

    async def record_intent(self, address: str, branch: str, key: bytes, now: datetime) -> Intent:
        """Before the PUT: create-only, so an address is journalled once (it is fresh)."""
        intent = Intent(address, branch, key, now.timestamp())
        raw = intent.to_bytes()
        try:
            await self.ctx.kv.set_if(self.partition, kvkeys.gc_intent_key(address), raw, Expect.ABSENT)
        except PreconditionFailedError as e:
            raise CorruptDataError(
                f"address {address} is already journalled: addresses must be fresh",
                file=where_of(self.partition, kvkeys.gc_intent_key(address)),
            ) from e
        return replace(intent, raw=raw)

    async def mark_stored(self, intent: Intent, now: datetime) -> Intent:
        """CAS pending -> stored on its own, staging nothing (tools and tests). An upload never
        calls this: a separate staging write after it could land after the reconciler decided the
        unstaged address was garbage. Uploads settle WITH their staging write (:meth:`settle_single`)."""
        stored = replace(intent, state="stored", t_stored=now.timestamp())
        raw = stored.to_bytes()
        await self.ctx.kv.set_if(
            self.partition, kvkeys.gc_intent_key(intent.address), raw, Expect.equals(intent.raw)
        )
        return replace(stored, raw=raw)

    def settle_single(self, intent: Intent, now: datetime, what: str) -> Settle:
        """The compare-and-swap that settles a single upload's intent (pending -> stored at ``now``)
        in the conditional KV batch that stages its entry (``what`` names the upload)."""
        stored = intent._copy("stored", now.timestamp(), b"")
        key = kvkeys.gc_intent_key(intent.address)
        return Settle(self.partition, key, intent.raw, stored.to_bytes(), what)

    # -- batch writers (Objects.upload_many) ------------------------------------------------------------

    async def record_intents(self, intents: list[Intent]) -> list[Intent]:
        """Before a batch's PUTs: every intent (``pending``, all naming one batch from
        :func:`new_batch_id`) and the batch's open record, in ONE KV batch.

        A blind upsert, unlike :meth:`record_intent`'s create-only write: the addresses were just
        allocated (a fresh random object id each) and their PUTs are create-only, so no other intent
        can exist under them; the batch id is as fresh. The reconciler learns of the batch from
        these intents only, so it cannot delete the open record before it is written."""
        if not intents:
            return []
        batch = _batch_of(intents)
        if any(i.state != "pending" for i in intents):
            raise BadInputError("a batch's intents must be pending", field="intents")
        recorded = [intent.with_raw(raw) for intent, raw in zip(intents, batch_bytes(intents), strict=True)]
        items = [(self.partition, kvkeys.gc_intent_key(i.address), i.raw) for i in recorded]
        items.append((self.partition, kvkeys.gc_settled_key(batch), _open_bytes(intents)))
        await self.ctx.kv.set_many(items)
        return recorded

    def settle_batch(self, intents: Sequence[Intent], now: datetime, what: str) -> Settle:
        """The compare-and-swap that settles a batch (its open record -> ``{"t_stored": now}``) in
        the conditional KV batch that stages its entries (``what`` names the upload)."""
        key = kvkeys.gc_settled_key(_batch_of(intents))
        settled = _ENCODE({"t_stored": now.timestamp()}).encode()
        return Settle(self.partition, key, _open_bytes(intents), settled, what)

    async def settle_batches(self, batches: Sequence[tuple[str, float]], now: datetime) -> None:
        """Settle batches whose entries a commit publishes WITHOUT staging them (a distributed
        writer's tasks recorded the intents, :mod:`.entry_commits` commits them): each batch's open
        record ``{"state": "open", "t": <its earliest intent time>}`` is CASed to settled. Call it
        after the consumption record that names the commit and before the branch CAS. A batch
        already settled is left as it is (a retried commit); a batch whose record is gone was fenced
        by the reconciler, which may be deleting its objects: :class:`ConflictError`."""
        settled = _ENCODE({"t_stored": now.timestamp()}).encode()
        for batch, t in batches:
            if not isinstance(batch, str) or not _BATCH_ID.fullmatch(batch):
                raise BadInputError("must be 32 lowercase hex digits", field="batch")
            key = kvkeys.gc_settled_key(batch)
            opened = _ENCODE({"state": "open", "t": t}).encode()
            try:
                await self.ctx.kv.set_if(self.partition, key, settled, Expect.equals(opened))
            except PreconditionFailedError as e:
                try:
                    raw = await self.ctx.kv.get(self.partition, key)
                except NotFoundError:
                    raise ConflictError(
                        f"the objects of write batch {batch} were claimed by the hard-delete reconciler "
                        "(the job outlived its pending timeout): run the job again"
                    ) from e
                if not _batch_record(raw, where_of(self.partition, key))[0]:
                    raise ConflictError(f"write batch {batch} is open with another time") from e

    async def record_consumed(
        self, branch: str, tokens: tuple[str, ...], commit_id: str, now: datetime
    ) -> None:
        """Before a commit attempt's branch CAS: it consumes ``tokens`` into ``commit_id``."""
        value = json.dumps({"t": now.timestamp()}).encode()
        for token in tokens:
            await self.ctx.kv.set(self.partition, kvkeys.gc_consumed_key(branch, token, commit_id), value)

    # -- the reconciler's reads and moves -------------------------------------------------------------

    async def intent(self, address: str) -> Intent | None:
        key = kvkeys.gc_intent_key(address)
        try:
            raw = await self.ctx.kv.get(self.partition, key)
        except NotFoundError:
            return None
        return Intent.parse(address, raw, where_of(self.partition, key))

    async def intents(self) -> AsyncIterator[Intent]:
        prefix = kvkeys.GC_INTENTS_PREFIX
        async for entry in self.ctx.kv.scan(self.partition, prefix):
            if not entry.key.startswith(prefix):
                break
            where = where_of(self.partition, entry.key)
            try:
                address = kvkeys.name_after(prefix, entry.key)
            except UnicodeDecodeError as e:
                raise CorruptDataError("an intent key is not UTF-8", file=where) from e
            yield Intent.parse(address, entry.value, where)

    async def intent_addresses(self) -> AsyncIterator[str]:
        """The address of every intent in the journal (pending, stored and undecided, or claimed),
        from the keys alone: retention GC's mark and re-verification keep them, whatever
        ``min_age`` (a corrupt value still protects its address; the reconciler reports it)."""
        prefix = kvkeys.GC_INTENTS_PREFIX
        async for entry in self.ctx.kv.scan(self.partition, prefix):
            if not entry.key.startswith(prefix):
                break
            yield entry.key[len(prefix) :].decode("utf-8", "replace")

    async def settled_at(self, batch: str) -> float | None:
        """The ``t_stored`` of ``batch``'s settled record; None while it is open, or absent
        (claimed, pruned, or written by no upload)."""
        hit = self._settled.get(batch)
        if hit is not None:
            return hit
        key = kvkeys.gc_settled_key(batch)
        try:
            raw = await self.ctx.kv.get(self.partition, key)
        except NotFoundError:
            return None  # not remembered: it may be written any moment
        t_stored = _settled_time(raw, where_of(self.partition, key))
        if t_stored is None:
            return None  # open: not remembered, it may be settled any moment
        if len(self._settled) >= SETTLED_CACHE:
            self._settled.clear()
        self._settled[batch] = t_stored
        return t_stored

    async def effective(self, intent: Intent) -> Intent:
        """``intent`` as the reconciler reads it: a ``pending`` one whose batch has a settle record
        is ``stored`` at that record's ``t_stored``. Its ``raw`` stays the stored bytes, so a CAS
        (claim, postpone) still compares against what is in the KV."""
        if intent.state != "pending" or intent.batch is None:
            return intent
        t_stored = await self.settled_at(intent.batch)
        if t_stored is None:
            return intent
        return intent._copy("stored", t_stored, intent.raw)

    async def effective_at(self, intent: Intent, at: float, grace: float) -> Intent:
        """:meth:`effective`, without a read for an intent recorded less than ``grace`` before
        ``at``: it is not due at ``at`` whatever its batch's record says (``t_stored`` >= ``t``)."""
        return intent if intent.t + grace > at else await self.effective(intent)

    async def due_intents(
        self,
        now: datetime,
        grace: float = DEFAULT_GRACE_SECONDS,
        pending_timeout: float = DEFAULT_PENDING_TIMEOUT_SECONDS,
        limit: int = 1000,
    ) -> list[Intent]:
        """At most ``limit`` intents due at ``now`` and not postponed past it (a bounded batch)."""
        at = now.timestamp()
        due: list[Intent] = []
        async for recorded in self.intents():
            intent = await self.effective_at(recorded, at, grace)
            if intent.due_at(grace, pending_timeout) <= at and (intent.next_check or 0.0) <= at:
                due.append(intent)
                if len(due) >= limit:
                    break
        return due

    async def consumed_since(self, branch: str, t: float) -> AsyncIterator[Consumed]:
        """Commit attempts on ``branch`` that recorded their consumption at or after ``t``."""
        prefix = kvkeys.gc_consumed_prefix(branch)
        async for entry in self.ctx.kv.scan(self.partition, prefix, page_size=CONSUMED_PAGE):
            if not entry.key.startswith(prefix):
                break
            where = where_of(self.partition, entry.key)
            parts = entry.key[len(prefix) :].split(b"/")
            if len(parts) != 2 or not all(parts):
                raise CorruptDataError("a consumed-token key is not <branch>/<token>/<commit>", file=where)
            when = _number(parse_json_record(entry.value, where, "a consumed-token record"), "t", where)
            if when is not None and when >= t:
                yield Consumed(
                    branch, parts[0].decode(errors="replace"), parts[1].decode(errors="replace"), when
                )

    async def _cas(self, intent: Intent, updated: Intent) -> Intent:
        raw = updated.to_bytes()
        key = kvkeys.gc_intent_key(intent.address)
        await self.ctx.kv.set_if(self.partition, key, raw, Expect.equals(intent.raw))
        return replace(updated, raw=raw)

    async def claim(self, intent: Intent) -> Intent:
        """CAS the intent to ``deleting`` before its address is deleted (PreconditionFailedError if it
        changed since it was read: decide again). ``intent`` is as :meth:`effective` read it.

        A single upload's staging write expects the ``pending`` bytes, so after this CAS it stages
        nothing. A still-pending intent of a batch is settled through its batch's record instead:
        that record is deleted first, so the batch's staging write (which expects it open) can
        never land after this; a batch that settled since it was read has its entries staged,
        which the caller's re-check right before the delete sees."""
        if intent.state == "deleting":
            return intent
        if intent.state == "pending" and intent.batch is not None:
            await self._fence(intent.batch)
        return await self._cas(intent, replace(intent, state="deleting"))

    async def _fence(self, batch: str) -> None:
        """Delete ``batch``'s record, once for every claim of its intents (they wait for it)."""
        fence = self._fences.get(batch)
        if fence is None:
            if len(self._fences) >= SETTLED_CACHE:
                self._fences.clear()
            key = kvkeys.gc_settled_key(batch)
            fence = self._fences[batch] = asyncio.ensure_future(self.ctx.kv.delete(self.partition, key))
            self._settled.pop(batch, None)
        try:
            await asyncio.shield(fence)  # a cancelled claim leaves the deletion to the others
        except BaseException:
            if fence.done() and (fence.cancelled() or fence.exception() is not None):
                self._fences.pop(batch, None)  # failed: the next claim deletes it again
            raise

    async def postpone(self, intent: Intent, until: datetime) -> Intent:
        """Re-check a still-staged intent later (the reconciler's backoff); counts the checks."""
        return await self._cas(
            intent, replace(intent, next_check=until.timestamp(), checks=intent.checks + 1)
        )

    async def settle(self, intent: Intent) -> None:
        """The address was deleted: forget the intent."""
        await self.ctx.kv.delete(self.partition, kvkeys.gc_intent_key(intent.address))

    async def drop(self, intent: Intent) -> None:
        """The address is retention GC's (committed, or beyond what the journal can prove)."""
        await self.ctx.kv.delete(self.partition, kvkeys.gc_intent_key(intent.address))

    async def prune_consumed(self, branch: str, before: float) -> int:
        """Forget consumption records of ``branch`` older than ``before`` (the reconciler passes the
        oldest undecided intent's ``t`` less the clock-skew margin); returns how many."""
        prefix = kvkeys.gc_consumed_prefix(branch)
        old: list[bytes] = []
        async for entry in self.ctx.kv.scan(self.partition, prefix):
            if not entry.key.startswith(prefix):
                break
            where = where_of(self.partition, entry.key)
            when = _number(parse_json_record(entry.value, where, "a consumed-token record"), "t", where)
            if when is not None and when < before:
                old.append(entry.key)
        for key in old:  # collected first: deleting during a paged scan may skip keys
            await self.ctx.kv.delete(self.partition, key)
        return len(old)

    async def prune_settled(self, before: float) -> int:
        """Forget batch records older than ``before`` (a settled one's ``t_stored``, an open one's
        ``t``); returns how many.

        The reconciler passes ``now`` less the longer of its pending timeout and grace, and twice
        the clock-skew margin. Every intent of a settled batch was recorded before its
        ``t_stored``, so it is due even as ``pending``, and the state decides nothing else
        (:meth:`decide` reads the due time only): without the record it reads as it was written.
        Deleting an open record fences its upload, which outlived the pending timeout (its staging
        write expects the record open): it fails, staging nothing."""
        prefix = kvkeys.GC_SETTLED_PREFIX
        old: list[bytes] = []
        async for entry in self.ctx.kv.scan(self.partition, prefix):
            if not entry.key.startswith(prefix):
                break
            if _batch_record_time(entry.value, where_of(self.partition, entry.key)) < before:
                old.append(entry.key)
        for key in old:  # collected first: deleting during a paged scan may skip keys
            await self.ctx.kv.delete(self.partition, key)
            self._settled.pop(key[len(prefix) :].decode(errors="replace"), None)
        return len(old)

    def deleted_repositories(self) -> AsyncIterator[DeletedRepository]:
        return self.ctx.refs.deleted_repositories()

    async def consumed_branches(self) -> list[str]:
        """Every branch name with consumption records (deleted branches too), for pruning them."""
        prefix = kvkeys.GC_CONSUMED_PREFIX
        names: list[str] = []
        async for entry in self.ctx.kv.scan(self.partition, prefix):
            if not entry.key.startswith(prefix):
                break
            name = entry.key[len(prefix) :].split(b"/", 1)[0].decode("utf-8", "replace")
            if name and (not names or names[-1] != name):
                names.append(name)
        return names

    # -- the decision ---------------------------------------------------------------------------------

    async def decide(
        self,
        intent: Intent,
        *,
        now: datetime,
        grace: float = DEFAULT_GRACE_SECONDS,
        pending_timeout: float = DEFAULT_PENDING_TIMEOUT_SECONDS,
        clock_skew: float = DEFAULT_CLOCK_SKEW_SECONDS,
    ) -> Decision:
        """What to do with the address of a due intent (see the module docstring)."""
        if now.timestamp() < intent.due_at(grace, pending_timeout):
            return "wait"
        settings = await self.settings()
        if not settings.hard_delete_journal or intent.t < settings.since + clock_skew:
            return "committed"  # commits of a journal-off window recorded nothing: not provable
        ns = StorageNamespace.parse(self.repo.storage_namespace)
        # Tokens first, consumption records second: a commit that consumes a token between the two
        # reads wrote its record before its branch CAS, so the second read sees it.
        try:
            branch, _ = await self.ctx.refs.get_branch(self.repo, intent.branch)
            tokens: tuple[str, ...] = (branch.staging_token, *branch.sealed_tokens)
        except NotFoundError:
            tokens = ()  # a deleted branch stages nothing
        for token in tokens:
            staged = await self.ctx.staging.get(token, intent.key)
            if staged is not None and _holds(ns, staged, intent.address):
                return "staged"
        checked: set[str] = set()
        async for consumed in self.consumed_since(intent.branch, intent.t - clock_skew):
            if consumed.commit_id in checked:
                continue
            checked.add(consumed.commit_id)
            if await self._commit_holds(consumed, intent, ns):
                return "committed"
        return "delete"

    async def _commit_holds(self, consumed: Consumed, intent: Intent, ns: StorageNamespace) -> bool:
        commit = self._commits.get(consumed.commit_id)
        try:
            if commit is None:
                commit = await self.ctx.refs.get_commit(self.repo, consumed.commit_id)
                if len(self._commits) >= COMMIT_CACHE:
                    self._commits.clear()
                self._commits[consumed.commit_id] = commit
        except NotFoundError as e:
            # Consumption is recorded after the commit record is stored: a missing one is corruption.
            key = kvkeys.gc_consumed_key(consumed.branch, consumed.token, consumed.commit_id)
            msg = f"consumed-token record names missing commit {consumed.commit_id}"
            raise CorruptDataError(msg, file=where_of(self.partition, key)) from e
        found = await (await self.ctx.metarange(self.repo, commit.metarange_id)).get(intent.key)
        return found is not None and _holds(ns, found, intent.address)


async def forget_deleted_repository(repos: HasContext, repo_id: str, instance_uid: str) -> None:
    """Drop a ``deleted-repos/`` record (its namespace was purged, or is claimed again and kept)."""
    await repos.context.refs.forget_deleted_repository(repo_id, instance_uid)


def _batch_of(intents: Sequence[Intent]) -> str:
    """The one batch every intent of ``intents`` (not empty) names (:meth:`Journal.record_intents`);
    :class:`BadInputError` when one names none or another."""
    batch = intents[0].batch
    if batch is None or any(i.batch != batch for i in intents):
        raise BadInputError("a batch's intents must all name one batch (new_batch_id)", field="intents")
    return batch


def _open_bytes(intents: Sequence[Intent]) -> bytes:
    """A batch's open record (what its settle expects): the same bytes from the same intents."""
    return _ENCODE({"state": "open", "t": min(i.t for i in intents)}).encode()


def _batch_record(raw: bytes, where: str) -> tuple[bool, float]:
    """``(settled, time)`` of a batch record: ``{"t_stored"}`` settled at that time, or
    ``{"state": "open", "t"}`` recorded then; anything else is :class:`CorruptDataError`."""
    doc = parse_json_record(raw, where, "a batch settle record", MAX_SETTLED_BYTES)
    if "t_stored" in doc or doc.get("state") != "open":
        t_stored = _number(doc, "t_stored", where)
        assert t_stored is not None  # _number raises for a missing required field
        return True, t_stored
    t = _number(doc, "t", where)
    assert t is not None
    return False, t


def _settled_time(raw: bytes, where: str) -> float | None:
    settled, t = _batch_record(raw, where)
    return t if settled else None


def _batch_record_time(raw: bytes, where: str) -> float:
    return _batch_record(raw, where)[1]


def _holds(ns: StorageNamespace, record: ValueRecord, address: str) -> bool:
    """Whether ``record`` (possibly a tombstone) points at the object ``address`` of ``ns``."""
    if record.is_tombstone:
        return False
    entry = decode_entry(record.data)
    try:
        return ns.relative_of(entry.address, entry.address_type) == address
    except BadInputError:
        return True  # cannot tell where it points: keep the object (delete only on definite knowledge)


async def decide(journal: Journal, intent: Intent, *, now: datetime, **limits: float) -> Decision:
    """:meth:`Journal.decide` as a function (the reconciler's entry point)."""
    return await journal.decide(intent, now=now, **limits)


# -- retention GC's uncommitted addresses (spec §3a step 3) -------------------------------------------


async def staged_addresses(repos: HasContext, repo: Repository) -> AsyncIterator[tuple[str, str, int]]:
    """``(branch, address, address_type)`` of the newest staged value of every key on every branch.

    Tokens marked for cleanup are skipped (their entries are committed, or garbage); values shadowed
    by a newer token and tombstones are not live. One branch at a time, merged in key order: memory
    is bounded by one KV page per token of the branch being read.
    """
    ctx = repos.context
    by_branch: tuple[str, list[str]] | None = None
    async for branch_id, token in ctx.refs.live_tokens(repo):
        if by_branch is not None and by_branch[0] != branch_id:
            async for row in _branch_addresses(ctx, *by_branch):
                yield row
            by_branch = None
        if await ctx.refs.cleanup_mark(token) is not None:
            continue
        if by_branch is None:
            by_branch = (branch_id, [])
        by_branch[1].append(token)
    if by_branch is not None:
        async for row in _branch_addresses(ctx, *by_branch):
            yield row


async def _branch_addresses(
    ctx: RepoContext, branch_id: str, tokens: list[str]
) -> AsyncIterator[tuple[str, str, int]]:
    async for record in ctx.staging.merged(tokens):
        if record.is_tombstone:
            continue
        entry = decode_entry(record.data, file=f"kv:{tokens[0]}")
        yield branch_id, entry.address, entry.address_type

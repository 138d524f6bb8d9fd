"""The hard-delete reconciler (GC spec §3c): uncommitted garbage deleted online, within a grace period.

:func:`reconcile_repository` runs one bounded pass over a repository's journal
(:class:`~lakefs_core.repos.graveler.Journal`):

1. Refuse a read-only repository (a mirror: :class:`~lakefs_core.errors.ReadOnlyError`); it keeps no
   journal of its own and GC never deletes in it.
2. Take at most ``max_intents`` due intents (a stored one at ``t_stored`` + ``grace_seconds``, a pending
   one at ``t`` + ``pending_timeout_seconds``; a claimed one at once) and decide each
   (:meth:`Journal.decide`): ``committed`` drops the intent (retention GC takes the address over),
   ``staged`` postpones it (``staged_backoff_seconds`` doubled per check, capped), ``wait`` leaves it.
3. ``delete``: the address must be a data object of the namespace (``data/<slice>/<id>``: never an
   external address, never ``_lakefs/``; anything else is refused and its intent dropped for the
   listing-based retention GC). The intent is claimed (:meth:`Journal.claim`: CAS to ``deleting``,
   after deleting the batch record of a still-pending batch intent), so an upload still in flight
   can no longer stage it (its staging write is conditional on what the claim changed: it fails,
   staging nothing); if the upload staged first, the claim's CAS fails and the object is left.
   Then, for the whole batch, the claimed intents are decided AGAIN right before the batch delete
   (the claim made that decision final): only what still says ``delete`` is deleted, the rest is
   counted ``rescued`` (and dropped or postponed as above). Deletions go through the GC's
   rate-limited batch deleter (:class:`~lakefs_core.service.deleter.KeyDeleter`); a deleted address
   settles its intent, a failed one keeps it (``deleting``, so due at once) and is retried on the
   next pass.
4. Prune consumption records older than the oldest remaining intent (less twice the clock-skew
   margin) and batch records older than the longer of the pending timeout and the grace (less the
   same margin: an open one fences its upload, which outlived the pending timeout), and
   sweep interrupted-write temporary files of a local namespace
   (``Graveler.sweep_temp_files``, once per process and root; 0 without sweeping while the root's
   last completed sweep is younger than the grace period).

:func:`reconcile_deleted_repositories` handles the ``deleted-repos/`` records: once the grace period
after a deletion has passed, the namespace's ``data/`` is purged when no repository claims or uses
the namespace (checked before the listing and again right before every batch delete; keys newer than
the last check are never deleted), then the record is dropped. A namespace that a live repository
uses again is kept and its record dropped; one claimed by a repository being created or deleted is
left for a later pass.

``deleter=None`` (or ``dry_run``) decides and counts, and changes nothing. Corrupt journal records
raise :class:`~lakefs_core.errors.CorruptDataError` (nothing is deleted on a guess).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lakefs_core.errors import (
    BadInputError,
    NamespaceConflictError,
    PreconditionFailedError,
    ReadOnlyError,
)
from lakefs_core.repos.graveler import (
    DATA_DIR,
    DEFAULT_CLOCK_SKEW_SECONDS,
    TABLES_DIR,
    Decision,
    Graveler,
    Intent,
    Journal,
    StorageNamespace,
    forget_deleted_repository,
)
from lakefs_core.repos.journal import MIN_PENDING_TIMEOUT_SECONDS
from lakefs_core.repos.namespace_claims import NamespaceIndex, check_for_gc, check_recorded
from lakefs_core.service.deleter import KeyDeleter

log = logging.getLogger("lakefs_gc.reconcile")

BATCH = 1000  # addresses per delete batch (the deleter's and S3's limit)


@dataclass(frozen=True)
class ReconcileOptions:
    grace_seconds: float = 3600.0  # stored intent due at t_stored + grace
    pending_timeout_seconds: float = 86400.0  # never-settled upload due after this
    max_intents: int = 100_000  # bounded work per pass
    staged_backoff_seconds: float = 600.0  # still-staged intents re-checked later (doubling, capped)
    dry_run: bool = False
    now: datetime | None = None  # fixed for the pass; None: ``clock``
    staged_backoff_cap_seconds: float = 6 * 3600.0
    clock_skew_seconds: float = DEFAULT_CLOCK_SKEW_SECONDS
    concurrency: int = 16  # intents decided at once (each decision is a few KV point reads)
    clock: Callable[[], datetime] | None = None  # the GC run clock; None: graveler.clock

    def __post_init__(self) -> None:
        for name in ("grace_seconds", "pending_timeout_seconds", "staged_backoff_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise BadInputError("must be a number of seconds >= 0", field=name)
        if self.pending_timeout_seconds < MIN_PENDING_TIMEOUT_SECONDS:
            raise BadInputError(
                f"{self.pending_timeout_seconds:g} s is below the hard-delete journal's minimum "
                f"pending timeout of {MIN_PENDING_TIMEOUT_SECONDS:g} s",
                field="pending_timeout_seconds",
            )
        if (
            isinstance(self.max_intents, bool)
            or not isinstance(self.max_intents, int)
            or self.max_intents < 1
        ):
            raise BadInputError("must be an integer >= 1", field="max_intents")

    def backoff(self, checks: int) -> float:
        """Seconds until a still-staged intent checked ``checks`` times is decided again."""
        return min(self.staged_backoff_cap_seconds, self.staged_backoff_seconds * 2.0 ** min(checks, 30))


@dataclass
class ReconcileReport:
    """One pass's counters (they feed the daemon's metrics)."""

    repository: str
    candidates: int = 0  # due intents decided
    deleted: int = 0
    rescued: int = 0  # found still live (staged/committed) at the re-check right before the delete
    committed: int = 0
    staged: int = 0
    waiting: int = 0  # intents (or deleted-repository records) not due yet
    failed: int = 0  # deletes that failed: still journalled, retried next pass
    oldest_undecided_age_seconds: float | None = None
    temp_files_deleted: int = 0
    refused: int = 0  # not a data object of the namespace (external, _lakefs/): never deleted
    deletable: int = 0  # decided delete (in a dry run: what would have been deleted)
    consumed_pruned: int = 0
    settled_pruned: int = 0  # batch settle records no intent needs any more
    dry_run: bool = False
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def data_key(address: str, ns: StorageNamespace) -> str | None:
    """The store key of a journalled address, or None unless it is ``data/<slice>/<id>`` exactly:
    a journal record is hostile, and an external or metadata address is never ours to delete."""
    if not isinstance(address, str) or "://" in address or "\\" in address:
        return None
    parts = address.split("/")
    if len(parts) < 3 or parts[0] != DATA_DIR or TABLES_DIR in parts:
        return None
    if any(p in ("", ".", "..") for p in parts):
        return None
    try:
        return ns.key(address)
    except BadInputError:
        return None


class _Pass:
    """One reconciliation pass over one repository's journal."""

    def __init__(
        self, journal: Journal, ns: StorageNamespace, deleter: KeyDeleter | None, options: ReconcileOptions
    ) -> None:
        self.journal, self.ns, self.deleter, self.options = journal, ns, deleter, options
        self.report = ReconcileReport(journal.repo.id, dry_run=deleter is None)
        self.fixed_now = options.now

    def now(self) -> datetime:
        clock = self.options.clock or self.journal.now
        return self.fixed_now or clock()

    async def decide(self, intent: Intent) -> Decision:
        o = self.options
        return await self.journal.decide(
            intent,
            now=self.now(),
            grace=o.grace_seconds,
            pending_timeout=o.pending_timeout_seconds,
            clock_skew=o.clock_skew_seconds,
        )

    async def keep_live(self, intent: Intent, decision: Decision) -> None:
        """A committed intent is dropped; a staged one postponed (a changed one is left alone)."""
        if self.deleter is None or decision == "wait":
            return
        try:
            if decision == "committed":
                await self.journal.drop(intent)
            elif decision == "staged":
                until = self.now() + timedelta(seconds=self.options.backoff(intent.checks))
                await self.journal.postpone(intent, until)
        except PreconditionFailedError:
            pass  # the intent changed since it was read (settled by its upload): decided next pass

    async def first_look(self, intent: Intent) -> Intent | None:
        """Decide ``intent``; the claimed intent if its address is to be deleted."""
        r = self.report
        r.candidates += 1
        decision = await self.decide(intent)
        if decision != "delete":
            r.committed += decision == "committed"
            r.staged += decision == "staged"
            r.waiting += decision == "wait"
            await self.keep_live(intent, decision)
            return None
        if data_key(intent.address, self.ns) is None:
            r.refused += 1
            r.errors.append(f"intent {intent.address[:200]!r} is not a data object of {self.ns.uri}")
            if self.deleter is not None:
                await self.journal.drop(intent)  # retention GC's listing decides it instead
            return None
        r.deletable += 1
        if self.deleter is None:
            return None
        try:
            return await self.journal.claim(intent)
        except PreconditionFailedError:
            return None  # settled or changed meanwhile: decided again next pass

    async def recheck_one(self, intent: Intent) -> Intent | None:
        decision = await self.decide(intent)
        if decision == "delete":
            return intent
        self.report.rescued += 1
        self.report.committed += decision == "committed"
        self.report.staged += decision == "staged"
        await self.keep_live(intent, decision)
        return None

    async def each(
        self, fn: Callable[[Intent], Awaitable[Intent | None]], intents: list[Intent]
    ) -> list[Intent]:
        """``fn`` over ``intents``, at most ``concurrency`` at once; the non-None results, in order."""
        gate = asyncio.Semaphore(self.options.concurrency)

        async def one(intent: Intent) -> Intent | None:
            async with gate:
                return await fn(intent)

        try:
            async with asyncio.TaskGroup() as group:  # the first failure cancels the rest
                tasks = [group.create_task(one(i)) for i in intents]
        except BaseExceptionGroup as failed:
            raise _first(failed) from None
        return [got for task in tasks if (got := task.result()) is not None]

    async def delete(self, doomed: list[Intent]) -> None:
        assert self.deleter is not None
        by_key = {data_key(i.address, self.ns): i for i in doomed}
        keys = [k for k in by_key if k is not None]
        outcome = await self.deleter.delete_keys(keys)
        for key in outcome.deleted:
            await self.journal.settle(by_key[key])
        self.report.deleted += len(outcome.deleted)
        self.report.failed += len(outcome.failed)  # still journalled as ``deleting``: next pass

    async def run(self, intents: list[Intent]) -> None:
        for start in range(0, len(intents), BATCH):
            claimed = await self.each(self.first_look, intents[start : start + BATCH])
            if claimed:  # the re-check, right before the batch delete
                doomed = await self.each(self.recheck_one, claimed)
                if doomed:
                    await self.delete(doomed)

    async def finish(self) -> None:
        """The oldest undecided intent's age, not-yet-due intents, and consumption-record pruning."""
        o, at = self.options, self.now().timestamp()
        oldest: float | None = None
        async for recorded in self.journal.intents():
            oldest = recorded.t if oldest is None else min(oldest, recorded.t)
            intent = await self.journal.effective_at(recorded, at, o.grace_seconds)
            if intent.due_at(o.grace_seconds, o.pending_timeout_seconds) > at:
                self.report.waiting += 1
        if oldest is not None:
            self.report.oldest_undecided_age_seconds = max(0.0, at - oldest)
        if self.deleter is None:
            return
        # consumed_since reads from an intent's t less the skew; intents written after this scan
        # have t >= now - skew (writers' clocks differ by less than it).
        before = min(at if oldest is None else oldest, at) - 2 * o.clock_skew_seconds
        for branch in await self.journal.consumed_branches():
            try:
                self.report.consumed_pruned += await self.journal.prune_consumed(branch, before)
            except BadInputError:
                self.report.errors.append(f"consumption records of branch {branch[:100]!r} not pruned")
        # A settled record only moves its intents' due time: past the pending timeout and the grace
        # (and the skew, both ways) it decides nothing; an open one that old fences an upload that
        # outlived the pending timeout (Journal.prune_settled).
        longest = max(o.pending_timeout_seconds, o.grace_seconds)
        settled_before = at - longest - 2 * o.clock_skew_seconds
        self.report.settled_pruned += await self.journal.prune_settled(settled_before)


async def reconcile_repository(
    graveler: Graveler,
    repo_id: str,
    *,
    deleter: KeyDeleter | None,
    options: ReconcileOptions = ReconcileOptions(),
    namespaces: NamespaceIndex | None = None,
) -> ReconcileReport:
    """One reconciliation pass over ``repo_id``'s journal (see the module docstring). ``namespaces``:
    a recent index of every repository's namespace and import source, shared by the passes of
    many repositories (:class:`~lakefs_core.repos.namespace_claims.NamespaceIndex`); without it
    the namespace check scans the records itself."""
    # its namespace still leads where recorded, overlapping none
    await check_for_gc(graveler, repo_id, index=namespaces)
    repo = await graveler.repository(repo_id)
    if repo.read_only:
        raise ReadOnlyError(f"repository {repo_id!r} is read-only (a mirror): it is never reconciled")
    ns = StorageNamespace.parse(repo.storage_namespace)
    journal = Journal(graveler, repo)
    one = _Pass(journal, ns, None if options.dry_run else deleter, options)
    intents = await journal.due_intents(
        one.now(), options.grace_seconds, options.pending_timeout_seconds, limit=options.max_intents
    )
    await one.run(intents)
    await one.finish()
    if one.deleter is not None:
        one.report.temp_files_deleted = await graveler.sweep_temp_files(ns)
    r = one.report
    if r.deleted or r.failed or r.rescued:
        log.info(
            "reconciled %s: %d deleted, %d failed, %d rescued of %d due",
            repo_id, r.deleted, r.failed, r.rescued, r.candidates,
        )  # fmt: skip
    return r


# -- deleted repositories ------------------------------------------------------------------------------


async def _live_user(graveler: Graveler, ns: StorageNamespace) -> str | None:
    """A live (not being deleted) repository whose namespace overlaps ``ns``, if any."""
    async for repo in graveler.list_repositories():
        try:
            other = StorageNamespace.parse(repo.storage_namespace)
        except BadInputError:
            continue  # a scheme this library cannot open overlaps none of ours
        if other.overlaps(ns):
            return repo.id
    return None


async def _unclaimed(graveler: Graveler, ns: StorageNamespace) -> bool:
    """No repository (live, being created or being deleted) claims or uses ``ns``."""
    try:
        await graveler.check_namespace_available(ns.uri, "")  # "" is no repository's id
    except NamespaceConflictError:
        return False
    return True


@dataclass
class _Purge:
    graveler: Graveler
    ns: StorageNamespace
    deleter: KeyDeleter | None
    report: ReconcileReport
    checked_at: float = 0.0  # wall time just before the last check that found ``ns`` unclaimed

    async def check(self) -> bool:
        before = time.time()
        if not await _unclaimed(self.graveler, self.ns):
            return False
        self.checked_at = before
        return True

    async def batch(self, keys: list[str]) -> bool:
        """Delete one listed batch after re-checking the namespace; False if it is claimed now."""
        if not await self.check():
            return False
        r = self.report
        r.candidates += len(keys)
        r.deletable += len(keys)
        if self.deleter is not None:
            outcome = await self.deleter.delete_keys(keys)
            r.deleted += len(outcome.deleted)
            r.failed += len(outcome.failed)
        return True

    async def run(self) -> bool:
        """Purge ``data/``; True when every key is gone (the record can be dropped). A key written
        after the last check is skipped: only a repository claiming ``ns`` since could write it."""
        if not await self.check():
            return False
        store = await self.graveler.namespace_store(self.ns)
        batch: list[str] = []
        async for info in store.list_keys(self.ns.data_prefix()):
            if info.mtime >= self.checked_at:
                self.report.rescued += 1
                continue
            batch.append(info.key)
            if len(batch) >= BATCH:
                if not await self.batch(batch):
                    return False
                batch = []
        if batch and not await self.batch(batch):
            return False
        r = self.report
        return r.failed == 0 and r.rescued == 0 and not r.dry_run


async def _purge_one(
    graveler: Graveler,
    *,
    record_repo: str,
    record_uid: str,
    namespace: str,
    deleter_for: Callable[[StorageNamespace], Awaitable[KeyDeleter]] | None,
    options: ReconcileOptions,
) -> ReconcileReport:
    report = ReconcileReport(record_repo, dry_run=deleter_for is None or options.dry_run)
    try:  # it must still lead where it was recorded (lakefs_core.realpaths)
        recorded = await check_recorded(namespace, f"deleted repository {record_repo!r}")
        ns = recorded.check_repository_namespace()
    except (BadInputError, NamespaceConflictError) as e:
        report.refused = 1
        report.errors.append(f"deleted repository {record_repo!r}: namespace {namespace[:200]!r}: {e}")
        return report
    user = await _live_user(graveler, ns)
    if user is not None:  # in use again: its objects may be the new repository's, never purged
        report.rescued = 1
        if not report.dry_run:
            await forget_deleted_repository(graveler, record_repo, record_uid)
        return report
    if not await _unclaimed(graveler, ns):
        report.waiting = 1  # claimed by a repository being created or deleted: later
        return report
    deleter = None if report.dry_run or deleter_for is None else await deleter_for(ns)
    if await _Purge(graveler, ns, deleter, report).run():
        await forget_deleted_repository(graveler, record_repo, record_uid)
    return report


async def reconcile_deleted_repositories(
    graveler: Graveler,
    *,
    deleter_for: Callable[[StorageNamespace], Awaitable[KeyDeleter]] | None,
    options: ReconcileOptions = ReconcileOptions(),
) -> list[ReconcileReport]:
    """Purge the namespaces deleted repositories left, once due and unclaimed (module docstring).
    ``deleter_for(ns)`` makes the deleter of a namespace; ``None`` counts only (a dry run)."""
    clock = options.clock or graveler.clock
    at = (options.now or clock()).timestamp()
    records = [r async for r in graveler.deleted_repositories()]  # forgotten while iterating
    reports: list[ReconcileReport] = []
    for record in records:
        if at < record.deleted_at + options.grace_seconds:
            waiting = ReconcileReport(record.repo, waiting=1, dry_run=deleter_for is None or options.dry_run)
            waiting.oldest_undecided_age_seconds = max(0.0, at - record.deleted_at)
            reports.append(waiting)
            continue
        reports.append(
            await _purge_one(
                graveler,
                record_repo=record.repo,
                record_uid=record.instance_uid,
                namespace=record.namespace,
                deleter_for=deleter_for,
                options=options,
            )
        )
    return reports

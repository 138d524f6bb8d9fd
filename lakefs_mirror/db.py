"""The mirrors database: which mirrors exist, how far each got, and who leads each region.

One SQL database (SQLAlchemy 2 asyncio) is shared by the daemons of ALL regions: SQLite through
aiosqlite for a single machine (``sqlite+aiosqlite:///path``), PostgreSQL through asyncpg in
production (``postgresql+asyncpg://...``); plain ``sqlite:///`` and ``postgresql://`` URLs are
normalised. Tables are created on demand (:meth:`MirrorsDB.open`)::

    mirrors(id PK, source_repo, source_region, name, region, storage_namespace, branch_filter JSON,
            paused, mode, mirror_tags, created_at, updated_at, resync_requested_at, version,
            UNIQUE(region, name))
    mirror_status(mirror_id FK -> mirrors ON DELETE CASCADE, kind, branch, source_head, mirror_head,
                  candidate, missing_objects, missing_ranges, external_objects, lag_seconds,
                  last_promotion_at, last_checked_at, last_error, PK(mirror_id, kind, branch))
    leases(region PK, holder, expires_at)
    mirror_gc_applied(mirror_id FK -> mirrors ON DELETE CASCADE, run_id, applied_at,
                      PK(mirror_id, run_id))   -- source GC sweeps applied (lakefs_mirror.gc_apply)
    mirror_promotions(mirror_id PK FK -> mirrors ON DELETE CASCADE, promoted_at, forced,
                      source_reachable, heads JSON, source_heads JSON, note)   -- failovers

``UNIQUE(region, name)`` means two mirrors can never target the same destination repository, and
:meth:`MirrorsDB.create_mirror` refuses a storage namespace equal to, inside or enclosing another mirror's (in
any region; local ones at their real paths) within the inserting transaction: SQLite serialises writers (the
insert comes first), PostgreSQL creations take one transaction-scoped advisory lock, so of concurrent
creations on overlapping namespaces exactly one commits. (A canonical-namespace column with a unique index
would need an ``ALTER TABLE`` migration of existing databases; the serialised check covers equality too.)
The check is :mod:`lakefs_mirror.db_namespaces`'s.
Times are stored as integer microseconds since the Unix epoch (exact round trips, no time-zone handling
differences between the two databases) and returned as aware UTC :class:`~datetime.datetime`.

Atomicity: every write is ONE transaction (:func:`lakefs_core.sqlengine.run_transaction`) whose first
statement is a write (so SQLite never has to upgrade a read lock, which could fail at once under
contention). The region leases are :class:`lakefs_core.service.sql_lease.SQLLease` over the ``leases`` table
(:meth:`MirrorsDB.region_lease`; :meth:`MirrorsDB.try_acquire`, :meth:`MirrorsDB.renew`,
:meth:`MirrorsDB.release` and :meth:`MirrorsDB.lease` delegate to it): single conditional
statements, so at most one contender holds a region's lease at any instant, an expired lease can be
taken over, and a lapsed lease is not silently revived by a renew.

Errors: unique violations become :class:`~lakefs_core.errors.ConflictError` naming the field,
missing rows :class:`~lakefs_core.errors.NotFoundError`, a stale ``expected_version``
:class:`~lakefs_core.errors.PreconditionFailedError`; an unreachable database
:class:`~lakefs_core.errors.UnreachableError`, lock timeouts and serialization failures
:class:`~lakefs_core.errors.TransientError`. Messages show the database URL with its password masked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Table, and_, delete, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.schema import CreateTable

from lakefs_core.errors import (
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
    UnreachableError,
)
from lakefs_core.service.lease import DEFAULT_TTL
from lakefs_core.service.sql_lease import SQLLease
from lakefs_core.sqlengine import (
    create_sql_engine,
    db_reason,
    normalize_sql_url,
    run_transaction,
    translate_db_error,
    upsert_insert,
)
from lakefs_mirror.db_namespaces import (
    CREATE_LOCK_KEY,
    FieldConflictError,
    refuse_overlapping_namespace,
)
from lakefs_mirror.db_schema import (
    MAX_ERROR_TEXT,
    MAX_REF_NAME,
    gc_applied_table,
    leases_table,
    mirror_from_row,
    mirrors_table,
    now_us,
    promotion_from_row,
    promotions_table,
    schema_meta,
    status_from_row,
    status_row,
    status_table,
    to_us,
)
from lakefs_mirror.records import (
    DEFAULT_BRANCH_FILTER,
    MAX_BRANCH_FILTER,
    MAX_GLOB_LENGTH,
    MIRROR_MODES,
    STATUS_KINDS,
    Lease,
    Mirror,
    MirrorMode,
    MirrorRecord,
    MirrorStatus,
    Promotion,
    StatusKind,
    StatusRow,
    check_bool,
    check_branch_filter,
    check_choice,
    check_text,
    new_mirror_id,
)

__all__ = [
    "DEFAULT_BRANCH_FILTER",
    "MAX_BRANCH_FILTER",
    "MAX_GLOB_LENGTH",
    "MIRROR_MODES",
    "STATUS_KINDS",
    "FieldConflictError",
    "Lease",
    "Mirror",
    "MirrorMode",
    "MirrorRecord",
    "MirrorStatus",
    "MirrorsDB",
    "Promotion",
    "StatusKind",
    "StatusRow",
    "check_branch_filter",
    "new_mirror_id",
]

T = TypeVar("T")

UPDATABLE_FIELDS = frozenset({"branch_filter", "paused", "mode", "mirror_tags"})


# -- the database -------------------------------------------------------------------------------------


class MirrorsDB:
    """The shared mirrors database. Open with :meth:`open`, close with :meth:`close`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        self._display = engine.url.render_as_string(hide_password=True)
        self._closed = False
        # mirrors_for_region's rows as last decoded: a row unchanged since (the common case, every
        # pass of a daemon) is not decoded again (JSON filter, three timestamps per mirror)
        self._decoded: dict[tuple[object, ...], Mirror] = {}

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        create: bool = True,
        busy_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        pool_size: int = 5,
        max_overflow: int = 5,
    ) -> MirrorsDB:
        """Connect to ``url`` (normalised to its async driver); create the tables unless ``create=False``."""
        try:
            sa_url = normalize_sql_url(url)
        except ValueError as e:
            raise BadInputError(str(e), field="mirrors_db_url") from None
        engine = create_sql_engine(
            sa_url,
            busy_timeout=busy_timeout,
            connect_timeout=connect_timeout,
            pool_size=pool_size,
            max_overflow=max_overflow,
            sqlite_pragmas=("foreign_keys = ON",),
        )
        db = cls(engine)
        if create:
            try:
                await db.create_tables()
            except BaseException:
                await engine.dispose()
                raise
        return db

    @property
    def display_url(self) -> str:
        """The database URL with its password masked."""
        return self._display

    async def __aenter__(self) -> MirrorsDB:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._engine.dispose()

    # -- plumbing -----------------------------------------------------------------------------------

    def _translate(self, e: BaseException, *, connecting: bool, write: bool) -> LakeFSError:
        where = f"mirrors database {self._display}"
        return translate_db_error(e, where, connecting=connecting, write=write, url=self._engine.url)

    async def _run(
        self,
        fn: Callable[[AsyncConnection], Awaitable[T]],
        *,
        write: bool,
        on_integrity: Callable[[IntegrityError], LakeFSError] | None = None,
    ) -> T:
        """Run ``fn`` in one transaction on a fresh pooled connection, translating errors."""
        self._check_open()
        return await run_transaction(
            self._engine, fn, write=write, translate=self._translate, on_integrity=on_integrity
        )

    def _check_open(self) -> None:
        if self._closed:
            raise LakeFSError("the mirrors database is closed")

    def _insert(self, table: Table) -> Any:
        return upsert_insert(self._dialect, table)

    async def create_tables(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` for the three tables, in one transaction.

        Two daemons creating them at once is fine: SQLite serialises the statements, and on
        PostgreSQL the loser of a catalog race (unique violation on ``pg_type``) tries again.
        """

        async def create(conn: AsyncConnection) -> None:
            for table in schema_meta.sorted_tables:
                await conn.execute(CreateTable(table, if_not_exists=True))

        for attempt in range(5):
            try:
                await self._run(create, write=True)
                return
            except (UnreachableError, TransientError):
                raise
            except LakeFSError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))

    async def ping(self) -> None:
        """Raise :class:`UnreachableError` (or another error) unless the database answers."""

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(text("SELECT 1"))

        await self._run(op, write=False)

    # -- mirrors ------------------------------------------------------------------------------------

    async def create_mirror(
        self,
        *,
        source_repo: str,
        source_region: str,
        name: str,
        region: str,
        storage_namespace: str,
        branch_filter: Sequence[str] = DEFAULT_BRANCH_FILTER,
        paused: bool = False,
        mode: MirrorMode = "native",
        mirror_tags: bool = True,
        mirror_id: str | None = None,
        now: datetime | float | None = None,
    ) -> Mirror:
        """Insert a mirror in one transaction.

        Raises :class:`ConflictError` with ``field="name"`` when ``region`` already has a mirror
        named ``name`` (or ``field="id"`` for a reused ``mirror_id``). The caller validates names and
        namespaces; this only checks types and the closed value sets.
        """
        globs = check_branch_filter(branch_filter)
        check_choice(mode, MIRROR_MODES, "mode")
        check_bool(paused, "paused")
        check_bool(mirror_tags, "mirror_tags")
        _check_names(source_repo, source_region, name, region, storage_namespace)
        ident = mirror_id if mirror_id is not None else new_mirror_id()
        check_text(ident, "id", 64)
        at = now_us(now)
        row = {
            "id": ident,
            "source_repo": source_repo,
            "source_region": source_region,
            "name": name,
            "region": region,
            "storage_namespace": storage_namespace,
            "branch_filter": json.dumps(list(globs)),
            "paused": paused,
            "mode": mode,
            "mirror_tags": mirror_tags,
            "created_at": at,
            "updated_at": at,
            "resync_requested_at": None,
            "version": 1,
        }
        stmt = mirrors_table.insert().values(**row)

        async def op(conn: AsyncConnection) -> None:
            if self._dialect == "postgresql":
                # Serialise creations: under READ COMMITTED the overlap check below then sees every
                # mirror committed before ours (SQLite serialises writers by itself).
                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CREATE_LOCK_KEY})
            await conn.execute(stmt)
            await refuse_overlapping_namespace(conn, ident, storage_namespace)

        def conflict(e: IntegrityError) -> LakeFSError:
            return _create_conflict(e, region=region, name=name, ident=ident)

        await self._run(op, write=True, on_integrity=conflict)
        return mirror_from_row(row)

    async def get_mirror(self, mirror_id: str) -> Mirror:
        """The mirror ``mirror_id``; :class:`NotFoundError` when there is none."""
        stmt = select(mirrors_table).where(mirrors_table.c.id == mirror_id)

        async def op(conn: AsyncConnection) -> Mirror | None:
            row = (await conn.execute(stmt)).mappings().first()
            return None if row is None else mirror_from_row(row)

        found = await self._run(op, write=False)
        if found is None:
            raise NotFoundError(f"mirror {mirror_id!r} not found")
        return found

    async def list_mirrors(
        self,
        *,
        source_repo: str | None = None,
        source_region: str | None = None,
        region: str | None = None,
        after: str = "",
        limit: int | None = None,
    ) -> list[Mirror]:
        """Mirrors matching every given filter, by id, starting after id ``after``, at most ``limit``."""
        t = mirrors_table
        stmt = select(t).order_by(t.c.id)
        if source_repo is not None:
            stmt = stmt.where(t.c.source_repo == source_repo)
        if source_region is not None:
            stmt = stmt.where(t.c.source_region == source_region)
        if region is not None:
            stmt = stmt.where(t.c.region == region)
        if after:
            stmt = stmt.where(t.c.id > after)
        if limit is not None:
            if limit < 1:
                raise BadInputError("must be at least 1", field="limit")
            stmt = stmt.limit(limit)

        async def op(conn: AsyncConnection) -> list[Mirror]:
            return [mirror_from_row(r) for r in (await conn.execute(stmt)).mappings().all()]

        return await self._run(op, write=False)

    async def mirrors_for_region(self, region: str) -> list[Mirror]:
        """Every mirror whose destination is ``region`` and that was not promoted (the work of that
        region's daemon): ONE query, whatever the number of mirrors."""
        t, p = mirrors_table, promotions_table
        promoted = select(p.c.mirror_id).where(p.c.mirror_id == t.c.id).exists()
        stmt = select(t).where(t.c.region == region, ~promoted).order_by(t.c.id)

        async def op(conn: AsyncConnection) -> list[tuple[object, ...]]:
            return [tuple(r) for r in (await conn.execute(stmt)).all()]

        rows = await self._run(op, write=False)
        before, columns = self._decoded, [c.name for c in t.columns]
        decoded = {r: before.get(r) or mirror_from_row(dict(zip(columns, r, strict=True))) for r in rows}
        self._decoded = decoded  # only the latest rows: bounded by the mirrors that exist
        return [decoded[r] for r in rows]

    async def mirror_named(self, region: str, name: str) -> Mirror | None:
        """The mirror whose destination repository is ``name`` in ``region``, if any."""
        t = mirrors_table
        stmt = select(t).where(t.c.region == region, t.c.name == name)

        async def op(conn: AsyncConnection) -> Mirror | None:
            row = (await conn.execute(stmt)).mappings().first()
            return None if row is None else mirror_from_row(row)

        return await self._run(op, write=False)

    # -- failover -----------------------------------------------------------------------------------

    async def record_promotion(self, promotion: Promotion) -> None:
        """Record that mirror ``promotion.mirror_id`` was promoted (its daemon stops mirroring into
        it). :class:`ConflictError` (``field="mirror_id"``) if it already was; NotFoundError if the
        mirror is gone."""
        row = {
            "mirror_id": promotion.mirror_id,
            "promoted_at": to_us(promotion.promoted_at),
            "forced": promotion.forced,
            "source_reachable": promotion.source_reachable,
            "heads": json.dumps(promotion.heads, sort_keys=True),
            "source_heads": json.dumps(promotion.source_heads, sort_keys=True),
            "note": promotion.note,
            "failback_mirror_id": promotion.failback_mirror_id,
        }
        stmt = promotions_table.insert().values(**row)

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        def conflict(e: IntegrityError) -> LakeFSError:
            low = db_reason(e).lower()
            if "foreign key" in low or "foreign_key" in low or "fkey" in low:
                return NotFoundError(f"mirror {promotion.mirror_id!r} not found")
            return FieldConflictError(
                f"mirror {promotion.mirror_id!r} was already promoted", field="mirror_id"
            )

        await self._run(op, write=True, on_integrity=conflict)

    async def update_promotion(
        self,
        mirror_id: str,
        *,
        heads: Mapping[str, str] | None = None,
        note: str | None = None,
        failback_mirror_id: str | None = None,
    ) -> None:
        """Replace the recorded destination heads (read after the switch) and/or set the failback's
        note and reverse mirror of a promotion."""
        p = promotions_table
        values: dict[str, Any] = {}
        if heads is not None:
            values["heads"] = json.dumps(dict(heads), sort_keys=True)
        if note is not None:
            values["note"] = note[:MAX_ERROR_TEXT]
        if failback_mirror_id is not None:
            values["failback_mirror_id"] = failback_mirror_id
        if not values:
            return
        stmt = update(p).where(p.c.mirror_id == mirror_id).values(**values)

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        await self._run(op, write=True)

    async def promotion(self, mirror_id: str) -> Promotion | None:
        """The promotion of mirror ``mirror_id``, or None while it mirrors."""
        stmt = select(promotions_table).where(promotions_table.c.mirror_id == mirror_id)

        async def op(conn: AsyncConnection) -> Promotion | None:
            row = (await conn.execute(stmt)).mappings().first()
            return None if row is None else promotion_from_row(row)

        return await self._run(op, write=False)

    async def failback_of(self, reverse_mirror_id: str) -> Promotion | None:
        """The promotion whose failback created mirror ``reverse_mirror_id``, if any."""
        p = promotions_table
        stmt = select(p).where(p.c.failback_mirror_id == reverse_mirror_id)

        async def op(conn: AsyncConnection) -> Promotion | None:
            row = (await conn.execute(stmt)).mappings().first()
            return None if row is None else promotion_from_row(row)

        return await self._run(op, write=False)

    async def update_mirror(
        self,
        mirror_id: str,
        expected_version: int | None,
        *,
        now: datetime | float | None = None,
        **changes: Any,
    ) -> Mirror:
        """Change ``branch_filter``, ``paused``, ``mode`` and/or ``mirror_tags``; bumps ``version``.

        With ``expected_version`` the update applies only if the stored version still equals it
        (else :class:`PreconditionFailedError`); ``None`` updates unconditionally. No changes at all
        returns the mirror as it is (version unchanged, but still checked).
        """
        values: dict[str, Any] = {}
        for key, value in changes.items():
            if key not in UPDATABLE_FIELDS:
                raise BadInputError("cannot be changed", field=key)
            if key == "branch_filter":
                values[key] = json.dumps(list(check_branch_filter(value)))
            elif key == "mode":
                values[key] = check_choice(value, MIRROR_MODES, "mode")
            else:
                values[key] = check_bool(value, key)
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
        ):
            raise BadInputError("must be an integer", field="version")
        t = mirrors_table
        if not values:
            current = await self.get_mirror(mirror_id)
            if expected_version is not None and current.version != expected_version:
                raise PreconditionFailedError(
                    f"mirror {mirror_id!r} is at version {current.version}, not {expected_version}"
                )
            return current
        cond = t.c.id == mirror_id
        if expected_version is not None:
            cond = and_(cond, t.c.version == expected_version)
        stmt = (
            update(t)
            .where(cond)
            .values(**values, version=t.c.version + 1, updated_at=now_us(now))
            .returning(*t.c)
        )
        probe = select(t.c.version).where(t.c.id == mirror_id)

        async def op(conn: AsyncConnection) -> Mirror | int | None:
            row = (await conn.execute(stmt)).mappings().first()
            if row is not None:
                return mirror_from_row(row)
            return (await conn.execute(probe)).scalar_one_or_none()

        result = await self._run(op, write=True)
        if isinstance(result, Mirror):
            return result
        if result is None:
            raise NotFoundError(f"mirror {mirror_id!r} not found")
        raise PreconditionFailedError(f"mirror {mirror_id!r} is at version {result}, not {expected_version}")

    async def delete_mirror(self, mirror_id: str) -> None:
        """Delete the mirror and its status rows in one transaction; :class:`NotFoundError` if absent."""
        del_status = delete(status_table).where(status_table.c.mirror_id == mirror_id)
        del_mirror = delete(mirrors_table).where(mirrors_table.c.id == mirror_id)

        async def op(conn: AsyncConnection) -> int:
            await conn.execute(del_status)
            return int((await conn.execute(del_mirror)).rowcount)

        if await self._run(op, write=True) != 1:
            raise NotFoundError(f"mirror {mirror_id!r} not found")

    async def request_resync(self, mirror_id: str, *, now: datetime | float | None = None) -> Mirror:
        """Ask the destination region's daemon to re-check every branch of the mirror from scratch.

        Sets ``resync_requested_at`` (a later request replaces an earlier one); ``version`` is not
        changed (it guards the mirror's settings, not requests).
        """
        t = mirrors_table
        stmt = update(t).where(t.c.id == mirror_id).values(resync_requested_at=now_us(now)).returning(*t.c)

        async def op(conn: AsyncConnection) -> Mirror | None:
            row = (await conn.execute(stmt)).mappings().first()
            return None if row is None else mirror_from_row(row)

        found = await self._run(op, write=True)
        if found is None:
            raise NotFoundError(f"mirror {mirror_id!r} not found")
        return found

    async def clear_resync(self, mirror_id: str, at: datetime | float) -> bool:
        """Mark the resync requested at or before ``at`` done.

        ``at`` is the ``resync_requested_at`` the engine acted on; a newer request (made while the
        resync ran) is kept. True when a request was cleared.
        """
        t = mirrors_table
        stmt = (
            update(t)
            .where(t.c.id == mirror_id, t.c.resync_requested_at.is_not(None))
            .where(t.c.resync_requested_at <= to_us(at))
            .values(resync_requested_at=None)
        )

        async def op(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount)

        return await self._run(op, write=True) == 1

    # -- status -------------------------------------------------------------------------------------

    async def upsert_status(self, status: MirrorStatus) -> None:
        """Insert or replace the status row of ``(mirror_id, kind, branch)``.

        Every column is replaced, except that ``last_promotion_at=None`` keeps the stored time (a
        check that promoted nothing does not erase when the branch last advanced).
        :class:`NotFoundError` when the mirror no longer exists (it was deleted meanwhile).
        """
        check_choice(status.kind, STATUS_KINDS, "kind")
        check_text(status.branch, "branch", MAX_REF_NAME)
        for field in ("missing_objects", "missing_ranges", "external_objects"):
            value = getattr(status, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadInputError("must be an integer >= 0", field=field)
        row = status_row(status)
        ins = self._insert(status_table).values(**row)
        t = status_table
        keys = ("mirror_id", "kind", "branch")
        stmt = ins.on_conflict_do_update(
            index_elements=[t.c.mirror_id, t.c.kind, t.c.branch],
            set_={
                k: (
                    func.coalesce(ins.excluded.last_promotion_at, t.c.last_promotion_at)
                    if k == "last_promotion_at"
                    else getattr(ins.excluded, k)
                )
                for k in row
                if k not in keys
            },
        )

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        def gone(e: IntegrityError) -> LakeFSError:
            return NotFoundError(f"mirror {status.mirror_id!r} not found")

        await self._run(op, write=True, on_integrity=gone)

    async def delete_status(self, mirror_id: str, kind: StatusKind, name: str) -> bool:
        """Delete one status row (a branch or tag that disappeared); True when there was one."""
        t = status_table
        stmt = delete(t).where(t.c.mirror_id == mirror_id, t.c.kind == kind, t.c.branch == name)

        async def op(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount)

        return await self._run(op, write=True) == 1

    async def list_status(self, mirror_id: str) -> list[MirrorStatus]:
        """Every status row of a mirror, branches first, then tags, each by name."""
        t = status_table
        stmt = select(t).where(t.c.mirror_id == mirror_id).order_by(t.c.kind, t.c.branch)

        async def op(conn: AsyncConnection) -> list[MirrorStatus]:
            return [status_from_row(r) for r in (await conn.execute(stmt)).mappings().all()]

        return await self._run(op, write=False)

    # -- leases -------------------------------------------------------------------------------------
    #
    # Thin delegates to lakefs_core.service.sql_lease.SQLLease over the ``leases`` table (keyed by region).

    def region_lease(
        self, region: str, holder: str, ttl: float = DEFAULT_TTL, *, extra: Mapping[str, str] | None = None
    ) -> SQLLease:
        """The lease of ``region``'s mirroring, as contender ``holder`` (keep one per daemon: it
        remembers whether it held the lease, for the lifecycle logs)."""
        where = f"mirrors database {self._display}"
        return SQLLease(self._engine, leases_table, region, holder, ttl, where=where, extra=extra)

    async def try_acquire(
        self, region: str, holder: str, ttl: float, now: datetime | float | None = None
    ) -> bool:
        """Take (or extend) the lease of ``region`` for ``holder`` until ``now + ttl``
        (:meth:`lakefs_core.service.sql_lease.SQLLease.try_acquire`)."""
        self._check_open()
        return await self.region_lease(region, holder, ttl).try_acquire(now)

    async def renew(self, region: str, holder: str, ttl: float, now: datetime | float | None = None) -> bool:
        """Extend ``holder``'s unexpired lease to ``now + ttl``; False when it is not (any longer) held."""
        self._check_open()
        return await self.region_lease(region, holder, ttl).renew(now)

    async def release(self, region: str, holder: str) -> bool:
        """Give the lease up (only ``holder``'s own); True when it was released."""
        self._check_open()
        return await self.region_lease(region, holder).release()

    async def lease(self, region: str) -> Lease | None:
        """The lease row of ``region`` (possibly expired), or None."""
        self._check_open()
        # Any holder id reads the row; "-" is never written (reads write nothing).
        state = await self.region_lease(region, "-").current()
        if state is None:
            return None
        return Lease(region=state.name, holder=state.holder, expires_at=state.expires_at)

    # -- retention GC ---------------------------------------------------------------------------------

    async def pinned_commits(self, source_repo: str, *, source_region: str | None = None) -> set[str]:
        """Every non-empty ``mirror_head`` and ``candidate`` of the mirrors of ``source_repo`` (in
        every destination region; only those whose source is in ``source_region`` when given), paused
        mirrors included: retention GC on the source treats them as branch heads (gc.md §3d).
        Values are returned as stored; the caller checks them."""
        m, s = mirrors_table, status_table
        stmt = (
            select(s.c.mirror_head, s.c.candidate)
            .select_from(s.join(m, m.c.id == s.c.mirror_id))
            .where(m.c.source_repo == source_repo)
        )
        if source_region is not None:
            stmt = stmt.where(m.c.source_region == source_region)

        async def op(conn: AsyncConnection) -> set[str]:
            out: set[str] = set()
            for head, candidate in (await conn.execute(stmt)).all():
                out.update(v for v in (head, candidate) if v)
            return out

        return await self._run(op, write=False)

    async def set_gc_applied(
        self, mirror_id: str, run_id: str, *, now: datetime | float | None = None
    ) -> None:
        """Record that source GC run ``run_id`` was applied to mirror ``mirror_id``'s namespace
        (:mod:`lakefs_mirror.gc_apply`). Idempotent; :class:`NotFoundError` if the mirror is gone."""
        check_text(mirror_id, "mirror_id", 64)
        check_text(run_id, "run_id", 128)
        t = gc_applied_table
        stmt = (
            self._insert(t)
            .values(mirror_id=mirror_id, run_id=run_id, applied_at=now_us(now))
            .on_conflict_do_nothing(index_elements=[t.c.mirror_id, t.c.run_id])
        )

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        def gone(e: IntegrityError) -> LakeFSError:
            return NotFoundError(f"mirror {mirror_id} not found")

        await self._run(op, write=True, on_integrity=gone)

    async def gc_applied_runs(self, mirror_id: str) -> set[str]:
        """The source GC runs already applied to mirror ``mirror_id`` (see :meth:`set_gc_applied`)."""
        t = gc_applied_table
        stmt = select(t.c.run_id).where(t.c.mirror_id == mirror_id)

        async def op(conn: AsyncConnection) -> set[str]:
            return {str(r) for (r,) in (await conn.execute(stmt)).all()}

        return await self._run(op, write=False)


def _check_names(
    source_repo: str, source_region: str, name: str, region: str, storage_namespace: str
) -> None:
    """The text fields of a new mirror: strings within their columns' lengths."""
    for field, value, limit in (
        ("source_repo", source_repo, 63),
        ("source_region", source_region, 63),
        ("name", name, 63),
        ("region", region, 63),
        ("storage_namespace", storage_namespace, 4096),
    ):
        check_text(value, field, limit)


def _create_conflict(e: IntegrityError, *, region: str, name: str, ident: str) -> LakeFSError:
    """The field a mirror's insert collided on, from the database's unique violation."""
    low = db_reason(e).lower()
    if "mirrors_region_name_key" in low or "mirrors.region" in low:
        return FieldConflictError(f"region {region!r} already has a mirror named {name!r}", field="name")
    if "mirrors_pkey" in low or "mirrors.id" in low:
        return FieldConflictError(f"mirror id {ident!r} is already used", field="id")
    return FieldConflictError("the mirror conflicts with an existing one", field="name")

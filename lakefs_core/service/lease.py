"""Leases: at most one holder of a named responsibility at a time (a region's mirroring, a
repository's GC), taken over when its holder stops renewing it.

A :class:`Lease` object is one contender: a lease ``name``, this contender's ``holder`` id and a
``ttl``. Its operations (``now`` is an aware datetime or Unix seconds; default: the current time):

- :meth:`Lease.try_acquire`: take the lease, or extend it if already ours, until ``now + ttl``. True
  iff we hold it now: it was free (absent or released), expired (``expires_at <= now``) or ours;
- :meth:`Lease.renew`: extend our UNEXPIRED lease; False when it is not (any longer) ours. A lapsed
  lease is never silently revived: re-acquire it;
- :meth:`Lease.release`: give it up if ours (expired or not); True when it was ours;
- :meth:`Lease.current`: the stored holder and expiry (possibly expired), None when free.

Two implementations share that contract (one test suite runs against both):

- :class:`~lakefs_core.service.sql_lease.SQLLease` (a module of its own: a process on a KV lease
  never imports SQLAlchemy, ~0.45 s of CPU at every command-line start): a row ``(name PK, holder,
  expires_at)`` of a SQL table. Each operation is ONE conditional statement: acquire is ``INSERT ...
  ON CONFLICT (name) DO UPDATE ... WHERE expired OR ours RETURNING holder`` (PostgreSQL re-evaluates
  the ``WHERE`` on the new row version of a racing insert; SQLite serialises writers), renew an
  ``UPDATE ... WHERE holder = me AND expires_at > now``, release a ``DELETE ... WHERE holder = me``.
  So racing contenders never both win.
- :class:`KVLease`: one KV record (:func:`kv_lease` places it at
  :func:`lakefs_core.refs.kvkeys.lease_key`) holding ``{"holder", "expires_us"}`` as JSON; every
  change is a ``set_if`` on the bytes just read (absent: ``Expect.ABSENT``), so of racing contenders
  exactly one CAS wins. The KV has no delete-if-equals: release CASes the record to a released value
  (no holder), which counts as free. A record that does not parse is
  :class:`~lakefs_core.errors.CorruptDataError`: never taken over on a guess.

Expiry is judged with the CALLER's clock (``now``): contenders need clocks within a small fraction
of ``ttl`` of each other, and a holder must stop acting well before its lease can expire (callers
renew at a fraction of ``ttl`` and re-check before irreversible steps).

Lifecycle logs at INFO on the ``lakefs_core.service.lease`` logger: acquired (with the previous holder when
known: a hand-over), lost (an acquire or renew failed while we believed we held it), released
(handed over). Records carry the ``extra`` mapping given at construction (e.g. ``{"repository": r}``).
A holder that takes and releases the same lease over and over (a daemon, every pass) gives each of
its leases one ``announced`` set (:func:`kv_lease`): then only changes are INFO (its first
acquisition, a hand-over, a loss) and the routine acquisitions and releases are DEBUG.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.kv.base import Expect, KVStore
from lakefs_core.refs import kvkeys

__all__ = ["DEFAULT_TTL", "KVLease", "Lease", "LeaseState", "kv_lease"]

log = logging.getLogger(__name__)

DEFAULT_TTL = 30.0
_ACQUIRE_ATTEMPTS = 4  # KV: re-reads after losing a CAS to a change that still leaves the lease free


@dataclass(frozen=True)
class LeaseState:
    """Who holds lease ``name``, until when (``expires_at`` may be in the past)."""

    name: str
    holder: str
    expires_at: datetime


class Lease(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def holder(self) -> str: ...

    async def try_acquire(self, now: datetime | float | None = None) -> bool: ...

    async def renew(self, now: datetime | float | None = None) -> bool: ...

    async def release(self) -> bool: ...

    async def current(self) -> LeaseState | None: ...


def to_us(now: datetime | float | None) -> int:
    """``now`` (aware datetime, Unix seconds, or None for the current time) in microseconds."""
    if now is None:
        now = time.time()
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise BadInputError("datetimes must be time-zone aware", field="now")
        delta = now - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return round(float(now) * 1_000_000)


def from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us // 1_000_000, tz=UTC).replace(microsecond=us % 1_000_000)


def _check_text(value: object, field: str, limit: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limit or "\0" in value:
        raise BadInputError(f"must be a string of 1 to {limit} characters without NUL", field=field)
    return value


class _Contender:
    """What both implementations share: checked identity, ttl, and the lifecycle log."""

    def __init__(
        self, name: str, holder: str, ttl: float, *, extra: Mapping[str, str] | None, limits: tuple[int, int]
    ) -> None:
        self._name = _check_text(name, "lease", limits[0])
        self._holder = _check_text(holder, "holder", limits[1])
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
            raise BadInputError("must be > 0", field="ttl")
        self.ttl = float(ttl)
        self.extra: dict[str, Any] = dict(extra or {})
        self.held = False  # what this contender last learned
        # The caller's record of the leases whose acquisition it has logged (see the module
        # docstring); None: every acquisition and release is INFO.
        self.announced: set[str] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def holder(self) -> str:
        return self._holder

    def _until(self, at: int) -> int:
        return at + round(self.ttl * 1_000_000)

    def _observe(self, holds: bool, previous: str | None = None) -> bool:
        seen = self.announced
        if holds and not self.held:
            handed = f" (handed over from {previous})" if previous and previous != self._holder else ""
            routine = not handed and seen is not None and self._name in seen
            if seen is not None:
                seen.add(self._name)
            level = logging.DEBUG if routine else logging.INFO
            log.log(level, "lease %s acquired by %s%s", self._name, self._holder, handed, extra=self.extra)
        elif not holds and self.held:
            if seen is not None:
                seen.discard(self._name)  # the next acquisition is news again
            log.info("lease %s lost by %s", self._name, self._holder, extra=self.extra)
        self.held = holds
        return holds

    def _released(self, released: bool) -> bool:
        if released:
            level = logging.INFO if self.announced is None else logging.DEBUG
            log.log(
                level, "lease %s released by %s (handed over)", self._name, self._holder, extra=self.extra
            )
        self.held = False
        return released


# -- KV -----------------------------------------------------------------------------------------------


class KVLease(_Contender):
    """A lease in one KV record (see the module docstring); prefer :func:`kv_lease`."""

    def __init__(
        self,
        kv: KVStore,
        partition: bytes,
        key: bytes,
        holder: str,
        ttl: float = DEFAULT_TTL,
        *,
        name: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(name or key.decode(errors="replace"), holder, ttl, extra=extra, limits=(1024, 256))
        self._kv = kv
        self._partition = partition
        self._key = key

    def _where(self) -> str:
        return f"kv:{self._partition.decode(errors='replace')}/{self._key.decode(errors='replace')}"

    async def _read(self) -> tuple[tuple[str, int] | None, bytes | None]:
        """``((holder, expires_us) or None when free, raw bytes or None when absent)``."""
        try:
            raw = await self._kv.get(self._partition, self._key)
        except NotFoundError:
            return None, None
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        holder = doc.get("holder") if isinstance(doc, dict) else None
        expires = doc.get("expires_us") if isinstance(doc, dict) else None
        if not isinstance(holder, str) or isinstance(expires, bool) or not isinstance(expires, int):
            raise CorruptDataError(f"lease {self._name!r} is not a lease record", file=self._where())
        return (None if not holder else (holder, expires)), raw

    def _value(self, holder: str, expires_us: int) -> bytes:
        return json.dumps({"holder": holder, "expires_us": expires_us}, sort_keys=True).encode()

    async def _cas(self, value: bytes, raw: bytes | None) -> bool:
        expected = Expect.ABSENT if raw is None else Expect.equals(raw)
        try:
            await self._kv.set_if(self._partition, self._key, value, expected)
        except PreconditionFailedError:
            return False
        return True

    async def try_acquire(self, now: datetime | float | None = None) -> bool:
        at = to_us(now)
        value = self._value(self._holder, self._until(at))
        for _ in range(_ACQUIRE_ATTEMPTS):
            state, raw = await self._read()
            if state is not None and state[0] != self._holder and state[1] > at:
                return self._observe(False)
            if await self._cas(value, raw):
                return self._observe(True, None if state is None else state[0])
        return self._observe(False)  # it kept changing under us: someone else is at it

    async def renew(self, now: datetime | float | None = None) -> bool:
        at = to_us(now)
        state, raw = await self._read()
        if state is None or state[0] != self._holder or state[1] <= at:
            return self._observe(False)
        return self._observe(await self._cas(self._value(self._holder, self._until(at)), raw))

    async def release(self) -> bool:
        state, raw = await self._read()
        if state is None or state[0] != self._holder:
            return self._released(False)
        return self._released(await self._cas(self._value("", 0), raw))

    async def current(self) -> LeaseState | None:
        state, _ = await self._read()
        return None if state is None else LeaseState(self._name, state[0], from_us(state[1]))


def kv_lease(
    kv: KVStore,
    name: str,
    holder: str,
    ttl: float = DEFAULT_TTL,
    *,
    extra: Mapping[str, str] | None = None,
    announced: set[str] | None = None,
) -> KVLease:
    """The lease ``name`` in ``kv``'s lease partition (:func:`lakefs_core.refs.kvkeys.lease_key`);
    ``announced``: the holder's set of leases whose acquisition it logged (see the module docstring)."""
    lease = KVLease(kv, kvkeys.LEASES_PARTITION, kvkeys.lease_key(name), holder, ttl, name=name, extra=extra)
    lease.announced = announced
    return lease

"""Import statuses in the KV, where every server process reads them (lakeFS's ``imports/<id>``).

An import started by one process is reported and cancelled by any other (``--workers N`` sharing a
port, or instances behind a load balancer): its status is an ``ImportStatusData`` record (lakeFS's
protobuf) under ``imports/<id>`` in the repository's partition, so a lakeFS reading the same KV
reads it too. The record is written before the import's id is handed out, then moved only by
compare-and-swap: the process running the import refreshes it (progress, ``updated_at``) every
``import_heartbeat_seconds`` (a setting of the core, lakeFS's 1 s by default) and writes the outcome
at the end; a cancel from anywhere writes lakeFS's ``Canceled`` error into a running record, which
the running process sees at its next refresh and stops the import. A record whose process died stops
being refreshed: read after ``import_stale_seconds`` (default 60 s) without a refresh it is reported
as failed. Every process sharing the KV must use the same two settings. Records older than a day
(lakeFS's ``ImportExpiryTime``) are deleted when the next import of the repository starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from google.protobuf.message import DecodeError

from lakefs_core.errors import ConflictError, CorruptDataError, NotFoundError
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.format.records import timestamp_datetime
from lakefs_core.kv.base import Expect
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Commit, Repository
from lakefs_core.repos.context import HasContext
from lakefs_core.repos.retry import cas_retrying, exhausted_as

EXPIRY: Final = timedelta(hours=24)
MAX_EXPIRED_PER_START: Final = 1000  # bounded work per start; the rest goes at the next ones
MAX_SCANNED_PER_START: Final = 10_000
CANCELED: Final = "Canceled"  # lakeFS's ImportCanceled
STOPPED: Final = "import stopped: the server process running it ended"


@dataclass(frozen=True)
class ImportStatus:
    id: str
    updated_at: datetime
    completed: bool = False
    progress: int = 0
    metarange_id: str = ""
    commit: Commit | None = None
    error: str = ""

    @property
    def running(self) -> bool:
        return not self.completed and not self.error

    def to_bytes(self) -> bytes:
        msg = graveler_pb2.ImportStatusData(
            id=self.id,
            completed=self.completed,
            progress=self.progress,
            metarange_id=self.metarange_id,
            error=self.error,
        )
        msg.updated_at.FromDatetime(self.updated_at)
        if self.commit is not None:
            msg.commit.ParseFromString(self.commit.to_bytes())
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> ImportStatus:
        msg = graveler_pb2.ImportStatusData()
        try:
            msg.ParseFromString(raw)
        except DecodeError as e:
            raise CorruptDataError(f"undecodable ImportStatusData record: {e}", file=where) from e
        commit = Commit.from_bytes(msg.commit.SerializeToString(), where) if msg.HasField("commit") else None
        return cls(
            id=msg.id,
            updated_at=timestamp_datetime(msg.updated_at, "ImportStatusData updated_at", file=where),
            completed=msg.completed,
            progress=msg.progress,
            metarange_id=msg.metarange_id,
            commit=commit,
            error=msg.error,
        )

    def seen_at(self, now: datetime, stale_seconds: float) -> ImportStatus:
        """This status as a reader reports it at ``now``: a running import whose process has not
        refreshed it for ``stale_seconds`` is failed."""
        if self.running and now - self.updated_at > timedelta(seconds=stale_seconds):
            return replace(self, error=STOPPED)
        return self


class ImportStatuses:
    """The import statuses of a :class:`~lakefs_core.repos.graveler.Graveler`'s repositories."""

    def __init__(self, repos: HasContext) -> None:
        self.ctx = repos.context

    @property
    def heartbeat_seconds(self) -> float:
        """How often the process running an import refreshes its status."""
        return self.ctx.settings.import_heartbeat_seconds

    def seen(self, status: ImportStatus) -> ImportStatus:
        """``status`` as every reader reports it now (failed when stale)."""
        return status.seen_at(self.ctx.clock(), self.ctx.settings.import_stale_seconds)

    async def _read(self, repo: Repository, import_id: str) -> tuple[ImportStatus, bytes]:
        key = kvkeys.import_key(import_id)
        try:
            raw = await self.ctx.kv.get(repo.partition, key)
        except NotFoundError:
            raise NotFoundError(f"import {import_id!r} not found in repository {repo.id!r}") from None
        return ImportStatus.from_bytes(raw, f"{repo.id}/{key.decode()}"), raw

    async def create(self, repo_id: str) -> ImportStatus:
        """A new running import's status, stored before its id is handed out (lakeFS #9640)."""
        repo = await self.ctx.repository(repo_id)
        status = ImportStatus(uuid.uuid4().hex, self.ctx.clock())
        await self.ctx.kv.set_if(
            repo.partition, kvkeys.import_key(status.id), status.to_bytes(), Expect.ABSENT
        )
        return status

    async def get(self, repo_id: str, import_id: str) -> ImportStatus:
        repo = await self.ctx.repository(repo_id)
        status, _ = await self._read(repo, import_id)
        return self.seen(status)

    async def update(
        self, repo_id: str, import_id: str, change: Callable[[ImportStatus], ImportStatus | None]
    ) -> ImportStatus:
        """Apply ``change`` to the stored status by compare-and-swap (retried on a concurrent
        write); ``change`` returning None leaves the record as it is. Returns the stored status."""
        repo = await self.ctx.repository(repo_id)
        with exhausted_as(f"import {import_id!r}: its status kept changing"):
            async for attempt in cas_retrying(self.ctx.settings):
                with attempt:
                    current, raw = await self._read(repo, import_id)
                    wanted = change(current)
                    if wanted is None:
                        return current
                    stored = replace(wanted, updated_at=self.ctx.clock())
                    key = kvkeys.import_key(import_id)
                    await self.ctx.kv.set_if(repo.partition, key, stored.to_bytes(), Expect.equals(raw))
        return stored

    async def cancel(self, repo_id: str, import_id: str) -> ImportStatus:
        """Mark a running import canceled (its process stops it at its next refresh);
        :class:`ConflictError` when it has already ended, as lakeFS."""

        def canceled(status: ImportStatus) -> ImportStatus:
            if not self.seen(status).running:
                raise ConflictError(f"import {import_id!r} has already ended")
            return replace(status, error=CANCELED)

        return await self.update(repo_id, import_id, canceled)

    async def expire(self, repo_id: str) -> int:
        """Delete statuses not updated for a day (bounded work: at most :data:`MAX_EXPIRED_PER_START`
        of them among the first :data:`MAX_SCANNED_PER_START` records); how many were deleted."""
        repo = await self.ctx.repository(repo_id)
        cutoff = self.ctx.clock() - EXPIRY
        expired: list[bytes] = []
        scanned = 0
        async for entry in self.ctx.kv.scan(repo.partition, kvkeys.IMPORTS_PREFIX):
            scanned += 1
            if not entry.key.startswith(kvkeys.IMPORTS_PREFIX) or scanned > MAX_SCANNED_PER_START:
                break
            if len(expired) >= MAX_EXPIRED_PER_START:
                break
            try:
                status = ImportStatus.from_bytes(entry.value, f"{repo.id}/{entry.key!r}")
            except CorruptDataError:
                continue  # not ours to judge: left for an operator
            if status.updated_at < cutoff:
                expired.append(entry.key)
        for key in expired:
            await self.ctx.kv.delete(repo.partition, key)
        return len(expired)

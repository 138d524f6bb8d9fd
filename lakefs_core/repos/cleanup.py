"""Asynchronous drop of consumed staging tokens (spec section 7, step 5).

Commits, resets and branch deletions mark the tokens they no longer need in the ``cleanup-tokens``
partition, with the time of marking. :meth:`TokenCleaner.step` drops the partitions of tokens
marked longer ago than the grace period (readers that resolved the branch just before a commit may
still be reading a sealed token), then removes the mark. Marks live in the KV store, so drops that
a crashed or short-lived process did not finish are picked up by the next one. Every mark is
dropped whatever its reason (``committed``, ``discarded`` or an older mark's ``unknown``); removing
a mark also removes its reason record (:meth:`RefStore.unmark_cleanup`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

from lakefs_core.refs.staging import StagingArea
from lakefs_core.refs.store import RefStore


class TokenCleaner:
    def __init__(
        self,
        refs: RefStore,
        staging: StagingArea,
        *,
        grace_seconds: float = 30.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.refs = refs
        self.staging = staging
        self.grace_seconds = grace_seconds
        self.clock = clock
        self.dropped_tokens = 0
        self.dropped_entries = 0

    async def step(self, limit: int | None = None) -> int:
        """Drop every token whose grace period has passed (at most ``limit``); returns how many."""
        now = self.clock().timestamp()
        due = [t async for t, marked in self.refs.pending_cleanup() if now - marked >= self.grace_seconds]
        if limit is not None:
            due = due[:limit]
        for token in due:
            self.dropped_entries += await self.staging.drop(token)
            await self.refs.unmark_cleanup(token)  # only after the drop: a crash retries it
        self.dropped_tokens += len(due)
        return len(due)

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Call :meth:`step` every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            await self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)

"""Small asyncio helpers shared by the I/O layers.

:func:`bounded_each` is the one bounded-concurrency loop: ``limit`` workers share one iterator, so each
item is taken exactly once and at most ``limit`` run at a time; the first failure cancels the other
workers and is raised alone (not as an ``ExceptionGroup``), so callers see one typed error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from lakefs_core.errors import first_exception

__all__ = ["bounded_each"]

T = TypeVar("T")


async def bounded_each(items: Sequence[T], limit: int, fn: Callable[[T], Awaitable[object]]) -> None:
    """Await ``fn(item)`` for every item, at most ``limit`` at a time; the first failure stops the
    rest and is raised."""
    it = iter(items)

    async def worker() -> None:
        for item in it:  # one shared iterator: each item is taken by exactly one worker
            await fn(item)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(limit, len(items))):
                tg.create_task(worker())
    except BaseExceptionGroup as group:
        raise first_exception(group) from None

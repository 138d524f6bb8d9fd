"""Bounded compare-and-swap retry loops (tenacity: exponential backoff with full jitter).

Usage::

    with exhausted_as("branch 'main' kept changing"):
        async for attempt in cas_retrying(settings):
            with attempt:
                ...  # read, compute, set_if; a PreconditionFailedError retries the block

Only :class:`~lakefs_core.errors.PreconditionFailedError` is retried. When the attempts run out it
becomes :class:`~lakefs_core.errors.TooManyRetriesError` with the given message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from lakefs_core.errors import PreconditionFailedError, TooManyRetriesError


class RetrySettings(Protocol):
    @property
    def commit_attempts(self) -> int: ...

    @property
    def backoff_initial(self) -> float: ...

    @property
    def backoff_max(self) -> float: ...


def cas_retrying(settings: RetrySettings) -> AsyncRetrying:
    return AsyncRetrying(
        stop=stop_after_attempt(settings.commit_attempts),
        wait=wait_random_exponential(multiplier=settings.backoff_initial, max=settings.backoff_max),
        retry=retry_if_exception_type(PreconditionFailedError),
        reraise=True,
    )


@contextmanager
def exhausted_as(message: str) -> Iterator[None]:
    try:
        yield
    except PreconditionFailedError as e:
        raise TooManyRetriesError(message) from e

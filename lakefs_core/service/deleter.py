"""The bulk deleter: rate-limited batch deletes with an outcome per key (gc.md §3b; lakeFS #5729).

Used by GC's sweep, the hard-delete reconciler and the mirror's application of GC sweeps; each takes
a :class:`KeyDeleter` (:func:`store_deleter` builds the default one for a store).

:class:`BatchDeleter` ``(store, limiter)`` deletes store keys through the store's ``delete_batch``:

- :meth:`BatchDeleter.delete_keys` takes one group of at most 1,000 keys; :meth:`BatchDeleter.run`
  takes any (async) iterable of keys, groups it in batches of ``batch_size`` and yields one
  :class:`BatchResult` per batch.
- Before each request the limiter is asked for the keys it carries; after it, told whether the backend
  throttled (with its ``Retry-After``). Transient per-key failures are sent again, alone, up to
  ``max_attempts`` requests per batch (with exponential backoff and full jitter between failed
  attempts the backend did not throttle; throttled attempts are paced by the limiter and bounded by
  ``max_throttled``). Final failures (access denied, precondition failed) are not retried.
- Every key given comes back exactly once: in ``deleted`` or in ``failed`` (with its last error code).
  Nothing is dropped: the caller records ``failed`` (:class:`FailedKeysLog`) for the next run.
- Defence in depth: a key with a ``_lakefs`` segment (metadata, ranges, commits, run reports) is
  refused with :class:`~lakefs_core.errors.BadInputError` before its batch is sent, whatever the
  caller checked.
- Errors of a whole request that retrying cannot fix (access denied, no such bucket) propagate.

:class:`FailedKeysLog` keeps the failed keys of a sweep in ONE object (``sweep/failed.text``, one
``<key>\\t<code>`` line each; ``\\``, tab, CR and LF in keys escaped as ``\\\\``, ``\\t``, ``\\r``,
``\\n``), rewritten whole when the unwritten part has grown as large as the written one (so the
rewrites cost O(n) in all) and on :meth:`FailedKeysLog.flush`. It starts from what the file already
holds (a resumed sweep keeps the earlier failures). :func:`read_failed_keys` reads it back (hostile
like every stored file: bounded, strictly parsed) so the next run retries those keys after its own
verification. Sleep, clock and randomness are injectable for tests.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from lakefs_core.block.base import MAX_DELETE_BATCH, BlockStore, DeleteResult, FailedKey
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.keys import TABLES_DIR
from lakefs_core.service.limiter import RateLimiter

MAX_ATTEMPTS = 5
MAX_THROTTLED = 50
MAX_FAILED_BYTES = 256 << 20


@dataclass
class BatchResult:
    """One batch's outcome: every key in ``deleted`` or ``failed``; request and throttle counts."""

    deleted: list[str] = field(default_factory=list)
    failed: list[FailedKey] = field(default_factory=list)
    requests: int = 0
    throttled: int = 0


@dataclass
class DeleterStats:
    """Totals since the deleter was made (for metrics and reports)."""

    keys: int = 0
    deleted: int = 0
    failed: int = 0
    requests: int = 0
    throttled: int = 0
    retried_keys: int = 0


def check_deletable(key: str) -> str:
    """``key`` unless it lies under a ``_lakefs`` directory (never deleted by GC)."""
    if not isinstance(key, str) or not key:
        raise BadInputError("must be a non-empty str", field="keys")
    if TABLES_DIR in key.split("/"):
        raise BadInputError(f"{key!r} is under {TABLES_DIR}/: GC never deletes it", field="keys")
    return key


class BatchDeleter:
    """Deletes keys of ``store`` in batches, paced by ``limiter`` (see the module docstring)."""

    def __init__(
        self,
        store: BlockStore,
        limiter: RateLimiter,
        *,
        batch_size: int = MAX_DELETE_BATCH,
        max_attempts: int = MAX_ATTEMPTS,
        max_throttled: int = MAX_THROTTLED,
        backoff_initial: float = 0.2,
        backoff_max: float = 30.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise BadInputError("must be an integer", field="batch_size")
        if not 1 <= batch_size <= MAX_DELETE_BATCH:
            raise BadInputError(f"must be between 1 and {MAX_DELETE_BATCH}", field="batch_size")
        if max_attempts < 1 or max_throttled < 0:
            raise BadInputError("need at least one attempt", field="max_attempts")
        self.store, self.limiter = store, limiter
        self.batch_size, self.max_attempts, self.max_throttled = batch_size, max_attempts, max_throttled
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.stats = DeleterStats()

    def _backoff(self, failures: int) -> float:
        return self._rng.uniform(0, min(self.backoff_max, self.backoff_initial * 2 ** (failures - 1)))

    async def delete_keys(self, keys: list[str]) -> BatchResult:
        """Delete one group of at most ``batch_size`` keys, retrying transient failures."""
        pending = list(dict.fromkeys(check_deletable(k) for k in keys))
        if len(pending) > self.batch_size:
            raise BadInputError(f"{len(pending)} keys: at most {self.batch_size} per batch", field="keys")
        out, n = BatchResult(), len(pending)
        failures = throttles = 0
        while pending:
            sent_at = await self.limiter.acquire(len(pending))
            result = await self.store.delete_batch(pending)
            out.requests += 1
            if result.throttled:
                out.throttled += 1
                throttles += 1
                self.limiter.on_throttle(result.retry_after, sent_at=sent_at)
            else:
                self.limiter.on_success()
            retry = self._sort(pending, result, out)
            if retry and not result.throttled:
                failures += 1
            if failures >= self.max_attempts or throttles > self.max_throttled:
                out.failed += retry.values()
                retry = {}
            elif retry and not result.throttled:
                await self._sleep(self._backoff(failures))
            self.stats.retried_keys += len(retry)
            pending = list(retry)
        self._count(out, n)
        return out

    @staticmethod
    def _sort(pending: list[str], result: DeleteResult, out: BatchResult) -> dict[str, FailedKey]:
        """Move ``result``'s outcomes for ``pending`` into ``out``; return the keys to send again
        (transient failures, and keys the driver forgot: an unknown outcome is never a delete)."""
        asked = set(pending)
        done = {k for k in result.deleted if k in asked}
        out.deleted += [k for k in pending if k in done]
        failed = {f.key: f for f in result.failed if f.key in asked and f.key not in done}
        out.failed += [f for f in failed.values() if not f.transient]
        retry: dict[str, FailedKey] = {}
        for k in pending:
            if k not in done:
                f = failed.get(k, FailedKey(k, "NoOutcome", True))
                if f.transient:
                    retry[k] = f
        return retry

    def _count(self, out: BatchResult, n: int) -> None:
        s = self.stats
        s.keys += n
        s.deleted += len(out.deleted)
        s.failed += len(out.failed)
        s.requests += out.requests
        s.throttled += out.throttled

    async def run(self, keys: AsyncIterable[str] | Iterable[str]) -> AsyncIterator[BatchResult]:
        """Delete every key of ``keys`` in batches of ``batch_size``; one result per batch."""
        batch: list[str] = []
        async for key in _aiter(keys):
            batch.append(check_deletable(key))
            if len(batch) >= self.batch_size:
                yield await self.delete_keys(batch)
                batch = []
        if batch:
            yield await self.delete_keys(batch)


async def _aiter(keys: AsyncIterable[str] | Iterable[str]) -> AsyncIterator[str]:
    if isinstance(keys, AsyncIterable):
        async for key in keys:
            yield key
    else:
        for key in keys:
            yield key


# -- failed keys -----------------------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\r": "\\r", "\n": "\\n"}
_UNESCAPES = {"\\": "\\", "t": "\t", "r": "\r", "n": "\n"}


def _escape(text: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in text)


def _unescape(text: str, file: str, lineno: int) -> str:
    out: list[str] = []
    it = iter(text)
    for c in it:
        if c != "\\":
            out.append(c)
            continue
        nxt = next(it, "")
        if nxt not in _UNESCAPES:
            raise CorruptDataError(f"line {lineno}: bad escape \\{nxt}", file=file)
        out.append(_UNESCAPES[nxt])
    return "".join(out)


def _line(key: str, code: str) -> str:
    return f"{_escape(key)}\t{_escape(code)}\n"


async def read_failed_keys(store: BlockStore, key: str) -> list[tuple[str, str]]:
    """``(key, code)`` of every line of the failed-keys file ``key`` (``[]`` when it does not exist).

    A file over 256 MiB, bytes that are not UTF-8, a line without exactly one tab, an empty key or a
    bad escape raise :class:`~lakefs_core.errors.CorruptDataError` naming the file."""
    file = f"{store.uri.rstrip('/')}/{key}"
    try:
        raw = await store.get(key, length=MAX_FAILED_BYTES + 1)
    except NotFoundError:
        return []
    if len(raw) > MAX_FAILED_BYTES:
        raise CorruptDataError(f"larger than {MAX_FAILED_BYTES} bytes", file=file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptDataError("not UTF-8", file=file, offset=e.start) from None
    if text and not text.endswith("\n"):
        raise CorruptDataError("truncated (no final newline)", file=file)
    out: list[tuple[str, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0]:
            raise CorruptDataError(f"line {lineno}: not '<key>\\t<code>'", file=file)
        out.append((_unescape(fields[0], file, lineno), _unescape(fields[1], file, lineno)))
    return out


class FailedKeysLog:
    """The failed keys of a sweep, kept in one stored object (see the module docstring).

    Use as ``log = await FailedKeysLog.open(store, key)``; ``await log(failures)`` records
    ``(key, code[, transient])`` tuples (it fits the sweep's ``FailedLog`` callable); ``await
    log.flush()`` at the end writes whatever is not written yet.
    """

    def __init__(self, store: BlockStore, key: str, existing: Iterable[tuple[str, str]] = ()) -> None:
        self.store, self.key = store, key
        self._lines: list[str] = [_line(k, c) for k, c in existing]
        self._written = len(self._lines)

    @classmethod
    async def open(cls, store: BlockStore, key: str) -> FailedKeysLog:
        """The log of ``key``, holding what the stored file already lists."""
        return cls(store, key, await read_failed_keys(store, key))

    def __len__(self) -> int:
        return len(self._lines)

    async def __call__(self, failures: Iterable[tuple[str, str] | FailedKey]) -> None:
        await self.add(failures)

    async def add(self, failures: Iterable[tuple[str, str] | FailedKey]) -> None:
        """Record failures; the file is rewritten once the unwritten part is as large as the rest."""
        for failure in failures:
            k, code = failure[0], failure[1]
            if not isinstance(k, str) or not k or not isinstance(code, str):
                raise BadInputError("failures are (key, code) pairs of strings", field="failures")
            self._lines.append(_line(k, code))
        unwritten = len(self._lines) - self._written
        if unwritten and unwritten >= max(self._written, 1000):
            await self.flush()

    def stored(self) -> bytes:
        """The bytes the stored file holds (as of the last :meth:`flush`); empty when never written."""
        return "".join(self._lines[: self._written]).encode()

    async def flush(self) -> None:
        """Write every recorded line (the whole file, replacing the stored one)."""
        if len(self._lines) == self._written:
            return
        await self.store.put(self.key, "".join(self._lines).encode(), content_type="text/plain")
        self._written = len(self._lines)


class KeyDeleter(Protocol):
    """Deletes one batch of store keys, paced and retrying transient failures itself
    (:class:`lakefs_core.service.deleter.BatchDeleter`); every key comes back deleted or failed."""

    async def delete_keys(self, keys: list[str]) -> BatchResult: ...


UNTHROTTLED_SCHEMES = ("local://", "mem://")  # stores that never answer SlowDown


def store_deleter(store: BlockStore, limiter: RateLimiter | None = None) -> BatchDeleter:
    """The default deleter for ``store``: batches through ``delete_batch``, AIMD-paced on object
    stores. A local or memory store cannot throttle, so its default limiter never holds a batch back
    (the S3 start rate, 500 keys/s, would cap a local sweep 100x below the file system)."""
    if limiter is None and store.uri.startswith(UNTHROTTLED_SCHEMES):
        limiter = RateLimiter(start=1e9, cap=1e9)
    return BatchDeleter(store, limiter or RateLimiter())

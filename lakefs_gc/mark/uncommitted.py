"""Mark step 3: the uncommitted live addresses, collected BEFORE the active commits (gc.md §3a).

Why first: a commit that consumes a staging token while we scan lands in a branch head that the
later commit scan sees; an entry staged after its branch was read points at an object younger than
the cutoff. Scanning staging after the commits would lose an entry committed in between.

Contract:

- :func:`staged_relative` (driver) streams ``Graveler.staged_addresses(repo_id)`` (the latest staged
  value per key on every branch, tokens marked for cleanup skipped) and keeps the addresses inside
  the namespace, normalised by THE normaliser :meth:`StorageNamespace.relative_of`; external
  addresses are dropped (never ours to delete); an unresolvable one raises
  :class:`~lakefs_core.errors.CorruptDataError` (fail closed). Then it streams the address of
  every intent of the repository's hard-delete journal (:meth:`Journal.intent_addresses`: pending,
  stored and not decided yet, or claimed): an upload in flight, or one the reconciler has not
  decided, is never a candidate, whatever ``min_age`` (the reconciler owns those objects). An
  intent written after this scan is of an object PUT after the listing (intents are written
  before their PUT), so never listed; one decided meanwhile was either deleted by the reconciler
  or is in a commit that the later commit scan sees. The re-verification of a sweep calls the
  same function, so it keeps them too.
- :func:`write_uncommitted` writes them as text parts under the run's ``uncommitted/`` directory and
  returns ``(parts, addresses)``; the driver never holds the set.
- :func:`parts_partition` (executor) reads parts back: the right side of the anti-join.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from lakefs_core.compute.partition import StoreRef, stream_async
from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_gc.runs.parts import read_lines, write_parts
from lakefs_gc.runs.record import FileDigest


async def staged_relative(graveler: Graveler, repo_id: str, ns: StorageNamespace) -> AsyncIterator[str]:
    """Relative addresses of every latest staged value of the repository inside ``ns``, then of
    every intent in its hard-delete journal (see the module docstring)."""
    async for branch, address, address_type in graveler.staged_addresses(repo_id):
        try:
            relative = ns.relative_of(address, address_type)
        except BadInputError as e:
            where = f"repository {repo_id!r} branch {branch!r} staging"
            raise CorruptDataError(f"staged address {address[:200]!r}: {e}", file=where) from e
        if relative is not None:
            yield relative
    journal = await graveler.journal(repo_id)
    async for address in journal.intent_addresses():  # relative, as uploads write them
        yield address


async def write_uncommitted(
    graveler: Graveler,
    repo_id: str,
    ns: StorageNamespace,
    directory_key: str,
    *,
    digests: dict[str, FileDigest] | None = None,
) -> tuple[int, int]:
    store = await graveler.namespace_store(ns)
    return await write_parts(store, directory_key, staged_relative(graveler, repo_id, ns), digests=digests)


async def _part_lines(ref: StoreRef, keys: list[str]) -> AsyncIterator[list[str]]:
    store = await ref.open()
    try:
        for key in keys:
            async for batch in read_lines(store, key):
                yield batch
    finally:
        await store.close()


def parts_partition(ref: StoreRef, keys: Iterator[str]) -> Iterator[str]:
    """Executor: every line of the text parts ``keys`` (store keys) of ``ref``'s store."""
    wanted = list(keys)  # part keys: a handful per partition
    for batch in stream_async(lambda: _part_lines(ref, wanted)):
        yield from batch

"""Mark step 2: the deletion candidates of a namespace, listed on the executors (gc.md §3a).

Contract:

- :func:`plan_slices` (driver): the slice ids under ``<ns>/data/`` minus those whose hour starts
  after the cutoff (every object in them is younger than ``min_age``: skipping them saves the listing
  and closes the upload race for whole slices), plus :data:`ROOT`, the namespace root listed
  non-recursively for lakeFS's legacy layout. A directory under ``data/`` whose name is not a slice id
  of ours (a lakeFS slice, say) is listed: the ``mtime`` test below still guards it.
- :func:`candidates_partition` (executor, the same function for the lite and the Spark executor): for
  each item of its partition, the RELATIVE addresses (``data/<slice>/<id>``, or ``<name>`` at the
  root) of the objects whose modification time is strictly before the cutoff. Root objects exclude
  ``dummy`` (lakeFS's probe) and never descend into a directory, so ``_lakefs/`` (ranges, metaranges,
  run reports) is never listed, hence never deleted.

Objects are listed by the core's block stores inside the partition (S3: one client per slice via
:func:`lakefs_gc.mark.slices.list_slice`; a local namespace by ``os.scandir`` on its path).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

from lakefs_core.block import CommonPrefix, ObjectInfo
from lakefs_core.compute.partition import StoreRef, stream_async
from lakefs_core.errors import BadInputError
from lakefs_core.repos.graveler import DUMMY_NAME, slice_hour
from lakefs_gc.mark.slices import list_slice, list_slices

ROOT = ""  # the item that stands for the namespace root (legacy layout)
PAGE = 1000
# A local store's own files beside the objects (temp writes, metadata sidecars): never candidates.
_LOCAL_PRIVATE = (".lakefs-tmp-", ".lakefs-meta")


def plan_slices(ref: StoreRef, cutoff: datetime) -> tuple[list[str], str]:
    """``(items, first slice)``: the slices to list (then :data:`ROOT`) and the first slice listed
    (the newest, as slice ids sort newest first; ``""`` when there is none). Blocking: call it from a
    worker thread."""
    slices = list_slices(ref)
    keep = []
    for slice_id in slices:
        hour = None
        with contextlib.suppress(BadInputError):
            hour = slice_hour(slice_id)
        if hour is not None and hour > cutoff:
            continue  # the whole slice is younger than the cutoff
        keep.append(slice_id)
    return [*keep, ROOT], (slices[0] if slices else "")


async def _root_pages(ref: StoreRef) -> AsyncIterator[list[tuple[str, float]]]:
    prefix = f"{ref.ns.prefix}/" if ref.ns.prefix else ""
    store = await ref.open()
    try:
        page: list[tuple[str, float]] = []
        async for item in store.list(prefix, delimiter="/"):
            if isinstance(item, CommonPrefix) or not isinstance(item, ObjectInfo):
                continue
            name = item.key[len(prefix) :]
            if not name or name == DUMMY_NAME or name.startswith(_LOCAL_PRIVATE) or "/" in name:
                continue
            if item.last_modified is None:
                continue  # no time, no proof of age: never a candidate
            page.append((name, item.last_modified.timestamp()))
            if len(page) >= PAGE:
                yield page
                page = []
        if page:
            yield page
    finally:
        await store.close()


def _root_candidates(ref: StoreRef, cutoff_ts: float) -> Iterator[str]:
    for page in stream_async(lambda: _root_pages(ref)):
        for name, mtime in page:
            if mtime < cutoff_ts:
                yield name


def candidates_partition(ref: StoreRef, cutoff_ts: float, items: Iterator[str]) -> Iterator[str]:
    """Executor: the relative addresses of the objects of ``items`` older than ``cutoff_ts``."""
    for item in items:
        if item == ROOT:
            yield from _root_candidates(ref, cutoff_ts)
            continue
        for row in list_slice(ref, item):
            if row.mtime < cutoff_ts:
                yield row.address

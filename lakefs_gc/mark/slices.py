"""Listing a namespace's data slices: the driver lists slice names, executors list each slice.

- :func:`list_slices` (driver): the slice ids under ``<ns>/data/`` (one delimiter listing: about one
  slice per hour of writes, so the driver holds little).
- :func:`list_slice` (executor): the objects of ONE slice as :class:`Listed` rows ``(address, size,
  mtime)``, ``address`` RELATIVE to the namespace (``data/<slice>/<id>``, the form entries hold).
  It uses the store's ``list_keys`` when the block store has it (a lean listing without ETags); else a
  local namespace is read with ``os.scandir`` + ``stat`` (an order of magnitude faster than the local
  store's ``list``, which reads a sidecar per file) skipping the store's ``.lakefs-tmp-*`` files, and
  any other store with its ``list``. A slice that vanished while we listed is simply empty.
- :func:`list_slices_partition`: the ``flat_map_partitions`` function over slice ids.

On a cluster a local namespace must be mounted at the same path on every executor; the caller probes
``_lakefs/dummy`` first so a missing mount fails fast instead of listing nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from lakefs_core.block import CommonPrefix, ObjectInfo, split_store_uri
from lakefs_core.block.local_files import map_oserror
from lakefs_core.compute.partition import StoreRef, run_async, stream_async
from lakefs_core.errors import CorruptDataError

PAGE = 1000
TMP_PREFIX = ".lakefs-tmp-"  # LocalBlockStore's in-flight writes: never objects


class Listed(NamedTuple):
    address: str  # relative to the namespace: data/<slice>/<id>
    size: int
    mtime: float  # seconds since the epoch


def _mtime(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise CorruptDataError(f"a listing returned no usable modification time ({value!r})")


def list_slices(ref: StoreRef) -> list[str]:
    """The slice ids under ``<ns>/data/`` (driver side), in listing order."""
    prefix = ref.ns.data_prefix()

    async def go() -> list[str]:
        store = await ref.open()
        try:
            out = []
            async for item in store.list(prefix, delimiter="/"):
                if isinstance(item, CommonPrefix):
                    out.append(item.prefix[len(prefix) :].rstrip("/"))
            return out
        finally:
            await store.close()

    return run_async(go)


def _strip(ref: StoreRef) -> int:
    """How many leading characters of a store key are the namespace prefix (and its ``/``)."""
    prefix = ref.ns.prefix
    return len(prefix) + 1 if prefix else 0


def _scan_local(ref: StoreRef, slice_id: str) -> Iterator[Listed]:
    root = Path(split_store_uri(ref.ns.store_uri)[1])
    key_prefix = ref.ns.slice_prefix(slice_id)
    directory = root / key_prefix
    relative_prefix = key_prefix[_strip(ref) :]
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        return  # the slice is gone (or never was): nothing to list
    except OSError as e:
        raise map_oserror(e, f"{ref.namespace}/{key_prefix}", reading=True) from e
    with entries:
        for entry in entries:
            if entry.name.startswith(TMP_PREFIX):
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted while we listed
            except OSError as e:
                raise map_oserror(e, entry.path, reading=True) from e
            yield Listed(relative_prefix + entry.name, st.st_size, st.st_mtime)


async def _pages(ref: StoreRef, slice_id: str) -> AsyncIterator[list[Listed]]:
    prefix = ref.ns.slice_prefix(slice_id)
    strip = _strip(ref)
    store = await ref.open()
    try:
        page: list[Listed] = []
        list_keys = getattr(store, "list_keys", None)
        if list_keys is not None:
            async for info in list_keys(prefix):
                page.append(Listed(info.key[strip:], int(info.size), _mtime(info.mtime)))
                if len(page) >= PAGE:
                    yield page
                    page = []
        else:
            async for item in store.list(prefix):
                if isinstance(item, ObjectInfo):
                    page.append(Listed(item.key[strip:], item.size, _mtime(item.last_modified)))
                    if len(page) >= PAGE:
                        yield page
                        page = []
        if page:
            yield page
    finally:
        await store.close()


def list_slice(ref: StoreRef, slice_id: str) -> Iterator[Listed]:
    """The objects of one slice (executor side), streamed."""
    if ref.ns.scheme == "local" and not _has_list_keys(ref):
        yield from _scan_local(ref, slice_id)
        return
    for page in stream_async(lambda: _pages(ref, slice_id)):
        yield from page


def _has_list_keys(ref: StoreRef) -> bool:
    from lakefs_core.block import LocalBlockStore

    return hasattr(LocalBlockStore, "list_keys") and ref.ns.scheme == "local"


def list_slices_partition(ref: StoreRef, slice_ids: Iterator[str]) -> Iterator[Listed]:
    """``flat_map_partitions`` function: every object of every slice in the partition."""
    for slice_id in slice_ids:
        yield from list_slice(ref, slice_id)

"""The values object operations (:class:`~lakefs_core.repos.objects.Objects`) take and return.

An :class:`ObjectStat` is an entry as a reader sees it (decoded from its staged or committed record,
or built with the record by :func:`new_entry`, from the same fields); :class:`UploadItem` and
:class:`BlockingBody` are what a batch upload is given; :class:`StagedAddress` is an address issued
for a client to write itself; :class:`ListPage` is one page of a listing. Immutable values, no I/O;
:mod:`lakefs_core.repos.objects` re-exports them (their public import path).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import (
    ADDRESS_RELATIVE,
    ValueRecord,
    decode_entry,
    entry_last_modified,
    make_entry,
)

Body = bytes | AsyncIterable[bytes]


@dataclass(frozen=True)
class BlockingBody:
    """A small body read whole by a blocking callable (a local file's ``read_bytes``), called in a
    worker thread only when its object is written: the store writes such items in batches
    (:meth:`~lakefs_core.block.base.BlockStore.put_batch`), one thread hop and one sync per batch
    on a local namespace. The callable raises its own typed error."""

    read: Callable[[], bytes]


@dataclass(frozen=True)
class UploadItem:
    """One object of :meth:`Objects.upload_many`; ``body`` may be a coroutine function opening it
    only when its PUT starts, or a :class:`BlockingBody` (so a batch never holds every body at once)."""

    path: str
    body: Body | BlockingBody | Callable[[], Awaitable[Body]]
    content_type: str | None = None
    metadata: Mapping[str, str] | None = None


@dataclass(frozen=True)
class ObjectStat:
    path: str
    physical_address: str
    address_type: str  # RELATIVE | FULL
    size: int
    etag: str
    content_type: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    last_modified: datetime | None = None

    @classmethod
    def from_record(cls, record: ValueRecord) -> ObjectStat:
        entry = decode_entry(record.data)
        return cls(
            path=record.key.decode("utf-8", "backslashreplace"),
            physical_address=entry.address,
            address_type=_ADDRESS_TYPE_NAMES[entry.address_type],  # checked by decode_entry
            size=entry.size,
            etag=entry.e_tag,
            content_type=entry.content_type,
            metadata=dict(entry.metadata) if entry.metadata else {},
            last_modified=entry_last_modified(entry),
        )


_ADDRESS_TYPE_NAMES = {number: name for name, number in catalog_pb2.Entry.AddressType.items()}


@dataclass(frozen=True)
class StagedAddress:
    """An address issued for a client to write itself (:meth:`Objects.stage_address`)."""

    relative: str
    full_address: str
    store: BlockStore
    key: str  # the store key of ``relative``


@dataclass(frozen=True)
class ListPage:
    objects: list[ObjectStat]
    common_prefixes: list[str]
    has_more: bool
    next_after: str  # pass as ``after`` to continue


def new_entry(
    key: bytes, relative: str, info: ObjectInfo, metadata: Mapping[str, str] | None, when: datetime
) -> tuple[ValueRecord, ObjectStat]:
    """The staged record of an object just stored at ``relative``, and what
    :meth:`ObjectStat.from_record` would return for it, built from the same fields instead of
    decoding the entry again (a decode and a pure-Python timestamp conversion per uploaded object)."""
    content_type = info.content_type or ""
    identity, data = make_entry(  # copies the metadata it is given
        relative,
        info.size,
        info.etag,
        last_modified=when,
        metadata=metadata,
        content_type=content_type,
        address_type=ADDRESS_RELATIVE,
    )
    stat = ObjectStat(
        path=key.decode("utf-8", "backslashreplace"),
        physical_address=relative,
        address_type="RELATIVE",
        size=info.size,
        etag=info.etag,
        content_type=content_type,
        metadata=dict(metadata or {}),
        last_modified=when.astimezone(UTC),  # the entry keeps the instant; from_record reads it as UTC
    )
    return ValueRecord(key, identity, data), stat

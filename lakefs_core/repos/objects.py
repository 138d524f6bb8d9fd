"""Objects: bytes in the storage namespace, described by staged and committed entries.

Upload streams the body to a brand-new physical address ``<ns>/data/<slice>/<id>`` (create-only,
so an address is never reused), then stages an ``Entry`` (size, ETag, content type, user metadata,
last modified) for the path. The entry bytes are produced once here and carried verbatim into ranges
by commits. Reads resolve the entry (staging over committed) and stream its address, RELATIVE to
the namespace or FULL. Listing supports a prefix, a delimiter (common prefixes are skipped by
re-seeking, not by reading every key under them) and pagination with an ``after`` cursor.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import BadInputError, NotFoundError
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import ADDRESS_RELATIVE, ValueRecord, decode_entry, make_entry
from lakefs_core.keys import SliceAllocator, StorageNamespace
from lakefs_core.refs.model import Repository
from lakefs_core.repos.graveler import Graveler

MAX_LIST_AMOUNT = 10_000


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
            address_type=catalog_pb2.Entry.AddressType.Name(entry.address_type),
            size=entry.size,
            etag=entry.e_tag,
            content_type=entry.content_type,
            metadata=dict(entry.metadata),
            last_modified=(
                entry.last_modified.ToDatetime(tzinfo=UTC) if entry.HasField("last_modified") else None
            ),
        )


@dataclass(frozen=True)
class ListPage:
    objects: list[ObjectStat]
    common_prefixes: list[str]
    has_more: bool
    next_after: str  # pass as ``after`` to continue


def _path_bytes(path: str) -> bytes:
    if not path or path.startswith("/"):
        raise BadInputError("object paths are non-empty and relative (no leading '/')", field="path")
    return path.encode()


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class Objects:
    """Object operations of a :class:`Graveler`."""

    def __init__(self, graveler: Graveler) -> None:
        self.g = graveler
        self.slices = SliceAllocator()

    async def _namespace(self, repo: Repository) -> tuple[StorageNamespace, BlockStore]:
        ns = StorageNamespace.parse(repo.storage_namespace)
        return ns, await self.g.stores.namespace_store(ns)

    async def upload(
        self,
        repo_id: str,
        branch: str,
        path: str,
        body: bytes | AsyncIterable[bytes],
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        force: bool = False,
    ) -> ObjectStat:
        key = _path_bytes(path)
        repo = await self.g.repository(repo_id)
        self.g.writable(repo, force)
        await self.g.refs.get_branch(repo, branch)  # fail before writing bytes for an unknown branch
        ns, store = await self._namespace(repo)
        relative = self.slices.new_relative_address()
        info = await store.put(
            ns.key(relative), body, if_none_match=True, content_type=content_type, metadata=metadata
        )
        identity, data = make_entry(
            relative,
            info.size,
            info.etag,
            last_modified=info.last_modified or self.g.clock(),
            metadata=dict(metadata or {}),
            content_type=info.content_type or "",
            address_type=ADDRESS_RELATIVE,
        )
        record = ValueRecord(key, identity, data)
        await self.g.set_entry(repo_id, branch, record, force=force)
        return ObjectStat.from_record(record)

    async def stat(self, repo_id: str, ref: str, path: str) -> ObjectStat:
        return ObjectStat.from_record(await self.g.get_entry(repo_id, ref, _path_bytes(path)))

    async def read(
        self, repo_id: str, ref: str, path: str, *, start: int = 0, length: int | None = None
    ) -> AsyncIterator[bytes]:
        """Stream the object's bytes (a byte range when ``start``/``length`` are given)."""
        repo = await self.g.repository(repo_id)
        record = await self.g.get_entry(repo_id, ref, _path_bytes(path))
        entry = decode_entry(record.data)
        ns = StorageNamespace.parse(repo.storage_namespace)
        store_uri, key = ns.address_key(entry.address, entry.address_type)
        store = await self.g.stores.block_store(store_uri)
        try:
            async for chunk in store.stream(key, start=start, length=length):
                yield chunk
        except NotFoundError as e:
            raise NotFoundError(f"data of {path!r} is missing at {entry.address}") from e

    async def read_all(self, repo_id: str, ref: str, path: str) -> bytes:
        return b"".join([chunk async for chunk in self.read(repo_id, ref, path)])

    async def delete(self, repo_id: str, branch: str, path: str, *, force: bool = False) -> None:
        await self.g.delete_entry(repo_id, branch, _path_bytes(path), force=force)

    async def list(
        self,
        repo_id: str,
        ref: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        after: str = "",
        amount: int = 1000,
    ) -> ListPage:
        if not 1 <= amount <= MAX_LIST_AMOUNT:
            raise BadInputError(f"must be between 1 and {MAX_LIST_AMOUNT}", field="amount")
        pfx, delim = prefix.encode(), delimiter.encode()
        objects: list[ObjectStat] = []
        prefixes: list[str] = []
        start = b""
        last = after.encode()
        if delim and last.endswith(delim) and last.startswith(pfx) and len(last) > len(pfx):
            # The cursor is a common prefix from the previous page: continue after all of it.
            successor = prefix_successor(last)
            if successor is None:
                return ListPage([], [], False, "")
            start = successor
        while True:
            restart: bytes | None = None
            async for record in self.g.list_entries(repo_id, ref, prefix=pfx, after=last, start=start):
                if len(objects) + len(prefixes) == amount:
                    return ListPage(objects, prefixes, True, last.decode("utf-8", "backslashreplace"))
                cut = record.key.find(delim, len(pfx)) if delim else -1
                if cut < 0:
                    objects.append(ObjectStat.from_record(record))
                    last = record.key
                    continue
                common = record.key[: cut + len(delim)]
                prefixes.append(common.decode("utf-8", "backslashreplace"))
                last = common
                restart = prefix_successor(common)
                break
            else:
                return ListPage(objects, prefixes, False, "")
            if restart is None:
                return ListPage(objects, prefixes, False, "")
            start = restart

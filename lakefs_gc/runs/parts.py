"""Text part files of a GC run: ``<dir>/part-NNNNN``, one item per line (addresses, table ids).

Contract:

- Executors write parts through :meth:`~lakefs_core.compute.executor.Dataset.write_text_parts` (one part
  per partition, deterministic names); the driver writes its own streams with :func:`write_parts`
  (bounded memory: at most ``part_bytes`` buffered, then one create-only ``put`` per part).
- :func:`list_parts` lists a directory's parts in name order; anything else there is ignored.
- :func:`read_lines` streams one part's lines. Parts are hostile like every stored file: a line longer
  than :data:`MAX_LINE` bytes, bytes that are not UTF-8, a control character or a missing final newline
  raise :class:`~lakefs_core.errors.CorruptDataError` naming the file (a truncated part must stop a
  run, never shrink a live set).
- :func:`ns_relative` turns a store key below a namespace (from :mod:`lakefs_core.keys`) into the
  namespace-relative path the executors' part writer takes. Nothing here formats a key.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator

from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.repos.graveler import StorageNamespace
from lakefs_gc.runs.record import Digester, FileDigest, digest_of

MAX_LINE = 4096  # an address or table id; lakeFS's physical addresses are far shorter
PART_BYTES = 16 << 20
_PART = re.compile(r"part-\d{5,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def ns_relative(ns: StorageNamespace, key: str) -> str:
    """The namespace-relative path of ``key`` (a store key below ``ns``)."""
    if not ns.prefix:
        return key
    if not key.startswith(ns.prefix + "/"):
        raise BadInputError(f"{key!r} is not below the namespace {ns.uri}", field="key")
    return key[len(ns.prefix) + 1 :]


def file_name(store: BlockStore, key: str) -> str:
    """How errors name a stored file: ``<store uri>/<key>``."""
    return f"{store.uri.rstrip('/')}/{key}"


async def list_parts(store: BlockStore, directory_key: str) -> list[str]:
    """The keys of ``<directory_key>/part-*`` in name order."""
    prefix = directory_key.rstrip("/") + "/"
    keys = [
        item.key
        async for item in store.list(prefix)
        if isinstance(item, ObjectInfo) and _PART.fullmatch(item.key[len(prefix) :])
    ]
    return sorted(keys)


async def read_lines(
    store: BlockStore, key: str, *, digester: Digester | None = None
) -> AsyncIterator[list[str]]:
    """The lines of one part, in batches (one batch per stored chunk); the bytes read are fed to
    ``digester`` when given (a reader checks a digest on the very bytes it acted on)."""
    file = file_name(store, key)
    pending = b""
    lineno = 0
    async for chunk in store.stream(key):
        if digester is not None:
            digester.update(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE:
            raise CorruptDataError(f"line {lineno + len(lines) + 1} longer than {MAX_LINE} bytes", file=file)
        batch = []
        for raw in lines:
            lineno += 1
            batch.append(_decode(raw, file, lineno))
        if batch:
            yield batch
    if pending:
        raise CorruptDataError(f"line {lineno + 1} is truncated (no final newline)", file=file)


def _decode(raw: bytes, file: str, lineno: int) -> str:
    if len(raw) > MAX_LINE:
        raise CorruptDataError(f"line {lineno} longer than {MAX_LINE} bytes", file=file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptDataError(f"line {lineno} is not UTF-8", file=file) from e
    if not text or _CONTROL.search(text):
        raise CorruptDataError(f"line {lineno} is empty or holds a control character", file=file)
    return text


async def write_parts(
    store: BlockStore,
    directory_key: str,
    lines: AsyncIterable[str],
    *,
    part_bytes: int = PART_BYTES,
    digests: dict[str, FileDigest] | None = None,
) -> tuple[int, int]:
    """Write ``lines`` as ``<directory_key>/part-00000``, ``part-00001``... (create-only; at least
    one part, possibly empty, so a reader can tell "none" from "not written"). Returns
    ``(parts, lines)``; each part's digest goes to ``digests`` (by key) when given."""
    prefix = directory_key.rstrip("/") + "/"
    buf: list[bytes] = []
    size = parts = count = 0

    async def flush() -> None:
        nonlocal buf, size, parts
        key, data = f"{prefix}part-{parts:05d}", b"".join(buf)
        await store.put(key, data, if_none_match=True, content_type="text/plain")
        if digests is not None:
            digests[key] = digest_of(data)
        parts += 1
        buf, size = [], 0

    async for line in lines:
        data = line.encode()
        if not data or len(data) > MAX_LINE or _CONTROL.search(line):
            raise BadInputError(f"{line[:80]!r} is not a storable line", field="line")
        buf.append(data + b"\n")
        size += len(data) + 1
        count += 1
        if size >= part_bytes:
            await flush()
    if buf or parts == 0:
        await flush()
    return parts, count

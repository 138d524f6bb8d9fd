"""Content-derived identifiers of lakeFS objects (spec section 4).

- :func:`entry_identity`: raw 32-byte SHA-256 of ``Int64(size) || String(etag) ||
  StringMap(metadata) || [String(content_type) if non-empty]``. Address, last_modified and
  address_type are deliberately not hashed: two uploads of the same content are the same entry.
- :class:`TableIdHasher` / :func:`table_id`: the id (and file name) of a range or metarange:
  lowercase hex SHA-256 over, per record in order, ``str(len(key)) key "|" str(len(value)) value "|"``
  (value = the full envelope), then ``StringMap(props)`` of the user properties as they were *before*
  the writer added min_key, max_key, count and estimated_size_bytes (for ordinary tables just
  ``{"type": "ranges"}`` or ``{"type": "metaranges"}``).
- :func:`commit_id`: lowercase hex SHA-256 of ``String("commit:v1") String(committer)
  String(message) String(metarange_id) Int64(creation unix seconds) StringMap(metadata)
  Embedded(parents)``, the parents' identity being the raw SHA-256 of ``StringSlice(parent ids)``.
  Version and generation are not hashed.

Pure: no I/O. Invalid arguments raise :class:`~lakefs_core.errors.BadInputError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from lakefs_core.errors import BadInputError
from lakefs_core.format.ident import IdentHasher, plain_entry_digest

COMMIT_ID_VERSION_TAG = "commit:v1"

# Property names the table writer adds after the id's props snapshot; excluded from the id.
DERIVED_TABLE_PROPS = frozenset({"min_key", "max_key", "count", "estimated_size_bytes"})

# Record input reaches SHA-256 in chunks of this size: one call per chunk instead of per record.
_CHUNK = 65536

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


def entry_identity(
    size: int, etag: str, metadata: Mapping[str, str | bytes] | None = None, content_type: str = ""
) -> bytes:
    """The raw 32-byte identity of an entry (the identity part of its range record)."""
    if size < 0:
        raise BadInputError("must be >= 0", field="size")
    if not metadata:
        return plain_entry_digest(size, etag, content_type)
    h = IdentHasher().int64(size).string(etag).string_map(metadata)
    if content_type:
        h.string(content_type)
    return h.digest()


class TableIdHasher:
    """Incremental range/metarange id: feed each record as it is written, then :meth:`finish`.

    ``value`` is the full SST value (the envelope), exactly as stored. ``finish`` may be called once.
    Record inputs collect in :attr:`pending` and reach SHA-256 in chunks (:meth:`feed`); a writer
    that formats the input itself (``TableWriter.add_record``) appends to :attr:`pending` and
    calls :meth:`feed` directly, and then keeps its own count.
    """

    __slots__ = ("_count", "_h", "pending")

    def __init__(self) -> None:
        self._h: IdentHasher | None = IdentHasher()
        self._count = 0
        self.pending = bytearray()

    @property
    def count(self) -> int:
        """Number of records added through :meth:`add`."""
        return self._count

    def add(self, key: bytes, value: bytes) -> None:
        if self._h is None:
            raise BadInputError("table id already finished", field="key")
        pending = self.pending
        pending += b"%d%b|%d%b|" % (len(key), key, len(value), value)
        self._count += 1
        if len(pending) >= _CHUNK:
            self.feed(pending)
            pending.clear()

    def feed(self, chunk: bytes | bytearray) -> None:
        """Hash ``chunk`` of formatted record input now (the caller empties it afterwards)."""
        h = self._h
        if h is None:
            raise BadInputError("table id already finished", field="key")
        h.raw(chunk)

    def finish(self, props: Mapping[str, str | bytes]) -> str:
        """The hex id. ``props`` are the user properties before the derived ones are added.

        Passing a derived property (min_key, max_key, count, estimated_size_bytes) is refused: lakeFS
        hashes the map before adding them, so including them would silently change the id.
        """
        h = self._h
        if h is None:
            raise BadInputError("table id already finished", field="props")
        derived = DERIVED_TABLE_PROPS.intersection(props)
        if derived:
            raise BadInputError(f"derived properties must not be hashed: {sorted(derived)}", field="props")
        self._h = None
        h.raw(self.pending)
        self.pending = bytearray()
        return h.string_map(props).hexdigest()


def table_id(records: Iterable[tuple[bytes, bytes]], props: Mapping[str, str | bytes]) -> str:
    """The id of a table holding ``records`` (key, full SST value) in order with user ``props``."""
    hasher = TableIdHasher()
    for key, value in records:
        hasher.add(key, value)
    return hasher.finish(props)


def unix_seconds(when: datetime | int) -> int:
    """Whole unix seconds, floored like Go's ``time.Time.Unix``. Naive datetimes are refused."""
    if isinstance(when, bool):
        raise BadInputError("must be a datetime or int seconds", field="creation_date")
    if isinstance(when, int):
        return when
    if when.tzinfo is None or when.utcoffset() is None:
        raise BadInputError("must be timezone-aware", field="creation_date")
    # timedelta floor division is exact (no float rounding) and floors before 1970 like Go.
    return (when - _EPOCH) // _SECOND


def commit_id(
    *,
    committer: str,
    message: str,
    metarange_id: str,
    creation_date: datetime | int,
    metadata: Mapping[str, str | bytes] | None = None,
    parents: Sequence[str] = (),
) -> str:
    """The hex id of a commit. ``creation_date`` is a timezone-aware datetime or unix seconds.

    The first commit of a repository has no parents and an empty ``metarange_id``.
    """
    if isinstance(parents, str | bytes):
        # A lone id would be hashed as a slice of characters: always a caller bug.
        raise BadInputError("must be a sequence of commit ids, not a string", field="parents")
    parents_identity = IdentHasher().string_slice(parents).digest()
    return (
        IdentHasher()
        .string(COMMIT_ID_VERSION_TAG)
        .string(committer)
        .string(message)
        .string(metarange_id)
        .int64(unix_seconds(creation_date))
        .string_map(metadata or {})
        .embedded(parents_identity)
        .hexdigest()
    )

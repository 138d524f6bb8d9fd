"""THE mapping from ids to object keys (spec section 1). No other module formats object keys.

Keys here are RELATIVE to a repository's storage namespace; :class:`lakefs_core.namespace.StorageNamespace`
joins them to the namespace's prefix in its store (``<ns>`` below; keys never start with ``/``):

- data objects: ``<ns>/data/<slice>/<object id>``, addressed in entries by the RELATIVE address
  ``data/<slice>/<object id>`` (:func:`relative_address`; :func:`slice_dir` lists one slice);
- ranges and metaranges, flat: ``<ns>/_lakefs/<table id>`` (:func:`table_name`);
- the writability probe ``<ns>/_lakefs/dummy`` (:data:`DUMMY_PATH`) and a daemon's short-lived probes
  ``<ns>/_lakefs/probe-<token>`` (:func:`probe_name`);
- lakefs-server's multipart parts ``<ns>/_lakefs/multipart/<upload>/<part>-<token>``
  (:func:`multipart_part_name`);
- lakeFS's GC rules ``<ns>/_lakefs/retention/gc/rules/config.json`` (:data:`GC_RULES_PATH`);
- GC runs ``<ns>/_lakefs/retention/gc/unified/<run>/...`` (:func:`gc_run_path`, listed under
  :data:`GC_RUNS_DIR`) and their active commits ``<ns>/_lakefs/retention/gc/commits/run_id=<run>/commits.csv``
  (:func:`gc_commits_path`); run ids come from a :class:`RunIds` (one per clock; :func:`new_run_id`
  is the wall clock's).

:class:`AddressType` says how an entry's address is read (RELATIVE, FULL, the deprecated by-prefix).

Ids:

- :func:`new_slice_id` -> 10 characters of base32hex (``0-9a-v``): 7 encode the hours from ``now`` to
  the year 4000 (so a newer hour sorts FIRST), 3 encode ``32767 - seq`` (so within the hour a later
  roll sorts first). All writers share the slice of an hour; :class:`SliceAllocator` also rolls after
  50,000 objects as lakeFS does.
- :func:`new_object_id` -> 26 characters of base32hex: 48 bits of milliseconds since the epoch, then 80
  random bits from :func:`os.urandom`. Unique without coordination (never reused), URL- and path-safe,
  lower case only, so safe on case-insensitive filesystems.

Everything here is pure: no I/O. Bad input raises :class:`~lakefs_core.errors.BadInputError`.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from enum import IntEnum

from lakefs_core.errors import BadInputError

DATA_DIR = "data"
TABLES_DIR = "_lakefs"
DUMMY_NAME = "dummy"
SLICE_MAX_OBJECTS = 50_000
MAX_LOCAL_PATH_BYTES = 4096  # PATH_MAX: a longer local path names nothing the OS can open

_B32HEX = "0123456789abcdefghijklmnopqrstuv"

_END_OF_TIME_HOURS = int(datetime(4000, 1, 1, tzinfo=UTC).timestamp()) // 3600
_SLICE_HOUR_DIGITS = 7
_SLICE_SEQ_DIGITS = 3
SLICE_MAX_SEQ = 32**_SLICE_SEQ_DIGITS - 1
# A writer starts each hour at a random sequence number below this (see SliceAllocator), leaving
# half the range for its rolls.
SLICE_FIRST_SEQS: int = (SLICE_MAX_SEQ + 1) // 2


class AddressType(IntEnum):
    """How an entry's address is to be read (same numbers as the ``Entry.AddressType`` protobuf enum)."""

    BY_PREFIX_DEPRECATED = 0
    RELATIVE = 1
    FULL = 2


def _segment(value: object, field_name: str) -> str:
    """One key segment: a non-empty str without ``/``, not ``.``/``..``, no NUL."""
    if not isinstance(value, str) or not value:
        raise BadInputError("must be a non-empty str", field=field_name)
    if "/" in value or "\0" in value or value in (".", ".."):
        raise BadInputError(f"{value!r} is not a single key segment", field=field_name)
    return value


def relative_address(slice_id: str, object_id: str) -> str:
    """The RELATIVE address of a data object: ``data/<slice>/<id>``."""
    return f"{DATA_DIR}/{_segment(slice_id, 'slice_id')}/{_segment(object_id, 'object_id')}"


DUMMY_PATH = f"{TABLES_DIR}/{DUMMY_NAME}"
TABLES_PREFIX = f"{TABLES_DIR}/"
DATA_PREFIX = f"{DATA_DIR}/"


def probe_name(token: str) -> str:
    """``_lakefs/probe-<token>``: a short-lived object a daemon writes, reads back and deletes to check
    that it may use the namespace (never ``dummy``, which belongs to the repository)."""
    return f"{TABLES_DIR}/probe-{_segment(token, 'token')}"


MULTIPART_DIR = f"{TABLES_DIR}/multipart"


def multipart_part_name(upload_id: str, part_number: int, token: str) -> str:
    """``_lakefs/multipart/<upload>/<part:05d>-<token>``: one part of an S3 multipart upload (lakefs-server);
    a re-uploaded part gets a new token, so a part object is never overwritten. Under ``_lakefs/``,
    never ``data/``: GC never lists them; the server deletes them on completion, abort or expiry."""
    if not 1 <= part_number <= 10_000:
        raise BadInputError("must be between 1 and 10000", field="partNumber")
    return f"{multipart_dir(upload_id)}{part_number:05d}-{_segment(token, 'token')}"


def multipart_dir(upload_id: str) -> str:
    """``_lakefs/multipart/<upload>/``: every part object of one multipart upload is below it."""
    return f"{MULTIPART_DIR}/{_segment(upload_id, 'uploadId')}/"


def slice_dir(slice_id: str) -> str:
    """``data/<slice>/``: the data objects of one slice are below it (GC listing)."""
    return f"{DATA_DIR}/{_segment(slice_id, 'slice_id')}/"


# -- ids ----------------------------------------------------------------------------------------------


def _b32hex(value: int, digits: int) -> str:
    out = []
    for _ in range(digits):
        value, r = divmod(value, 32)
        out.append(_B32HEX[r])
    if value:
        raise BadInputError(f"does not fit in {digits} base32hex digits", field="id")
    return "".join(reversed(out))


def new_slice_id(now: datetime | None = None, *, seq: int = 0) -> str:
    """The slice id for the hour of ``now`` (aware datetime; default: the current time) and roll ``seq``.

    Newer hours sort first; within one hour a higher ``seq`` sorts first. Deterministic: every writer
    gets the same id for the same hour and ``seq``.
    """
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise BadInputError("must be a timezone-aware datetime", field="now")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= SLICE_MAX_SEQ:
        raise BadInputError(f"must be an integer in [0, {SLICE_MAX_SEQ}]", field="seq")
    hours = int(now.timestamp() // 3600)
    remaining = _END_OF_TIME_HOURS - hours
    if remaining <= 0:
        raise BadInputError("must be before the year 4000", field="now")
    return _b32hex(remaining, _SLICE_HOUR_DIGITS) + _b32hex(SLICE_MAX_SEQ - seq, _SLICE_SEQ_DIGITS)


def new_object_id() -> str:
    """A fresh unique object id (26 chars of ``[0-9a-v]``: ms timestamp + 80 random bits)."""
    return new_object_ids(1)[0]


def new_object_ids(n: int) -> list[str]:
    """``n`` fresh object ids as :func:`new_object_id` makes them, with one clock read and one
    ``os.urandom`` call for all (a batch upload allocates one per object)."""
    millis = (int(datetime.now(UTC).timestamp() * 1000) & ((1 << 48) - 1)).to_bytes(6, "big")
    return encode_object_ids(millis, os.urandom(10 * n))


# base32hex of one byte that ends a 16-byte id: its top five bits, then its low three and two zero bits
_LAST_BYTE = tuple(_B32HEX[b >> 3] + _B32HEX[(b & 7) << 2] for b in range(256))


def encode_object_ids(millis: bytes, noise: bytes) -> list[str]:
    """One id per 10 bytes of ``noise``: lowercase unpadded base32hex of ``millis + noise[i:i+10]``
    (16 bytes, 26 characters). The first 15 bytes of every id are encoded in ONE call (whole 5-byte
    groups, so the text splits into 24 characters per id), the 16th by table: ``b32hexencode`` is
    pure Python, and a call per id cost most of the allocation of a batch."""
    if len(millis) != 6 or len(noise) % 10:
        raise BadInputError("must be 6 bytes of time and 10 of noise per id", field="noise")
    head = b"".join([millis + noise[i : i + 9] for i in range(0, len(noise), 10)])
    text = base64.b32hexencode(head).decode("ascii").lower()
    return [text[j * 24 : j * 24 + 24] + _LAST_BYTE[noise[j * 10 + 9]] for j in range(len(noise) // 10)]


def random_first_seq() -> int:
    """A sequence number to start an hour's slices at: uniform in ``[0, SLICE_FIRST_SEQS)``."""
    return int.from_bytes(os.urandom(2), "big") % SLICE_FIRST_SEQS  # 2**16 is a multiple of it


class SliceAllocator:
    """Hands out slice ids: a new slice each hour, and after every ``max_objects`` objects within it.

    Each hour starts at a sequence number of its own (``first_seq()``, by default
    :func:`random_first_seq`), so that writers in the same hour (every ``lakefs-core`` command is
    a process with its own allocator) use different slices, as lakeFS's servers do (each makes
    its own xid prefix). With one shared slice per hour, a local namespace got one directory for
    every upload of the hour (creating a file took 131 us in a directory of 95,000 entries against
    32 us in a new one) and a bucket one key prefix for all of them (S3 scales request rates per
    prefix). A writer's later slices still sort before its earlier ones, and the hour is in every id.

    Thread-safe. ``clock`` returns an aware datetime; ``first_seq`` is for tests.
    """

    def __init__(
        self,
        max_objects: int = SLICE_MAX_OBJECTS,
        clock: Callable[[], datetime] | None = None,
        first_seq: Callable[[], int] = random_first_seq,
    ) -> None:
        if not isinstance(max_objects, int) or isinstance(max_objects, bool) or max_objects < 1:
            raise BadInputError("must be a positive integer", field="max_objects")
        self._max = max_objects
        self._clock = clock or (lambda: datetime.now(UTC))
        self._first_seq = first_seq
        self._lock = threading.Lock()
        self._hour: int | None = None
        self._seq = 0
        self._count = 0
        self._slice: tuple[tuple[int, int], str] | None = None  # the last id made, by (hour, seq)

    def next_slice(self) -> str:
        """The slice for the next object."""
        return self.next_slices(1)[0]

    def next_slices(self, n: int) -> list[str]:
        """The slices of the next ``n`` objects, as ``n`` calls of :meth:`next_slice` at one instant
        would give them (one clock read and one lock for a batch)."""
        if n <= 0:
            return []
        now = self._clock()
        out: list[str] = []
        with self._lock:
            hour = int(now.timestamp() // 3600)
            if hour != self._hour:
                self._hour, self._seq, self._count = hour, self._first_seq(), 0
            while len(out) < n:
                if self._count >= self._max and self._seq < SLICE_MAX_SEQ:
                    self._seq, self._count = self._seq + 1, 0
                # the last sequence number takes everything that is left
                room = (
                    n - len(out) if self._seq >= SLICE_MAX_SEQ else min(n - len(out), self._max - self._count)
                )
                if self._slice is None or self._slice[0] != (hour, self._seq):
                    self._slice = ((hour, self._seq), new_slice_id(now, seq=self._seq))
                out += [self._slice[1]] * room
                self._count += room
        return out

    def new_relative_address(self) -> str:
        """``data/<slice>/<fresh object id>`` for a new upload."""
        return relative_address(self.next_slice(), new_object_id())

    def new_relative_addresses(self, n: int) -> list[str]:
        """``n`` addresses as :meth:`new_relative_address` would give them one by one."""
        slices = self.next_slices(n)
        # both parts are made here, in their alphabet: checked once per slice, not once per object
        for slice_id in set(slices):
            _segment(slice_id, "slice_id")
        return [
            f"{DATA_DIR}/{slice_id}/{oid}" for slice_id, oid in zip(slices, new_object_ids(n), strict=True)
        ]


def new_relative_address(now: datetime | None = None) -> str:
    """``data/<slice of now>/<fresh object id>``: a never-used RELATIVE address."""
    return relative_address(new_slice_id(now), new_object_id())


def table_name(table_id: str) -> str:
    """``_lakefs/<id>``: a range or metarange relative to its namespace (also its name in errors)."""
    return f"{TABLES_DIR}/{_segment(table_id, 'table_id')}"


# -- GC: ids decoded, run ids --------------------------------------------------------------------------

GC_DIR = f"{TABLES_DIR}/retention/gc"
_SLICE_ID = re.compile(r"[0-9a-v]{10}")
_OBJECT_ID = re.compile(r"[0-9a-v]{26}")
# Ours (new_run_id) and lakeFS's (UUIDs); a run id arrives in API paths, so it is checked before use.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def slice_hour(slice_id: str) -> datetime:
    """The start (UTC) of the hour whose objects :func:`new_slice_id` put in ``slice_id``: every object
    of the slice was written at or after it (GC skips slices whose hour is after its cutoff). A name
    that is not a slice id of ours raises :class:`~lakefs_core.errors.BadInputError`."""
    if not isinstance(slice_id, str) or not _SLICE_ID.fullmatch(slice_id):
        raise BadInputError(f"{slice_id!r} is not a slice id (10 base32hex digits)", field="slice_id")
    remaining = int(slice_id[:_SLICE_HOUR_DIGITS], 32)
    if remaining == 0:
        raise BadInputError(f"{slice_id!r} encodes no hour before the year 4000", field="slice_id")
    return datetime.fromtimestamp((_END_OF_TIME_HOURS - remaining) * 3600, UTC)


def object_id_time(object_id: str) -> datetime | None:
    """When :func:`new_object_id` made ``object_id`` (millisecond precision, UTC), or ``None`` for a
    name that is not one of our object ids (lakeFS's, a legacy root object): the caller then relies on
    the object's modification time alone."""
    if not isinstance(object_id, str) or not _OBJECT_ID.fullmatch(object_id):
        return None
    raw = base64.b32hexdecode(object_id.upper() + "======")
    return datetime.fromtimestamp(int.from_bytes(raw[:6], "big") / 1000, UTC)


def check_run_id(run_id: object) -> str:
    """``run_id`` if it is a usable GC run id (1-128 of ``[A-Za-z0-9._-]``, starting alphanumeric)."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise BadInputError(f"{run_id!r} is not a GC run id", field="run_id")
    return run_id


class RunIds:
    """A source of GC run ids: ``YYYYMMDDTHHMMSSmmmZ-<16 hex>`` (UTC, milliseconds, 64 random bits).

    Ids sort by creation time (fixed width); from one source they strictly increase even when the
    clock given stands still or steps back (the millisecond part then moves one past the previous
    id's). Each clock has its own source (``lakefs_gc.clock.RunClock``: one per base clock and
    offset), so a clock far from the wall clock (an offset, a test's) never drags the ids of another
    clock along.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = 0  # the newest id's milliseconds (under the lock)

    def new(self, now: datetime) -> str:
        if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
            raise BadInputError("must be a timezone-aware datetime", field="now")
        with self._lock:
            ms = max(int(now.timestamp() * 1000), self._last_ms + 1)
            self._last_ms = ms
        at = datetime.fromtimestamp(ms / 1000, UTC)
        return f"{at:%Y%m%dT%H%M%S}{ms % 1000:03d}Z-{os.urandom(8).hex()}"


_wall_run_ids = RunIds()


def new_run_id(now: datetime | None = None) -> str:
    """A fresh GC run id from this process's default :class:`RunIds` (``now``: default the wall
    clock). GC itself mints ids from its run clock (``lakefs_gc.clock.RunClock.new_run_id``)."""
    return _wall_run_ids.new(datetime.now(UTC) if now is None else now)


GC_RULES_PATH = f"{GC_DIR}/rules/config.json"
GC_RUNS_DIR = f"{GC_DIR}/unified/"


def gc_run_path(run_id: str, *parts: str) -> str:
    """``_lakefs/retention/gc/unified/<run_id>[/<part>...]``: a GC run's files (lakeFS's layout).
    ``run_id`` must pass :func:`check_run_id`; each part is one key segment."""
    rel = f"{GC_RUNS_DIR}{check_run_id(run_id)}"
    for i, part in enumerate(parts):
        rel += "/" + _segment(part, f"parts[{i}]")
    return rel


def gc_commits_path(run_id: str) -> str:
    """``_lakefs/retention/gc/commits/run_id=<run_id>/commits.csv``: a run's active commits."""
    return f"{GC_DIR}/commits/run_id={check_run_id(run_id)}/commits.csv"

"""THE mapping from ids to object keys (spec section 1). No other module formats object keys.

A repository's *storage namespace* is a URI prefix: ``s3://bucket/some/prefix``, ``local:///abs/path``
or ``mem://name/prefix``. :class:`StorageNamespace` splits it into the block store that holds it
(:attr:`StorageNamespace.store_uri`, opened with :func:`lakefs_core.block.open_block_store`) and the key
prefix inside that store (:attr:`StorageNamespace.prefix`):

============================  ==========================  ===============
namespace                     store_uri                   prefix
============================  ==========================  ===============
``s3://bucket/some/prefix``   ``s3://bucket``             ``some/prefix``
``s3://bucket``               ``s3://bucket``             ``""``
``mem://name/prefix``         ``mem://name``              ``prefix``
``local:///data/repo1``       ``local:///data/repo1``     ``""``
============================  ==========================  ===============

(a local namespace is a whole directory: its path is the store root, so the store's metadata sidecars
stay inside the namespace).

A local namespace as a user or a stored record GIVES it (``local:///a//b/../c/``, through symlinks) is
made normal by :func:`lakefs_core.realpaths.real_location`, the one normaliser of local paths: it
resolves the path where it leads (symlinks, ``..``, ``.``, ``//``, trailing ``/``) and only then parses
it here; :func:`given_local_path` is the syntax it starts from. This module stays pure, so it takes only
normal forms.

Exclusivity: a repository owns its namespace and everything below it. :attr:`StorageNamespace.canonical`
(the URI with one trailing ``/``) makes nesting a plain prefix test (:meth:`StorageNamespace.overlaps`;
``s3://b/ab`` is not inside ``s3://b/a``), and :meth:`StorageNamespace.check_repository_namespace` is
THE rule refusing local directories no repository may own (the root, system directories), used by
repository creation (CLI, library, mirror engine) and the mirror API alike.

Layout inside a namespace (``<ns>`` = the prefix; keys never start with ``/``):

- data objects: ``<ns>/data/<slice>/<object id>``, addressed in entries by the RELATIVE address
  ``data/<slice>/<object id>`` (:func:`relative_address`, :meth:`StorageNamespace.data_key`);
- ranges and metaranges, flat: ``<ns>/_lakefs/<table id>`` (:meth:`StorageNamespace.table_key`);
- the writability probe ``<ns>/_lakefs/dummy`` (:meth:`StorageNamespace.dummy_key`);
- lakeFS's GC rules ``<ns>/_lakefs/retention/gc/rules/config.json`` (:meth:`StorageNamespace.gc_rules_key`);
- GC runs ``<ns>/_lakefs/retention/gc/unified/<run>/...`` (:meth:`StorageNamespace.gc_path`) and their
  active commits ``<ns>/_lakefs/retention/gc/commits/run_id=<run>/commits.csv``
  (:meth:`StorageNamespace.gc_commits_path`); run ids come from :func:`new_run_id`.

Addresses (:meth:`StorageNamespace.address_key`) are opaque strings: RELATIVE ones are joined to the
namespace prefix as they are; FULL ones are absolute URIs resolved to their own store
(``s3://other/k`` -> ``("s3://other", "k")``; a local file inside the namespace directory resolves to
the namespace store, any other local file to a store rooted at its directory). The deprecated
by-prefix type is FULL when the address has a ``scheme://`` and RELATIVE otherwise (as lakeFS does).

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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum

from lakefs_core.errors import BadInputError, encode_utf8

DATA_DIR = "data"
TABLES_DIR = "_lakefs"
DUMMY_NAME = "dummy"
SLICE_MAX_OBJECTS = 50_000
MAX_LOCAL_PATH_BYTES = 4096  # PATH_MAX: a longer local path names nothing the OS can open

# Used with fullmatch only (``match`` with ``$`` would accept a trailing newline).
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://(.*)", re.DOTALL)
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|\Z)")  # a "." or ".." path segment (one C-speed search)
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")
_MEM_NAME = re.compile(r"[A-Za-z0-9._-]+")
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


def _clean_path(path: str, field_name: str, what: str) -> list[str]:
    """Segments of a ``/``-separated path that must already be normal (no empty, ``.``, ``..``)."""
    stripped = path.strip("/")
    if not stripped:
        return []
    parts = stripped.split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise BadInputError(f"{what} {path!r} has an empty, '.' or '..' segment", field=field_name)
    return parts


# Local directories a repository may never own. Under the first set lives the OS itself (or kernel
# views of it): nothing below them is a place for versioned data. The second set are directories that
# hold other users' or other programs' data: a repository may live BELOW them (``/tmp/x``,
# ``/var/lib/lakefs``, ``/home/me/data``), never own them whole, since GC and hard-delete remove objects
# under a repository's namespace.
_SYSTEM_TREES = frozenset(
    {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "usr"}
)
_SHARED_DIRS = frozenset(
    {"home", "media", "mnt", "opt", "root", "run", "srv", "tmp", "var", "var/lib", "var/tmp"}
)


def forbidden_local_path(path: str) -> str | None:
    """Why a repository may not own the absolute local directory ``path`` (None: it may)."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "the filesystem root cannot be a storage namespace"
    top = parts[0]
    if top in _SYSTEM_TREES:
        return f"/{top} is a system directory: no storage namespace may be in it"
    if "/".join(parts) in _SHARED_DIRS:
        return f"/{'/'.join(parts)} is a shared system directory: use a directory below it"
    return None


def given_local_path(uri: str, field_name: str = "storage_namespace") -> str | None:
    """The absolute path of a ``local://`` URI as given, not yet normal (``//``, ``.``, ``..`` and a
    trailing ``/`` are the resolver's to normalise); ``None`` for any other scheme. Refuses a local URI
    without an absolute path, a NUL, text that is not UTF-8 and paths over :data:`MAX_LOCAL_PATH_BYTES`."""
    if not isinstance(uri, str):
        raise BadInputError("must be a str", field=field_name)
    m = _SCHEME.fullmatch(uri)
    if m is None or m.group(1) != "local":
        return None
    path = m.group(2)
    if not path.startswith("/"):
        raise BadInputError(f"{uri!r}: a local namespace is local:///absolute/path", field=field_name)
    if len(encode_utf8(path, field_name)) > MAX_LOCAL_PATH_BYTES or "\0" in path:
        raise BadInputError(
            f"must be a path of at most {MAX_LOCAL_PATH_BYTES} bytes without NUL", field=field_name
        )
    return path


def _join(prefix: str, rest: str) -> str:
    return f"{prefix}/{rest}" if prefix else rest


def relative_address(slice_id: str, object_id: str) -> str:
    """The RELATIVE address of a data object: ``data/<slice>/<id>``."""
    return f"{DATA_DIR}/{_segment(slice_id, 'slice_id')}/{_segment(object_id, 'object_id')}"


@dataclass(frozen=True)
class StorageNamespace:
    """A parsed storage namespace URI. ``StorageNamespace(uri)`` and :meth:`parse` are the same.

    ``uri`` is normalised (no trailing ``/``); ``scheme`` is ``s3``, ``local`` or ``mem``.
    """

    uri: str
    scheme: str = field(init=False)
    store_uri: str = field(init=False)
    prefix: str = field(init=False)

    def __post_init__(self) -> None:
        uri = self.uri
        if not isinstance(uri, str):
            raise BadInputError("must be a str", field="storage_namespace")
        encode_utf8(uri, "storage_namespace")  # stored in KV records and hashed into keys
        m = _SCHEME.fullmatch(uri)
        if m is None:
            raise BadInputError(f"{uri!r} is not a URI (scheme://...)", field="storage_namespace")
        scheme, rest = m.group(1), m.group(2)
        if scheme == "local":
            if not rest.startswith("/"):
                raise BadInputError(
                    f"{uri!r}: a local namespace is local:///absolute/path", field="storage_namespace"
                )
            parts = _clean_path(rest, "storage_namespace", "path")
            store_uri = "local:///" + "/".join(parts)
            prefix = ""
            normal = store_uri
        elif scheme in ("s3", "mem"):
            location, _, path = rest.partition("/")
            pattern = _BUCKET if scheme == "s3" else _MEM_NAME
            if not pattern.fullmatch(location):
                what = "bucket" if scheme == "s3" else "memory store name"
                raise BadInputError(f"{uri!r}: invalid {what} {location!r}", field="storage_namespace")
            store_uri = f"{scheme}://{location}"
            prefix = "/".join(_clean_path(path, "storage_namespace", "prefix"))
            normal = _join(store_uri, prefix) if prefix else store_uri
        else:
            raise BadInputError(
                f"{uri!r}: unsupported scheme {scheme!r} (s3, local, mem)", field="storage_namespace"
            )
        object.__setattr__(self, "uri", normal)
        object.__setattr__(self, "scheme", scheme)
        object.__setattr__(self, "store_uri", store_uri)
        object.__setattr__(self, "prefix", prefix)

    @classmethod
    def parse(cls, uri: str) -> StorageNamespace:
        return cls(uri)

    def __str__(self) -> str:
        return self.uri

    # -- exclusivity ------------------------------------------------------------------------------

    @property
    def canonical(self) -> str:
        """The normal form with exactly one trailing ``/`` (``s3://b/a/``, ``local:///``).

        Two namespaces overlap iff one canonical form is a prefix of the other: ``s3://b/a`` and
        ``s3://b/a/`` are the same namespace, ``s3://b/ab`` is not inside ``s3://b/a``.
        """
        return self.uri if self.uri.endswith("/") else self.uri + "/"

    def ancestors(self) -> list[str]:
        """The canonical forms of every namespace strictly enclosing this one, outermost first
        (``s3://b/x/y`` -> ``["s3://b/", "s3://b/x/"]``; ``local:///a`` -> ``["local:///"]``)."""
        canonical = self.canonical
        # The outermost namespace of a scheme: ``local:///`` (the root) or ``s3://bucket/``.
        at = len("local:///") if self.scheme == "local" else canonical.index("/", len(self.scheme) + 3) + 1
        out = []
        while at < len(canonical):
            out.append(canonical[:at])
            at = canonical.index("/", at) + 1
        return out

    def overlaps(self, other: StorageNamespace) -> bool:
        """True if the two namespaces are equal or one lies inside the other."""
        a, b = self.canonical, other.canonical
        return a.startswith(b) or b.startswith(a)

    def check_repository_namespace(self) -> StorageNamespace:
        """Refuse a namespace no repository may own: for ``local:///``, the filesystem root, the
        system directories and everything under the ones the OS owns (see :func:`forbidden_local_path`).
        Returns ``self``; raises :class:`BadInputError` naming ``storage_namespace``."""
        if self.scheme == "local":
            reason = forbidden_local_path(self.store_uri[len("local://") :])
            if reason is not None:
                raise BadInputError(f"{self.uri!r}: {reason}", field="storage_namespace")
        return self

    # -- keys inside the namespace ---------------------------------------------------------------

    def key(self, relative: str) -> str:
        """The store key of a path relative to the namespace (``data/...``, ``_lakefs/...``)."""
        if not isinstance(relative, str) or not relative:
            raise BadInputError("must be a non-empty str", field="address")
        if relative.startswith("/") or _DOT_SEGMENT.search(relative):
            raise BadInputError(
                f"{relative!r} is not a relative address (leading '/', '.' or '..')", field="address"
            )
        return _join(self.prefix, relative)

    def tables_prefix(self) -> str:
        """``<ns>/_lakefs/``: list under it to find ranges and metaranges (and other files)."""
        return _join(self.prefix, f"{TABLES_DIR}/")

    def data_prefix(self) -> str:
        """``<ns>/data/``: every data object of the namespace is below it."""
        return _join(self.prefix, f"{DATA_DIR}/")

    def table_key(self, table_id: str) -> str:
        """``<ns>/_lakefs/<id>``: a range or metarange (hex SHA-256 id, no extension)."""
        return _join(self.prefix, f"{TABLES_DIR}/{_segment(table_id, 'table_id')}")

    def dummy_key(self) -> str:
        """``<ns>/_lakefs/dummy``, written at repository creation to prove the namespace writable."""
        return _join(self.prefix, f"{TABLES_DIR}/{DUMMY_NAME}")

    def probe_key(self, token: str) -> str:
        """``<ns>/_lakefs/probe-<token>``: a short-lived object a daemon writes, reads back and deletes
        to check that it may use the namespace (never ``dummy``, which belongs to the repository)."""
        return _join(self.prefix, f"{TABLES_DIR}/probe-{_segment(token, 'token')}")

    def data_key(self, slice_id: str, object_id: str) -> str:
        """``<ns>/data/<slice>/<id>``: the key of the data object at ``relative_address(slice, id)``."""
        return _join(self.prefix, relative_address(slice_id, object_id))

    def slice_prefix(self, slice_id: str) -> str:
        """``<ns>/data/<slice>/``: list under it to find the data objects of one slice (GC listing)."""
        return _join(self.prefix, f"{DATA_DIR}/{_segment(slice_id, 'slice_id')}/")

    relative_address = staticmethod(relative_address)

    def full_address(self, relative: str) -> str:
        """The absolute URI of a RELATIVE address (``s3://bucket/prefix/data/...``)."""
        return _join(self.store_uri.rstrip("/"), self.key(relative))

    # -- addresses --------------------------------------------------------------------------------

    def address_key(
        self, address: str, address_type: AddressType | int = AddressType.RELATIVE
    ) -> tuple[str, str]:
        """``(store_uri, key)`` holding the object of an entry's ``address``."""
        if not isinstance(address, str) or not address:
            raise BadInputError("must be a non-empty str", field="address")
        try:
            kind = AddressType(int(address_type))
        except ValueError:
            raise BadInputError(f"unknown address type {address_type!r}", field="address_type") from None
        if kind is AddressType.BY_PREFIX_DEPRECATED:
            kind = AddressType.FULL if _SCHEME.fullmatch(address) else AddressType.RELATIVE
        if kind is AddressType.RELATIVE:
            if _SCHEME.fullmatch(address):
                raise BadInputError(f"{address!r} is absolute but typed RELATIVE", field="address")
            return self.store_uri, self.key(address)
        return self._resolve_full(address)

    def _resolve_full(self, address: str) -> tuple[str, str]:
        m = _SCHEME.fullmatch(address)
        if m is None:
            raise BadInputError(f"{address!r} is not an absolute URI but typed FULL", field="address")
        scheme, rest = m.group(1), m.group(2)
        if scheme in ("s3", "mem"):
            location, sep, key = rest.partition("/")
            pattern = _BUCKET if scheme == "s3" else _MEM_NAME
            if not pattern.fullmatch(location) or not sep or not key:
                raise BadInputError(f"{address!r} does not name an object", field="address")
            return f"{scheme}://{location}", key
        if scheme == "local":
            if not rest.startswith("/"):
                raise BadInputError(
                    f"{address!r}: a local address is local:///absolute/path", field="address"
                )
            parts = _clean_path(rest, "address", "path")
            if not parts or rest.endswith("/"):
                raise BadInputError(f"{address!r} does not name a file", field="address")
            if self.scheme == "local":
                root = _clean_path(self.store_uri[len("local://") :], "storage_namespace", "path")
                if len(parts) > len(root) and parts[: len(root)] == root:
                    return self.store_uri, "/".join(parts[len(root) :])
            return "local:///" + "/".join(parts[:-1]), parts[-1]
        raise BadInputError(f"{address!r}: unsupported scheme {scheme!r} (s3, local, mem)", field="address")

    def relative_of(self, address: str, address_type: AddressType | int) -> str | None:
        """THE classification of an entry's address against this namespace (mirror validation, GC).

        Returns the address RELATIVE to the namespace (``data/<slice>/<id>``, the form
        :meth:`key` maps to a store key) when the object lives inside it, or ``None`` when it lives
        outside (an external object: never ours to copy, validate or delete). RELATIVE addresses (and
        deprecated by-prefix ones without a ``scheme://``) are returned as they are; FULL addresses are
        resolved (:meth:`address_key`) and, when they name a key below this namespace's prefix in this
        namespace's store, reduced to the same relative form, so ``s3://b/ns/data/x`` and ``data/x``
        are one object of ``s3://b/ns``. An address that cannot be resolved, or a FULL address inside
        the namespace whose relative part is not normal (``//``, ``.`` or ``..`` segments: the store
        would take it literally, a relative address may not), raises :class:`BadInputError`: callers
        fail closed rather than guess whether it is ours.
        """
        store_uri, key = self.address_key(address, address_type)
        if store_uri != self.store_uri:
            return None
        if self.prefix:
            if not key.startswith(self.prefix + "/"):
                return None
            key = key[len(self.prefix) + 1 :]
        if key == address:
            return key  # a RELATIVE address, already checked by ``key``
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts):
            raise BadInputError(
                f"{address!r} names a key inside {self.uri} that is not a normal relative path",
                field="address",
            )
        return key

    def gc_rules_key(self) -> str:
        """``<ns>/_lakefs/retention/gc/rules/config.json``: lakeFS's GC rules (binary protobuf)."""
        return _join(self.prefix, f"{TABLES_DIR}/retention/gc/rules/config.json")

    def gc_path(self, run_id: str, *parts: str) -> str:
        """``<ns>/_lakefs/retention/gc/unified/<run_id>[/<part>...]``: a GC run's files (lakeFS's
        layout). ``run_id`` must pass :func:`check_run_id`; each part is one key segment. Without parts
        it is the run's directory (no trailing ``/``: add one to list below it)."""
        rel = f"{GC_DIR}/unified/{check_run_id(run_id)}"
        for i, part in enumerate(parts):
            rel += "/" + _segment(part, f"parts[{i}]")
        return _join(self.prefix, rel)

    def gc_commits_path(self, run_id: str) -> str:
        """``<ns>/_lakefs/retention/gc/commits/run_id=<run_id>/commits.csv``: a run's active commits."""
        return _join(self.prefix, f"{GC_DIR}/commits/run_id={check_run_id(run_id)}/commits.csv")

    def gc_runs_prefix(self) -> str:
        """``<ns>/_lakefs/retention/gc/unified/``: list it with delimiter ``/`` to find every GC run."""
        return _join(self.prefix, f"{GC_DIR}/unified/")


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
_run_id_lock = threading.Lock()
_last_run_ms = [0]  # the newest run id's milliseconds in this process (under the lock)


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


def new_run_id(now: datetime | None = None) -> str:
    """A fresh GC run id: ``YYYYMMDDTHHMMSSmmmZ-<16 hex>`` (UTC, milliseconds, 64 random bits).

    Ids sort by creation time (fixed width); within this process they strictly increase even when the
    clock stands still or steps back (the millisecond part then moves one past the previous id's).
    """
    if now is None:
        now = datetime.now(UTC)
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise BadInputError("must be a timezone-aware datetime", field="now")
    with _run_id_lock:
        ms = max(int(now.timestamp() * 1000), _last_run_ms[0] + 1)
        _last_run_ms[0] = ms
    at = datetime.fromtimestamp(ms / 1000, UTC)
    return f"{at:%Y%m%dT%H%M%S}{ms % 1000:03d}Z-{os.urandom(8).hex()}"

"""What the mirror already knows about a destination storage namespace: presence facts and cooldowns.

lakeFS never reuses a physical path (data objects get fresh unique names; tables are named by the hash
of their content), so once an object is seen in the destination namespace it stays "present" for
good: positive facts never go stale and need no invalidation, except when retention GC deletes
objects (a mirror applying a source sweep calls :meth:`PresenceCache.forget` for the swept keys and
:meth:`PresenceCache.retain_tables` for the tables its heads still use). :class:`PresenceCache` keeps three
things, all keyed by the destination namespace (its URI, or :func:`namespace_key` of its URI and
incarnation):

- **present**: a bounded set of ``(namespace, relative key)`` facts known to exist in the destination
  (``data/<slice>/<id>`` for data objects, ``_lakefs/<id>`` for tables). A hit saves a HEAD/LIST.
  Each fact is held as one int: the namespace's number above a 128-bit keyed BLAKE2b digest of the
  key (salted with 16 random bytes per cache, kept in the snapshot), ~105 bytes per fact, so the
  default bound of 1,000,000 facts is ~105 MB. It is a two-generation LRU: hits and new facts go to
  the young generation (a hit in the old one moves the fact there); when the young one holds half
  the bound it becomes the old one and the previous old one is evicted whole. So the cache never
  holds more than ``max_objects`` facts and a fact survives at least ``max_objects // 2`` newer facts
  after its last use (exact LRU order is kept within each generation, which the snapshot preserves).

  A digest can only err one way: two keys of one namespace with equal digests would make a missing
  object look present. Digests of distinct keys under a secret random salt behave as independent
  uniform 128-bit values, so with at most n facts held a lookup of an absent key is a false positive
  with probability at most n / 2**128: below 2**-108 at n = 1M, below 2**-68 over 2**40 lookups (a
  trillion) in a daemon's life. The salt is random and never leaves the state directory, so a hostile
  source cannot search for colliding keys offline either (with a public hash a birthday search costs
  2**64; here it needs the salt, or 2**128 guesses against the cache).
- **validated tables**: a bounded LRU of ``(namespace, table id)`` pairs for ranges and metaranges
  whose *whole* content was validated there (the table itself and every object it references). A
  commit that reuses range R then costs nothing for R: the validator does not even open it.
- **recently missing**: keys found absent, with an expiry (``negative_cooldown`` seconds on the
  injected ``clock``); they are not asked about again before it, so an unreplicated object costs one
  request per cooldown rather than one per validation. Negatives are bounded too, and never persisted
  (they are only a rate limit).

Positive facts (as digests, with the salt) and validated tables persist across restarts in a small
SQLite file (stdlib
:mod:`sqlite3`, run in a worker thread). :meth:`PresenceCache.load` reads it at start;
:meth:`PresenceCache.flush` (also called by :meth:`PresenceCache.close`) writes the current bounded
contents to a temporary file in the same directory and renames it over the old one, so a crash leaves
either the old or the new snapshot, never a mix. An unreadable or foreign file is ignored with a
warning (the cache is only an optimisation; losing it costs requests, never correctness). The file
is schema 3 (digests); a schema-2 file (keys in clear) is still read, its keys digested on load.

The one way a positive can go stale is a destination namespace being emptied and reused under the
same URI. Two rules keep that from leaking into answers:

- callers key facts by the namespace's *incarnation* (:func:`namespace_key`: the URI plus the
  destination repository's ``instance_uid``), so a namespace whose repository was deleted and created
  again from scratch starts with no facts (and :meth:`PresenceCache.forget_namespace` drops every
  incarnation of a URI when a mirror is deleted or reset);
- facts about a non-durable store (``mem://``: its objects vanish with the process) are never
  persisted, and never loaded from an older file: after a restart they would claim objects present
  that exist nowhere.

Counters (plain ints, for the daemon's metrics) are in :attr:`PresenceCache.stats`. Single event
loop: the in-memory structures are not locked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import sqlite3
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from lakefs_core.errors import BadInputError
from lakefs_core.repos.graveler import StorageNamespace

__all__ = [
    "DEFAULT_MAX_NEGATIVES",
    "DEFAULT_MAX_OBJECTS",
    "DEFAULT_MAX_TABLES",
    "DEFAULT_NEGATIVE_COOLDOWN",
    "PresenceCache",
    "PresenceStats",
    "namespace_key",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_OBJECTS = 1_000_000
DEFAULT_MAX_TABLES = 200_000
DEFAULT_MAX_NEGATIVES = 200_000
DEFAULT_NEGATIVE_COOLDOWN = 30.0

# 2: namespaces are incarnation keys (``uri#instance_uid``); version-1 files are ignored.
# 3: objects are salted 128-bit digests, the salt in table ``meta``; version-2 files are still read.
SCHEMA_VERSION = 3
_READABLE_VERSIONS = (2, 3)
_DIGEST_BITS = 128
_DIGEST_BYTES = _DIGEST_BITS // 8
_SALT_BYTES = 16
_APPLICATION_ID = 0x4C464D50  # "LFMP": marks the file as ours
_INCARNATION_SEP = "#"
_NON_DURABLE_SCHEMES = ("mem://",)

Key = tuple[str, str]
Digested = tuple[str, bytes]  # (namespace, digest of the key)


def _digest(salt: bytes, key: str) -> bytes:
    """The salted 128-bit digest of a relative key (any str: lone surrogates are kept, not refused)."""
    data = key.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=_DIGEST_BYTES, key=salt).digest()


def namespace_key(uri: str, incarnation: str = "") -> str:
    """The cache key of one incarnation of a namespace: ``uri#incarnation`` (just ``uri`` without one).

    ``incarnation`` is the destination repository's ``instance_uid``: it changes whenever the
    repository (and so, potentially, its namespace's contents) is created from scratch.
    """
    return f"{uri}{_INCARNATION_SEP}{incarnation}" if incarnation else uri


def _uri_of(namespace: str) -> str:
    return namespace.partition(_INCARNATION_SEP)[0]


def _durable(namespace: str) -> bool:
    """Facts about a memory store must not outlive the process that held its objects."""
    return not namespace.startswith(_NON_DURABLE_SCHEMES)


@dataclass
class PresenceStats:
    """Hit/miss counters. ``*_hits`` saved work; ``*_misses`` did not."""

    object_hits: int = 0  # is_present() answered True
    object_misses: int = 0  # is_present() answered False
    table_hits: int = 0  # is_validated() answered True
    table_misses: int = 0  # is_validated() answered False
    negative_hits: int = 0  # recently_missing() answered True (a request suppressed)
    object_evictions: int = 0
    table_evictions: int = 0
    negative_evictions: int = 0
    flushes: int = 0
    loaded_objects: int = 0
    loaded_tables: int = 0

    @property
    def hits(self) -> int:
        """Presence questions answered from the cache (objects and tables known present / validated)."""
        return self.object_hits + self.table_hits

    @property
    def misses(self) -> int:
        """Object/table presence questions the cache could not answer positively."""
        return self.object_misses

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _positive_int(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadInputError("must be a positive integer", field=name)
    return value


class PresenceCache:
    """Bounded, persistent positive presence facts plus negative results with cooldowns.

    ``path`` is the SQLite file (``None``: memory only, nothing persisted). The constructor does no
    I/O; call ``await cache.load()`` (or use :meth:`open`) to read the file, and ``await cache.close()``
    to write it back.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_objects: int = DEFAULT_MAX_OBJECTS,
        max_tables: int = DEFAULT_MAX_TABLES,
        max_negatives: int = DEFAULT_MAX_NEGATIVES,
        negative_cooldown: float = DEFAULT_NEGATIVE_COOLDOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.max_objects = _positive_int(max_objects, "max_objects")
        self.max_tables = _positive_int(max_tables, "max_tables")
        self.max_negatives = _positive_int(max_negatives, "max_negatives")
        if (
            not isinstance(negative_cooldown, int | float)
            or isinstance(negative_cooldown, bool)
            or negative_cooldown < 0
        ):
            raise BadInputError("must be a number >= 0", field="negative_cooldown")
        self.negative_cooldown = float(negative_cooldown)
        self.clock = clock
        self.stats = PresenceStats()
        # positive object facts, one int each (:meth:`_pkey`), in two generations of plain dicts
        # (insertion-ordered, ~105 bytes a fact measured; an OrderedDict adds ~60 more)
        self._salt = os.urandom(_SALT_BYTES)
        self._young: dict[int, None] = {}
        self._old: dict[int, None] = {}
        self._young_cap = max(1, self.max_objects // 2)
        self._ns_ids: dict[str, int] = {}  # namespace -> its number (the high bits of its facts)
        self._ns_names: list[str] = []  # number -> namespace
        self._validated: OrderedDict[Key, None] = OrderedDict()
        self._negative: OrderedDict[Key, float] = OrderedDict()  # key -> expiry (clock time)
        self._dirty = False
        self._closed = False
        self._flush_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] | None,
        *,
        max_objects: int = DEFAULT_MAX_OBJECTS,
        max_tables: int = DEFAULT_MAX_TABLES,
        max_negatives: int = DEFAULT_MAX_NEGATIVES,
        negative_cooldown: float = DEFAULT_NEGATIVE_COOLDOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> PresenceCache:
        """A cache loaded from ``path`` (an absent file is an empty cache)."""
        cache = cls(
            path,
            max_objects=max_objects,
            max_tables=max_tables,
            max_negatives=max_negatives,
            negative_cooldown=negative_cooldown,
            clock=clock,
        )
        await cache.load()
        return cache

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def present_count(self) -> int:
        return len(self._young) + len(self._old)

    @property
    def validated_count(self) -> int:
        return len(self._validated)

    @property
    def negative_count(self) -> int:
        return len(self._negative)

    @staticmethod
    def _key(namespace: str, key: str) -> Key:
        # Namespace URIs repeat in every entry: intern them so all entries share one string.
        return (sys.intern(namespace), key)

    def _pkey(self, namespace: str, key: str, *, create: bool = False) -> int | None:
        """The int of a fact: the namespace's number shifted above the key's salted digest; None for a
        namespace never seen (unless ``create``). Numbers are never reused while the process runs."""
        number = self._ns_number(namespace, create=create)
        if number is None:
            return None
        return (number << _DIGEST_BITS) | int.from_bytes(_digest(self._salt, key), "big")

    def _ns_number(self, namespace: str, *, create: bool) -> int | None:
        number = self._ns_ids.get(namespace)
        if number is None and create:
            number = len(self._ns_names)
            self._ns_ids[sys.intern(namespace)] = number
            self._ns_names.append(namespace)
        return number

    def _has(self, k: int) -> bool:
        """Whether fact ``k`` is held; a hit becomes the most recently used (young generation)."""
        if k in self._young:
            del self._young[k]  # re-insert at the end: exact LRU order within the generation
            self._young[k] = None
            return True
        if self._old.pop(k, False) is not None:  # stored values are None
            return False
        self._add(k)
        return True

    def _add(self, k: int) -> None:
        """Put a fact in the young generation; when that is full it becomes the old one, and the old
        one is evicted whole. Each generation holds at most ``max_objects // 2`` facts."""
        if len(self._young) >= self._young_cap:
            self.stats.object_evictions += len(self._old)
            self._old, self._young = self._young, {}
        if len(self._old) + len(self._young) >= self.max_objects:  # only for a bound of 1
            self.stats.object_evictions += len(self._old)
            self._old = {}
        self._young[k] = None

    # -- positive facts ---------------------------------------------------------------------------

    def is_present(self, namespace: str, key: str) -> bool:
        """True if ``key`` (relative to the namespace) is known to exist there. Counts a hit or miss."""
        k = self._pkey(namespace, key)
        if k is not None and self._has(k):
            self.stats.object_hits += 1
            return True
        self.stats.object_misses += 1
        return False

    def mark_present(self, namespace: str, key: str) -> None:
        """Record that ``key`` exists in the namespace (forever: paths are never reused)."""
        self._negative.pop((namespace, key), None)
        k = self._pkey(namespace, key, create=True)
        assert k is not None
        if self._has(k):
            return
        self._add(k)
        self._dirty = True

    # -- validated tables -------------------------------------------------------------------------

    def is_validated(self, namespace: str, table_id: str) -> bool:
        """True if the range/metarange ``table_id`` and everything it references were validated."""
        k = (namespace, table_id)
        if k in self._validated:
            self._validated.move_to_end(k)
            self.stats.table_hits += 1
            return True
        self.stats.table_misses += 1
        return False

    def mark_validated(self, namespace: str, table_id: str) -> None:
        k = self._key(namespace, table_id)
        if k in self._validated:
            self._validated.move_to_end(k)
            return
        self._validated[k] = None
        self._dirty = True
        while len(self._validated) > self.max_tables:
            self._validated.popitem(last=False)
            self.stats.table_evictions += 1

    # -- negative results -------------------------------------------------------------------------

    def recently_missing(self, namespace: str, key: str) -> bool:
        """True while a "missing" result for ``key`` is within its cooldown (do not ask again yet)."""
        k = (namespace, key)
        expiry = self._negative.get(k)
        if expiry is None:
            return False
        if self.clock() >= expiry:
            del self._negative[k]
            return False
        self.stats.negative_hits += 1
        return True

    def mark_missing(self, namespace: str, key: str) -> None:
        """Record that ``key`` was just found missing: it is not re-checked for ``negative_cooldown``."""
        pk = self._pkey(namespace, key)
        if pk is not None and (
            pk in self._young or pk in self._old
        ):  # a positive is definitive (paths are never reused)
            return
        k = self._key(namespace, key)
        self._negative.pop(k, None)
        self._negative[k] = self.clock() + self.negative_cooldown
        while len(self._negative) > self.max_negatives:
            self._negative.popitem(last=False)  # oldest first: at worst it is re-checked early
            self.stats.negative_evictions += 1

    # -- housekeeping -----------------------------------------------------------------------------

    def forget_namespace(self, namespace: str) -> int:
        """Drop every fact about ``namespace`` (a mirror deleted, or its namespace emptied and reused),
        in every incarnation when given a plain URI. Returns how many entries were dropped."""
        dropped = 0
        incarnations = namespace + _INCARNATION_SEP
        for od in (self._validated, self._negative):
            doomed = [k for k in od if k[0] == namespace or k[0].startswith(incarnations)]
            for k in doomed:
                del od[k]
            dropped += len(doomed)
        numbers = {n for ns, n in self._ns_ids.items() if ns == namespace or ns.startswith(incarnations)}
        if numbers:
            for gen in (self._young, self._old):
                gone = [k for k in gen if k >> _DIGEST_BITS in numbers]
                for pk in gone:
                    del gen[pk]
                dropped += len(gone)
        if dropped:
            self._dirty = True
        return dropped

    def forget_negative(self, namespace: str, key: str) -> None:
        """Drop a "missing" result so the next validation asks again at once (e.g. after copying the
        object). ``key`` is relative to the namespace; a store key carrying the namespace's prefix is
        accepted too."""
        self._negative.pop((namespace, key), None)
        with contextlib.suppress(BadInputError):
            prefix = StorageNamespace(_uri_of(namespace)).prefix
            if prefix and key.startswith(prefix + "/"):
                self._negative.pop((namespace, key[len(prefix) + 1 :]), None)

    def clear_negatives(self) -> None:
        self._negative.clear()

    def forget(self, namespace: str, keys: Iterable[str]) -> int:
        """Drop the presence facts (positive and negative) of ``keys`` in ``namespace``: objects a
        source GC sweep deleted there (:mod:`lakefs_mirror.gc_apply`), the one case where a positive
        goes stale. ``namespace`` is the cache key the facts were recorded under (an incarnation key
        from :func:`namespace_key`); ``keys`` are relative to it (a store key carrying the
        namespace's prefix is accepted too). Returns how many positive facts were dropped."""
        prefix = ""
        with contextlib.suppress(BadInputError):
            prefix = StorageNamespace(_uri_of(namespace)).prefix
        dropped = 0
        for key in keys:
            relative = key[len(prefix) + 1 :] if prefix and key.startswith(prefix + "/") else key
            self._negative.pop((namespace, relative), None)
            pk = self._pkey(namespace, relative)
            if pk is not None and (
                self._young.pop(pk, False) is None or self._old.pop(pk, False) is None
            ):  # stored values are None
                dropped += 1
        if dropped:
            self._dirty = True
        return dropped

    def retain_tables(self, namespace: str, keep: Iterable[str]) -> int:
        """Drop every validated-table fact of ``namespace`` except the tables in ``keep``. After a
        sweep deleted objects there, a table validated earlier may reference one of them; only the
        tables of the mirror's current heads and candidates (whose objects the sweep spared) stay
        trusted. Returns how many facts were dropped."""
        kept = set(keep)
        doomed = [k for k in self._validated if k[0] == namespace and k[1] not in kept]
        for k in doomed:
            del self._validated[k]
        if doomed:
            self._dirty = True
        return len(doomed)

    # -- persistence ------------------------------------------------------------------------------

    async def load(self) -> None:
        """Replace the positive facts with the file's contents (newest entries first, within bounds).

        A missing file leaves the cache empty; an unreadable or foreign one is ignored with a warning.
        """
        if self.path is None:
            return
        path = self.path
        try:
            salt, present, validated = await asyncio.to_thread(
                _read_snapshot, path, self.max_objects, self.max_tables, self._salt
            )
        except FileNotFoundError:
            return
        except (sqlite3.Error, ValueError) as e:
            log.warning("presence cache %s is unreadable, starting empty: %s", path, e)
            self._dirty = True  # the next flush replaces it
            return
        self._salt = salt
        facts = self._adopt(present)
        # the newest half in the young generation, the rest (at most the other half) in the old one
        split = max(0, len(facts) - self._young_cap)
        self._old = dict.fromkeys(facts[:split])
        self._young = dict.fromkeys(facts[split:])
        self._validated = OrderedDict((self._key(ns, t), None) for ns, t in validated if _durable(ns))
        self.stats.loaded_objects = self.present_count
        self.stats.loaded_tables = len(self._validated)
        self._dirty = False

    async def flush(self) -> None:
        """Persist the current positive facts atomically (write a new file, rename it over the old)."""
        if self.path is None:
            return
        async with self._flush_lock:
            if not self._dirty and self.path.exists():
                return
            self._dirty = False
            # Snapshot in the loop thread, oldest (LRU) first: references to the facts' ints (8 bytes
            # a fact), split into rows by the worker thread; memory stores' facts stay in memory.
            facts = [*self._old, *self._young]
            names = [ns if _durable(ns) else None for ns in self._ns_names]
            validated = [k for k in self._validated if _durable(k[0])]
            try:
                await asyncio.to_thread(
                    _write_snapshot, self.path, self._salt, _Facts(facts, names), validated
                )
            except BaseException:
                self._dirty = True
                raise
            self.stats.flushes += 1

    def _adopt(self, facts: _Facts) -> list[int]:
        """Facts read from a snapshot, renumbered to this cache's namespace numbers (a no-op for a
        fresh cache); memory stores' facts dropped."""
        remap = [
            self._ns_number(ns, create=True) if ns is not None and _durable(ns) else None
            for ns in facts.names
        ]
        if all(r == j for j, r in enumerate(remap)):
            return facts.ints
        mask = (1 << _DIGEST_BITS) - 1
        out = []
        for k in facts.ints:
            number = remap[k >> _DIGEST_BITS]
            if number is not None:
                out.append((number << _DIGEST_BITS) | (k & mask))
        return out

    async def close(self) -> None:
        """Flush (when backed by a file). Idempotent."""
        if self._closed:
            return
        await self.flush()
        self._closed = True


# -- the SQLite snapshot (runs in a worker thread) ---------------------------------------------------


def _read_snapshot(
    path: Path, max_objects: int, max_tables: int, salt: bytes
) -> tuple[bytes, _Facts, list[Key]]:
    """The file's salt, newest ``max_objects`` facts and ``max_tables`` tables (oldest first). A
    schema-2 file holds keys in clear: they are digested with ``salt``, which is returned. Rows are
    read one at a time (a fact costs its int, not a row's tuple, bytes and str)."""
    if not path.is_file():
        raise FileNotFoundError(str(path))
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        (app_id,) = con.execute("PRAGMA application_id").fetchone()
        (version,) = con.execute("PRAGMA user_version").fetchone()
        if app_id != _APPLICATION_ID or version not in _READABLE_VERSIONS:
            raise ValueError(f"not a presence cache of schema {SCHEMA_VERSION} (id {app_id}, v{version})")
        column = "key"
        if version == SCHEMA_VERSION:
            column = "digest"
            row = con.execute("SELECT salt FROM meta").fetchone()
            if row is None or not isinstance(row[0], bytes) or len(row[0]) != _SALT_BYTES:
                raise ValueError("the presence cache has no valid salt")
            salt = row[0]
        names: list[str | None] = []
        number_of: dict[int, int] = {}  # the file's namespace id -> its number here
        for ns_id, uri in con.execute("SELECT id, uri FROM namespaces"):
            number_of[ns_id] = len(names)
            names.append(str(uri))
        # rowid order is LRU order (oldest first): keep the newest entries that fit the bounds.
        ints: list[int] = []
        rows = con.execute(f"SELECT ns, {column} FROM objects ORDER BY rowid DESC LIMIT ?", (max_objects,))
        for ns_id, value in rows:
            number = number_of.get(ns_id)
            if number is not None:  # a fact of no namespace is no fact
                ints.append((number << _DIGEST_BITS) | int.from_bytes(_snapshot_digest(salt, value), "big"))
        validated = con.execute(
            "SELECT n.uri, t.id FROM tables t JOIN namespaces n ON n.id = t.ns ORDER BY t.rowid DESC LIMIT ?",
            (max_tables,),
        ).fetchall()
    finally:
        con.close()
    ints.reverse()
    validated.reverse()
    return salt, _Facts(ints, names), [(str(a), str(b)) for a, b in validated]


def _snapshot_digest(salt: bytes, value: object) -> bytes:
    """A schema-3 row's digest (checked), or a schema-2 row's key digested."""
    if isinstance(value, str):
        return _digest(salt, value)
    if isinstance(value, bytes) and len(value) == _DIGEST_BYTES:
        return value
    raise ValueError(f"a presence fact is neither a key nor a {_DIGEST_BYTES}-byte digest")


@dataclass(frozen=True)
class _Facts:
    """Positive facts to persist: their ints (oldest first) and the namespace of each number (None:
    not persisted)."""

    ints: list[int]
    names: list[str | None]

    def rows(self, ids: dict[str, int]) -> Iterable[tuple[int, bytes]]:
        """``(namespace id, digest)`` rows, one at a time (no second copy of the facts in memory)."""
        mask = (1 << _DIGEST_BITS) - 1
        for k in self.ints:
            name = self.names[k >> _DIGEST_BITS]
            if name is not None:
                yield ids[name], (k & mask).to_bytes(_DIGEST_BYTES, "big")


def _write_snapshot(path: Path, salt: bytes, present: _Facts | list[Digested], validated: list[Key]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        con = sqlite3.connect(tmp)
        try:
            con.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("CREATE TABLE meta (salt BLOB NOT NULL)")
            con.execute("CREATE TABLE namespaces (id INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE)")
            con.execute("CREATE TABLE objects (ns INTEGER NOT NULL, digest BLOB NOT NULL)")
            con.execute("CREATE TABLE tables (ns INTEGER NOT NULL, id TEXT NOT NULL)")
            if isinstance(present, list):  # explicit rows (tests write files of any content)
                present = _Facts(*_as_ints(present))
            ids: dict[str, int] = {}
            for ns in (*present.names, *(ns for ns, _ in validated)):
                if ns is not None and ns not in ids:
                    ids[ns] = len(ids) + 1
            with con:
                con.execute("INSERT INTO meta (salt) VALUES (?)", (salt,))
                con.executemany(
                    "INSERT INTO namespaces (id, uri) VALUES (?, ?)", [(i, u) for u, i in ids.items()]
                )
                con.executemany("INSERT INTO objects (ns, digest) VALUES (?, ?)", present.rows(ids))
                con.executemany(
                    "INSERT INTO tables (ns, id) VALUES (?, ?)", ((ids[ns], t) for ns, t in validated)
                )
        finally:
            con.close()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _as_ints(rows: list[Digested]) -> tuple[list[int], list[str | None]]:
    """``(namespace, digest)`` rows as :class:`_Facts`' ints and names."""
    names: dict[str, int] = {}
    ints = []
    for ns, digest in rows:
        number = names.setdefault(ns, len(names))
        ints.append((number << _DIGEST_BITS) | int.from_bytes(digest, "big"))
    return ints, [*names]

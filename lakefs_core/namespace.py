"""Storage namespaces: where a repository's objects live, and which objects are its own.

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

Keys: the layout inside a namespace is :mod:`lakefs_core.keys` (relative keys); the methods here
(:meth:`~StorageNamespace.table_key`, :meth:`~StorageNamespace.data_key`,
:meth:`~StorageNamespace.gc_path`, ...) only join those to the namespace's prefix.

Addresses (:meth:`StorageNamespace.address_key`) are opaque strings: RELATIVE ones are joined to the
namespace prefix as they are; FULL ones are absolute URIs resolved to their own store
(``s3://other/k`` -> ``("s3://other", "k")``; a local file inside the namespace directory resolves to
the namespace store, any other local file to a store rooted at its directory). The deprecated
by-prefix type is FULL when the address has a ``scheme://`` and RELATIVE otherwise (as lakeFS does);
:meth:`StorageNamespace.relative_of` is THE classification of an address against a namespace.

Everything here is pure: no I/O. Bad input raises :class:`~lakefs_core.errors.BadInputError`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from lakefs_core import keys
from lakefs_core.errors import BadInputError, encode_utf8
from lakefs_core.keys import MAX_LOCAL_PATH_BYTES, AddressType, relative_address, table_name

__all__ = ["MAX_LOCAL_PATH_BYTES", "StorageNamespace", "forbidden_local_path", "given_local_path"]

# Used with fullmatch only (``match`` with ``$`` would accept a trailing newline).
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://(.*)", re.DOTALL)
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|\Z)")  # a "." or ".." path segment (one C-speed search)
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")
_MEM_NAME = re.compile(r"[A-Za-z0-9._-]+")


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
        # Parsed once per URI (the value is immutable): every object read parses its repository's
        # namespace, and the checks and regular expressions cost more than the read's own work.
        if cls is StorageNamespace and type(uri) is str:
            return _parsed(uri)
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
        return _join(self.prefix, keys.TABLES_PREFIX)

    def data_prefix(self) -> str:
        """``<ns>/data/``: every data object of the namespace is below it."""
        return _join(self.prefix, keys.DATA_PREFIX)

    def table_key(self, table_id: str) -> str:
        """``<ns>/_lakefs/<id>``: a range or metarange (hex SHA-256 id, no extension)."""
        return _join(self.prefix, table_name(table_id))

    def dummy_key(self) -> str:
        """``<ns>/_lakefs/dummy``, written at repository creation to prove the namespace writable."""
        return _join(self.prefix, keys.DUMMY_PATH)

    def probe_key(self, token: str) -> str:
        """``<ns>/_lakefs/probe-<token>``: a short-lived object a daemon writes, reads back and deletes
        to check that it may use the namespace (never ``dummy``, which belongs to the repository)."""
        return _join(self.prefix, keys.probe_name(token))

    def data_key(self, slice_id: str, object_id: str) -> str:
        """``<ns>/data/<slice>/<id>``: the key of the data object at ``relative_address(slice, id)``."""
        return _join(self.prefix, relative_address(slice_id, object_id))

    def slice_prefix(self, slice_id: str) -> str:
        """``<ns>/data/<slice>/``: list under it to find the data objects of one slice (GC listing)."""
        return _join(self.prefix, keys.slice_dir(slice_id))

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
        return _join(self.prefix, keys.GC_RULES_PATH)

    def gc_path(self, run_id: str, *parts: str) -> str:
        """``<ns>/_lakefs/retention/gc/unified/<run_id>[/<part>...]``: a GC run's files (lakeFS's
        layout). ``run_id`` must pass :func:`~lakefs_core.keys.check_run_id`; each part is one key
        segment. Without parts it is the run's directory (no trailing ``/``: add one to list below it)."""
        return _join(self.prefix, keys.gc_run_path(run_id, *parts))

    def gc_commits_path(self, run_id: str) -> str:
        """``<ns>/_lakefs/retention/gc/commits/run_id=<run_id>/commits.csv``: a run's active commits."""
        return _join(self.prefix, keys.gc_commits_path(run_id))

    def gc_runs_prefix(self) -> str:
        """``<ns>/_lakefs/retention/gc/unified/``: list it with delimiter ``/`` to find every GC run."""
        return _join(self.prefix, keys.GC_RUNS_DIR)


_parsed = functools.lru_cache(maxsize=256)(StorageNamespace)

"""Local storage namespaces and import sources compared where they lead: THE normaliser of local paths.

A local namespace or import source is a directory, and a directory has many spellings: through
symlinks (relative, absolute, chained, to an ancestor), with ``..``, ``.``, ``//`` or a trailing
``/``. Comparing spellings let ``local:///link-to-repoA/data`` past the overlap checks while GC of
repoA deleted what it pointed at (issue 32). So every local location is compared by its REAL path,
and this module is the one function that computes it (:func:`real_location`); :class:`StorageNamespace`
then parses the normal form it returns and decides overlap (one comparison rule, no second one here).

Contract of :func:`resolve_path` (absolute path in, real absolute path out; blocking, call it from a
worker thread, e.g. :func:`real_locations`):

- components are resolved left to right as the kernel would: a symlink is replaced by its target
  (relative targets against its directory), ``..`` goes to the parent of the directory reached so
  far, ``.`` and empty components vanish;
- a path that does not exist (yet) resolves its longest existing ancestor and appends the rest, so a
  namespace created later is compared by its eventual real path; ``..`` after a missing component
  removes it (that is where the path will lead once the component is a directory);
- ``strict`` (what a caller is about to OWN: a namespace being created, an import source, a namespace
  GC is about to delete in) refuses a dangling symlink (its target may be created anywhere later),
  a component below a file, and more than :data:`MAX_SYMLINKS` links (loops); not ``strict`` (the
  OTHER side of a comparison, a stored record) resolves a dangling link to where it points, and a
  component below a file as a path that does not exist;
- an error that leaves the answer unknown (a directory that cannot be searched, an I/O error) is a
  :class:`BadInputError` in both modes: callers comparing a stored record treat it as an overlap.

Bounded: at most :data:`MAX_SYMLINKS` links are followed per resolution, paths are at most
:data:`~lakefs_core.keys.MAX_LOCAL_PATH_BYTES` bytes in and out, one ``lstat`` per component (plus a
``readlink`` per link). Case is kept as spelled (Linux filesystems are case-sensitive); a
case-insensitive filesystem or a bind mount gives one directory two real paths, which this does not
see (see ``docs``). A symlink swapped in after the checks is the local block store's business: it
refuses links beneath a namespace root for every write and delete.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Sequence

from lakefs_core.errors import BadInputError
from lakefs_core.keys import MAX_LOCAL_PATH_BYTES
from lakefs_core.namespace import StorageNamespace, given_local_path

MAX_SYMLINKS = 40  # the kernel's own limit (MAXSYMLINKS)


class _Walk:
    """One resolution: the link budget is shared by the nested resolutions of link targets."""

    def __init__(self, strict: bool, field: str, seen: dict[str, int | str | None] | None = None) -> None:
        self.strict = strict
        self.field = field
        self.links = 0
        # What lstat (a mode, None: nothing there) and readlink (the target) answered, per path:
        # the paths of one batch share their ancestors, looked up once.
        self.seen: dict[str, int | str | None] = {} if seen is None else seen

    def fail(self, message: str) -> BadInputError:
        return BadInputError(message, field=self.field)

    def resolve(self, path: str) -> tuple[list[str], int]:
        """``(components of the real path, how many leading ones exist)``."""
        parts: list[str] = []
        existing = 0
        pending = path.split("/")
        pending.reverse()  # popped from the end: the leftmost component first
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if parts:
                    parts.pop()
                    existing = min(existing, len(parts))
                continue
            if existing < len(parts):  # below a missing component: nothing there to resolve
                parts.append(name)
                continue
            here = "/" + "/".join([*parts, name])
            if len(here.encode(errors="surrogateescape")) > MAX_LOCAL_PATH_BYTES:
                raise self.fail(f"resolves to a path longer than {MAX_LOCAL_PATH_BYTES} bytes")
            mode = self._lstat(here)
            if mode is None or not stat.S_ISLNK(mode):
                parts.append(name)
                existing += mode is not None
                continue
            parts, existing = self._follow(here, parts)
        return parts, existing

    def _lstat(self, here: str) -> int | None:
        """The mode of ``here``, or None where nothing is (nor can be, below a file: not strict)."""
        if here in self.seen:
            known = self.seen[here]
            return stat.S_IFLNK if isinstance(known, str) else known
        try:
            mode: int | None = os.lstat(here).st_mode
        except FileNotFoundError:
            mode = None
        except NotADirectoryError:
            if self.strict:
                raise self.fail(f"{here!r} lies below a file, not a directory") from None
            mode = None
        except OSError as e:  # EACCES, EIO, ELOOP of a mount: where it leads is unknown
            raise self.fail(f"cannot resolve {here!r}: {os.strerror(e.errno or errno.EIO)}") from None
        if mode is None or not stat.S_ISLNK(mode):
            self.seen[here] = mode  # a link is remembered by its target (_follow)
        return mode

    def _follow(self, link: str, parts: list[str]) -> tuple[list[str], int]:
        self.links += 1
        if self.links > MAX_SYMLINKS:
            raise self.fail(f"more than {MAX_SYMLINKS} symbolic links (a loop?) at {link!r}")
        target = self.seen.get(link)
        if not isinstance(target, str):
            try:
                target = os.readlink(link)
            except OSError as e:  # replaced meanwhile: resolved again by the caller's next check
                why = os.strerror(e.errno or errno.EIO)
                raise self.fail(f"cannot read the symbolic link {link!r}: {why}") from None
            self.seen[link] = target
        base = "" if target.startswith("/") else "/" + "/".join(parts)
        resolved, existing = self.resolve(f"{base}/{target}")
        if self.strict and existing < len(resolved):
            raise self.fail(
                f"{link!r} is a dangling symbolic link (to {target!r}, which does not exist): "
                "refused, it could be made to lead anywhere later"
            )
        return resolved, existing


def resolve_path(
    path: str,
    *,
    strict: bool = True,
    field: str = "storage_namespace",
    seen: dict[str, int | str | None] | None = None,
) -> str:
    """The real path of the absolute ``path`` (see the module docstring). Blocking. ``seen``: what
    the filesystem answered for earlier paths of the same batch (shared ancestors: one lookup)."""
    if not path.startswith("/"):
        raise BadInputError(f"{path!r} is not an absolute path", field=field)
    parts, _ = _Walk(strict, field, seen).resolve(path)
    real = "/" + "/".join(parts)
    if len(real.encode(errors="surrogateescape")) > MAX_LOCAL_PATH_BYTES:
        raise BadInputError(f"resolves to a path longer than {MAX_LOCAL_PATH_BYTES} bytes", field=field)
    return real


def real_location(
    uri: str,
    *,
    strict: bool = True,
    field: str = "storage_namespace",
    seen: dict[str, int | str | None] | None = None,
) -> StorageNamespace:
    """``uri`` as a normal :class:`StorageNamespace`: a ``local://`` one at its real path
    (:func:`resolve_path`), any other as it parses (S3 keys and memory stores have no links).
    Blocking for a local URI: call it from a worker thread."""
    path = given_local_path(uri, field)
    if path is None:
        return StorageNamespace.parse(uri)
    return StorageNamespace("local://" + resolve_path(path, strict=strict, field=field, seen=seen))


async def real_namespace(uri: str, *, field: str = "storage_namespace") -> StorageNamespace:
    """:func:`real_location` (strict) off the event loop: what a caller is about to own."""
    if given_local_path(uri, field) is None:
        return StorageNamespace.parse(uri)
    return await asyncio.to_thread(real_location, uri, field=field)


def _lenient(uri: str, seen: dict[str, int | str | None]) -> StorageNamespace | BadInputError | None:
    if _local_path(uri) is None:
        return None
    try:
        return real_location(uri, strict=False, seen=seen)
    except BadInputError as e:
        return e


def _local_path(uri: str) -> str | None:
    try:
        return given_local_path(uri)
    except BadInputError:  # not a path this library opens: its parsed form (if any) is all there is
        return None


async def real_locations(uris: Sequence[str]) -> list[StorageNamespace | BadInputError | None]:
    """For each stored ``uri``, where it leads NOW (not strict: the other side of a comparison):
    its real namespace, the :class:`BadInputError` that left it unknown, or None when it is not a
    local path (its parsed form is all there is). One worker thread for the whole list."""
    if not any(_local_path(u) is not None for u in uris):
        return [None] * len(uris)
    seen: dict[str, int | str | None] = {}  # one batch, one moment: each ancestor looked up once
    return await asyncio.to_thread(lambda: [_lenient(u, seen) for u in uris])

"""Multipart uploads of the local block store (the :class:`~lakefs_core.block.base.MultipartStore`
half of :class:`~lakefs_core.block.local.LocalBlockStore`), synchronous: the store runs it in
worker threads.

Why: an S3 client sends a big object as numbered parts of one size (all but the last), several at
once, then asks for their concatenation. Writing each part as a file and concatenating them at the
end writes every byte twice; here the parts of the common case are written ONCE, straight into the
file that becomes the object, at offset ``(number - 1) * slot``, and completion moves that file into
place (a rename, no byte copied).

Layout, under a directory no key can name and no listing shows (``<root>/.lakefs-tmp-multipart``,
reserved by its ``.lakefs-tmp-`` prefix), one directory per upload ``<upload id>/`` holding:

- ``upload.json``: the key, content type and user metadata given at creation;
- ``slot``: the slot size, fixed by the first part of at least :data:`MIN_SLOT` bytes (created
  atomically by a hard link: every writer sees one value);
- ``data``: the slotted file; ``claim-<n>``: made create-only by the one writer that may write
  slot ``n`` (a part whose size is the slot's, or smaller: it may be the last); a slot is written
  once, never overwritten, so a failed or concurrent re-upload cannot damage a recorded part;
- ``p-<n>-<token>``: a part that does not fit the slots (another size, or a re-upload): the
  fallback, a file of its own;
- ``part-<n>``: the part's record (JSON: ETag, size, where its bytes are), renamed into place after
  its bytes are synced, so a recorded part is always complete.

Completion takes the recorded parts the client lists (ETags must match). When they are parts
``1..N`` all in their slots, every one but the last exactly a slot long, the slotted file is cut to
its length and becomes the object (the fast path); otherwise the parts are copied into a new file
(``copy_file_range``, in the kernel: the fallback). Part writers hold a shared ``flock`` on
``data`` and check, once they hold it, that the name still leads to their file; completion renames
``data`` away first and then takes the exclusive lock, so no write lands in a completed object.
The object's ETag is S3's multipart ETag (MD5 of the part MD5s, ``-N``). Abort removes the
upload's directory; a part still being written then writes into an unlinked file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lakefs_core.block.base import StoredPart
from lakefs_core.block.local_beneath import NOFOLLOW, Root, open_dir
from lakefs_core.block.local_files import TempFile, map_oserror, write_all
from lakefs_core.block.local_leftovers import TMP_PREFIX, temp_name
from lakefs_core.errors import BadInputError, NotFoundError

__all__ = ["MIN_SLOT", "MP_DIR", "LocalMultipart", "PartWriter", "multipart_etag"]

MP_DIR = TMP_PREFIX + "multipart"
MIN_SLOT = 5 * 1024 * 1024  # S3's smallest part but the last: only such a part fixes the slot
MAX_PART_NUMBER = 10_000
MAX_PART_BYTES = 5 * 1024 * 1024 * 1024
_ID = re.compile(r"[0-9a-f]{32}")
_RECORD_MAX = 4096
_FLAGS = os.O_CLOEXEC | NOFOLLOW
_COPY_CHUNK = 64 << 20


def multipart_etag(etags: Sequence[str]) -> str:
    """S3's ETag of a multipart object: MD5 of the concatenated binary part MD5s, ``-<parts>``."""
    digest = hashlib.md5(usedforsecurity=False)
    for etag in etags:
        digest.update(bytes.fromhex(etag))
    return f"{digest.hexdigest()}-{len(etags)}"


@dataclass
class PartWriter:
    """One part being written: into its slot of ``data`` (``claim`` set) or a file of its own."""

    directory: int
    number: int
    size: int
    name: str
    offset: int
    fd: int
    where: str
    fsync: bool
    claim: str | None = None
    written: int = 0
    md5: hashlib._Hash = field(default_factory=lambda: hashlib.md5(usedforsecurity=False))

    def write(self, data: bytes) -> None:
        if self.written + len(data) > self.size:
            raise BadInputError(f"part {self.number} is longer than its {self.size} bytes", field="body")
        self.md5.update(data)
        view, at = memoryview(data), self.offset + self.written
        try:
            while view:
                n = os.pwrite(self.fd, view, at)
                view, at = view[n:], at + n
        except OSError as e:
            raise map_oserror(e, self.where, reading=False) from e
        self.written += len(data)

    def finish(self) -> StoredPart:
        """Sync the bytes, then record the part (the record's rename is what makes it exist)."""
        if self.written != self.size:
            raise BadInputError(f"part {self.number} has {self.written} bytes, not {self.size}", field="body")
        etag = self.md5.hexdigest()
        record = {"etag": etag, "size": self.size, "file": self.name, "offset": self.offset}
        try:
            if self.fsync:
                os.fdatasync(self.fd)
            _write_atomic(self.directory, f"part-{self.number}", json.dumps(record).encode(), self.fsync)
        except OSError as e:
            raise map_oserror(e, self.where, reading=False) from e
        self.claim = None  # recorded: the slot is the part's for good
        self.close()
        return StoredPart(self.number, etag, self.size)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)  # releases the shared lock too
        if self.directory >= 0:
            directory, self.directory = self.directory, -1
            os.close(directory)

    def discard(self) -> None:
        """A part that failed: nothing recorded; its own file removed, its slot claim released."""
        with contextlib.suppress(OSError):
            if self.claim is not None:
                os.unlink(self.claim, dir_fd=self.directory)
            elif self.name != "data" and self.directory >= 0:
                os.unlink(self.name, dir_fd=self.directory)
        self.close()


def _write_atomic(directory: int, name: str, data: bytes, fsync: bool) -> None:
    tmp = temp_name()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666, dir_fd=directory)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)


def _read_small(directory: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | _FLAGS, dir_fd=directory)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, _RECORD_MAX)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Sealed:
    """What a completion puts in place: a file of the upload's directory, cut to ``size``."""

    name: str
    size: int
    etag: str
    content_type: str | None
    metadata: Mapping[str, str]
    lock_fd: int  # held (exclusive) until the object is in place


class LocalMultipart:
    """The multipart uploads of one local store's tree (see the module docstring)."""

    def __init__(self, tree: Root, fsync: bool) -> None:
        self._tree = tree
        self._fsync = fsync

    def _open(self, upload_id: str, *, create: bool = False) -> int:
        if not isinstance(upload_id, str) or not _ID.fullmatch(upload_id):
            raise NotFoundError(f"no multipart upload {str(upload_id)[:80]!r} here")
        root = self._tree.open(create=create)
        try:
            return open_dir(root, [MP_DIR, upload_id], create=create)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"no multipart upload {upload_id} here (finished or aborted)") from None
        finally:
            os.close(root)

    def create(self, key: str, content_type: str, metadata: Mapping[str, str], where: str) -> str:
        upload_id = secrets.token_hex(16)
        try:
            directory = self._open(upload_id, create=True)
            try:
                record = {"key": key, "content_type": content_type, "metadata": dict(metadata)}
                _write_atomic(directory, "upload.json", json.dumps(record).encode(), self._fsync)
            finally:
                os.close(directory)
        except OSError as e:
            raise map_oserror(e, where, reading=False) from e
        return upload_id

    def _header(self, directory: int, key: str, upload_id: str) -> dict[str, object]:
        raw = _read_small(directory, "upload.json")
        try:
            header = json.loads(raw) if raw is not None else None
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("key") != key:
            raise NotFoundError(f"no multipart upload {upload_id} of this key")
        return header

    def _slot(self, directory: int, size: int) -> int | None:
        """The upload's slot size; fixed now by this part when it is the first of ``MIN_SLOT`` bytes."""
        for _ in range(2):
            raw = _read_small(directory, "slot")
            if raw is not None:
                return int(raw)
            if size < MIN_SLOT:
                return None
            tmp = temp_name()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666, dir_fd=directory)
            try:
                write_all(fd, str(size).encode())
            finally:
                os.close(fd)
            try:
                os.link(tmp, "slot", src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
            except FileExistsError:
                continue  # another part fixed it first: read theirs
            finally:
                os.unlink(tmp, dir_fd=directory)
            return size
        return None

    def open_part(self, key: str, upload_id: str, number: int, size: int, where: str) -> PartWriter:
        """A writer for part ``number`` of ``size`` bytes: its slot when it may take it, else a file."""
        if not 1 <= number <= MAX_PART_NUMBER or not 0 <= size <= MAX_PART_BYTES:
            raise BadInputError("part number 1-10,000, size up to 5 GiB", field="part")
        try:
            return self._open_part(key, upload_id, number, size, where)
        except OSError as e:
            raise map_oserror(e, where, reading=False) from e

    def _open_part(self, key: str, upload_id: str, number: int, size: int, where: str) -> PartWriter:
        directory = self._open(upload_id)
        try:
            self._header(directory, key, upload_id)
            slot = self._slot(directory, size)
            if slot is not None and size <= slot:
                writer = self._claim_slot(directory, number, size, slot, where)
                if writer is not None:
                    return writer
            name = f"p-{number}-{secrets.token_hex(8)}"
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666, dir_fd=directory)
            return PartWriter(directory, number, size, name, 0, fd, where, self._fsync)
        except BaseException:
            os.close(directory)
            raise

    def _claim_slot(self, directory: int, number: int, size: int, slot: int, where: str) -> PartWriter | None:
        claim = f"claim-{number}"
        try:
            os.close(os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666, dir_fd=directory))
        except FileExistsError:
            return None  # written (or being written) once already: a re-upload gets a file of its own
        try:
            fd = os.open("data", os.O_WRONLY | os.O_CREAT | _FLAGS, 0o666, dir_fd=directory)
            fcntl.flock(fd, fcntl.LOCK_SH)
            current = os.stat("data", dir_fd=directory, follow_symlinks=False)
            if current.st_ino != os.fstat(fd).st_ino:
                os.close(fd)
                raise NotFoundError("the multipart upload is being completed")
        except BaseException:
            os.unlink(claim, dir_fd=directory)
            raise
        return PartWriter(directory, number, size, "data", (number - 1) * slot, fd, where, self._fsync, claim)

    def _records(
        self, directory: int, upload_id: str, parts: Sequence[StoredPart]
    ) -> list[dict[str, object]]:
        records = []
        for part in parts:
            raw = _read_small(directory, f"part-{part.number}")
            try:
                record = json.loads(raw) if raw is not None else None
            except ValueError:
                record = None
            if not isinstance(record, dict) or record.get("etag") != part.etag.strip('"'):
                raise BadInputError(
                    f"part {part.number} of upload {upload_id} was not uploaded or its ETag differs",
                    field="parts",
                )
            records.append(record)
        return records

    def seal_into(self, temp: TempFile, key: str, upload_id: str, parts: Sequence[StoredPart]) -> Sealed:
        """Make the upload's object ``temp``'s file, ready to commit (see :meth:`seal`)."""
        try:
            directory, sealed = self.seal(key, upload_id, parts)
        except OSError as e:
            raise map_oserror(e, temp.where, reading=False) from e
        try:
            temp.adopt(directory, sealed.name, sealed.lock_fd)
        finally:
            os.close(directory)
        return sealed

    def seal(self, key: str, upload_id: str, parts: Sequence[StoredPart]) -> tuple[int, Sealed]:
        """The upload's directory (open) and its object, ready to move into place: the slotted file
        itself (fast path) or a new file the parts were copied into (fallback)."""
        if not parts or any(b.number <= a.number for a, b in itertools.pairwise(parts)):
            raise BadInputError("the parts must be listed in ascending order", field="parts")
        directory = self._open(upload_id)
        try:
            header = self._header(directory, key, upload_id)
            records = self._records(directory, upload_id, parts)
            etag = multipart_etag([str(r["etag"]) for r in records])
            sizes = [int(str(r["size"])) for r in records]
            total = sum(sizes)
            raw_slot = _read_small(directory, "slot")
            slot = int(raw_slot) if raw_slot is not None else -1
            slotted = (
                [p.number for p in parts] == list(range(1, len(parts) + 1))
                and all(r["file"] == "data" for r in records)
                and all(s == slot for s in sizes[:-1])
            )
            name = "sealed-" + secrets.token_hex(8)
            lock = (self._seal_slotted if slotted else self._copy_parts)(directory, name, records, total)
            meta = header.get("metadata")
            ctype = header.get("content_type")
            sealed = Sealed(
                name,
                total,
                etag,
                ctype if isinstance(ctype, str) else None,
                meta if isinstance(meta, dict) else {},
                lock,
            )
            return directory, sealed
        except BaseException:
            os.close(directory)
            raise

    def _seal_slotted(
        self, directory: int, name: str, records: Sequence[dict[str, object]], total: int
    ) -> int:
        fd = os.open("data", os.O_RDWR | _FLAGS, dir_fd=directory)
        try:
            os.rename("data", name, src_dir_fd=directory, dst_dir_fd=directory)  # no new writer finds it
            fcntl.flock(fd, fcntl.LOCK_EX)  # the writers that did are done
            os.ftruncate(fd, total)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _copy_parts(self, directory: int, name: str, records: Sequence[dict[str, object]], total: int) -> int:
        out = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666, dir_fd=directory)
        try:
            at = 0
            for record in records:
                src = os.open(str(record["file"]), os.O_RDONLY | _FLAGS, dir_fd=directory)
                try:
                    _copy_range(src, int(str(record["offset"])), out, at, int(str(record["size"])))
                finally:
                    os.close(src)
                at += int(str(record["size"]))
            if at != total:
                raise BadInputError("the parts changed while being completed", field="parts")
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=directory)
            raise
        return out

    def remove(self, upload_id: str) -> None:
        """Remove the upload's directory and everything in it (an unknown upload: nothing)."""
        try:
            directory = self._open(upload_id)
        except NotFoundError:
            return
        try:
            for entry in os.listdir(directory):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry, dir_fd=directory)
        finally:
            os.close(directory)
        root = self._tree.open()
        try:
            mp = open_dir(root, [MP_DIR])
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(upload_id, dir_fd=mp)
            finally:
                os.close(mp)
        finally:
            os.close(root)


def _copy_range(src: int, src_at: int, dst: int, dst_at: int, length: int) -> None:
    """Copy ``length`` bytes in the kernel (``copy_file_range``; plain reads and writes where the
    filesystem cannot)."""
    done = 0
    while done < length:
        want = min(_COPY_CHUNK, length - done)
        try:
            n = os.copy_file_range(src, dst, want, src_at + done, dst_at + done)
        except OSError as e:
            if e.errno not in (errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            data = os.pread(src, want, src_at + done)
            n = os.pwrite(dst, data, dst_at + done) if data else 0
        if n == 0:
            raise BadInputError("a part is shorter than recorded", field="parts")
        done += n

"""What a sweep checks of a mark's files before it acts on them: the run record in the KV.

A mark's outputs lie in the namespace, where anyone with access to the bucket can write; its run
record (:mod:`lakefs_gc.runs.record`) lies in the KV. Every function here compares what a file IS
with what the record says it was when the mark wrote it, and refuses with
:class:`~lakefs_core.errors.TamperedError` (one line naming the file and what is wrong; ``reason``
one of :data:`REASONS`) on any difference:

- ``no-record``: the KV has no record of the run; ``not-complete``: its record is not ``complete``
  (failed, already swept);
- ``missing-file``: a file the record lists is absent, a part directory lacks a recorded part;
- ``extra-file``: a part (``part-*``) the record does not list, a checkpoint it never recorded;
- ``digest``: a file's SHA-256 or size differs;
- ``outside-data``: a candidate address that is not a data object of the namespace.

Small files are read once and their digest taken on the very bytes that are parsed
(:func:`read_verified`); part files are digested streamed (:func:`verify_parts`), and a reader that
acts on a part digests it again as it reads (:func:`check_digest` at its end), so a file swapped
between the check and the read is caught too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import CorruptDataError, LakeFSError, NotFoundError, TamperedError
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_gc.runs.parts import file_name, list_parts, ns_relative
from lakefs_gc.runs.record import FileDigest, RunRecord, RunRecords, digest_of, file_digest

REASONS = ("no-record", "not-complete", "missing-file", "extra-file", "digest", "outside-data")


async def trusted_record(graveler: Graveler, repo_id: str, run_id: str) -> tuple[str, RunRecord]:
    """``(pointer, record)`` of a run whose record is ``complete``; refuses any other."""
    found = await RunRecords(graveler, repo_id).read(run_id)
    if found is None:
        raise TamperedError(
            f"run {run_id} of {repo_id!r} has no run record in the KV: its files are not trusted",
            reason="no-record",
        )
    record = found[1]
    if record.state != "complete":
        why = f" ({record.reason})" if record.reason else ""
        raise TamperedError(
            f"run {run_id} of {repo_id!r} is {record.state}{why} in its KV record, not complete",
            reason="not-complete",
        )
    return found


def expected(record: RunRecord, ns: StorageNamespace, store: BlockStore, key: str) -> FileDigest:
    """The recorded digest of ``key`` (refused when the record does not list it)."""
    digest = record.files.get(ns_relative(ns, key))
    if digest is None:
        raise TamperedError("the run record does not list this file", reason="extra-file",
                            file=file_name(store, key))  # fmt: skip
    return digest


def check_digest(actual: FileDigest, want: FileDigest, file: str) -> None:
    if actual != want:
        raise TamperedError(
            f"SHA-256 {actual.sha256[:16]}... of {actual.size} bytes, the run record says "
            f"{want.sha256[:16]}... of {want.size} bytes",
            reason="digest",
            file=file,
        )


@contextlib.asynccontextmanager
async def parsed_as_recorded(store: BlockStore, key: str, want: FileDigest) -> AsyncIterator[None]:
    """Around the reading of a recorded file: absent, it is refused (``missing-file``); a
    :class:`CorruptDataError` raised while parsing is
    :class:`TamperedError` when the file's digest is not the recorded one (the mark wrote it
    well-formed), and stays what it was otherwise (the mark wrote it so: a bug, not an attack)."""
    try:
        yield
    except TamperedError:
        raise
    except NotFoundError:
        raise TamperedError("recorded in the run record but absent", reason="missing-file",
                            file=file_name(store, key)) from None  # fmt: skip
    except CorruptDataError as e:
        actual = await file_digest(store, key)
        if actual != want:
            raise TamperedError(
                f"{e.args[0] if e.args else e}; its SHA-256 is not the run record's",
                reason="digest",
                file=file_name(store, key),
            ) from e
        raise


async def read_verified(
    store: BlockStore, ns: StorageNamespace, record: RunRecord, key: str, *, limit: int
) -> bytes:
    """A small file's bytes (at most ``limit + 1`` read), checked against the record."""
    return await read_as_recorded(store, key, expected(record, ns, store, key), limit=limit)


async def read_as_recorded(store: BlockStore, key: str, want: FileDigest | None, *, limit: int) -> bytes:
    """A small file's bytes (at most ``limit + 1`` read) whose digest must be ``want`` (None: the
    record lists no such file, ``missing-file``)."""
    if want is None:
        raise TamperedError("the run record lists no such file", reason="missing-file",
                            file=file_name(store, key))  # fmt: skip
    try:
        raw = await store.get(key, length=limit + 1)
    except NotFoundError:
        raise TamperedError("recorded in the run record but absent", reason="missing-file",
                            file=file_name(store, key)) from None  # fmt: skip
    check_digest(digest_of(raw), want, file_name(store, key))
    return raw


async def verify_parts(
    store: BlockStore, ns: StorageNamespace, record: RunRecord, directory_key: str, *, digests: bool
) -> list[str]:
    """The ``part-*`` keys of ``directory_key``, exactly the record's under it (none extra, none
    missing); with ``digests``, each part's digest checked too (one streamed read each)."""
    parts = await list_parts(store, directory_key)
    relative = ns_relative(ns, directory_key).rstrip("/") + "/"
    recorded = {k for k in record.files if k.startswith(relative)}
    listed = {ns_relative(ns, k) for k in parts}
    for extra in sorted(listed - recorded)[:1]:
        raise TamperedError("a part the run record does not list", reason="extra-file",
                            file=file_name(store, ns.key(extra)))  # fmt: skip
    for missing in sorted(recorded - listed)[:1]:
        raise TamperedError("recorded in the run record but absent", reason="missing-file",
                            file=file_name(store, ns.key(missing)))  # fmt: skip
    if digests:
        for key in parts:
            check_digest(
                await file_digest(store, key), record.files[ns_relative(ns, key)], file_name(store, key)
            )
    return parts


async def mark_failed(
    graveler: Graveler, repo_id: str, found: tuple[str, RunRecord] | None, error: TamperedError
) -> None:
    """Record the refusal: a ``complete`` record becomes ``failed`` with the reason, so no later
    sweep or mirror acts on the run. A run without a record has none to mark (its mark may still be
    finishing: it stays unsweepable); a record that moved meanwhile is left as it is (the error
    carries a note)."""
    if found is None or found[1].state != "complete":
        return
    reason = f"{error.reason}: {error}"[:1000]
    try:
        await RunRecords(graveler, repo_id).write(
            found[1].model_copy(update={"state": "failed", "reason": reason}), replacing=found[0]
        )
    except LakeFSError as second:
        error.add_note(f"the run record could not be marked failed: {second}")

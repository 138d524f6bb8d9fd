"""``lakefs-core fs``: objects on a ref (lakectl's ``fs upload/cat/stat/rm/ls``).

- ``fs upload lakefs://repo/branch/path --source FILE`` stages one object (``--source -`` reads stdin);
  with ``--recursive`` the directory tree under ``--source`` is uploaded below the path prefix in
  batches staged in one KV batch each, up to ``upload_concurrency`` PUTs at a time, with a tqdm
  progress bar in bytes and files on stderr (only when stderr is a terminal, never with
  ``--no-progress``).
- ``fs cat`` streams the object's bytes to stdout (constant memory, ``--json`` too); ``fs download``
  writes an object, or with ``--recursive`` a prefix, to local files; ``fs stat`` describes it. The
  bulk and streaming paths live in :mod:`.fs_transfer`.
- ``fs rm`` stages a deletion; ``--recursive`` deletes every object under the path taken as a
  directory prefix (``dir`` means ``dir/``).
- ``fs ls lakefs://repo/ref/[prefix]`` lists like lakectl: without ``--recursive`` it groups by ``/``
  and prints ``common_prefix`` lines; every page is fetched.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING, Any

import click

from lakefs_core.cli import fs_transfer
from lakefs_core.cli.context import Session, local_path_error, run_session
from lakefs_core.cli.fs_transfer import STREAM_THRESHOLD, file_chunks, stream_chunks
from lakefs_core.cli.output import (
    emit,
    fmt_time,
    human_bytes,
    json_option,
    object_doc,
    parse_meta,
    prefix_doc,
    print_stat,
    printable,
    wants_json,
)
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError, undecodable_shown
from lakefs_core.repos.staging_writes import MAX_PATH_BYTES
from lakefs_core.repos.uri import Kind, LakeFSURI, parse_uri
from lakefs_core.service.cli import PATH_URI, PREFIX_URI

if TYPE_CHECKING:
    from lakefs_core.repos.objects import ObjectStat

LIST_PAGE = 1000
RM_BATCH = 1000  # tombstones staged per KV batch by `fs rm -r`


def _local_error(e: OSError, path: Path) -> LakeFSError:
    return local_path_error(e, path, "--source")


def _read_source(source: str) -> bytes | AsyncIterator[bytes]:
    """The body of a single-file upload: a small regular file's bytes, or a chunk stream.

    Anything but a regular file (stdin, a FIFO, a device) is streamed: its size says nothing about
    how much it will yield. Unreadable sources (permission denied, I/O error) are one-line errors.
    """
    if source == "-":
        if sys.stdin is None:
            raise BadInputError("stdin is closed", field="--source")
        return stream_chunks(sys.stdin.buffer, Path("<stdin>"))
    path = Path(source)
    try:
        st = path.stat()
    except OSError as e:
        raise _local_error(e, path) from e
    if S_ISDIR(st.st_mode):
        raise BadInputError(f"{source} is a directory (use --recursive)", field="--source")
    if not S_ISREG(st.st_mode) or st.st_size > STREAM_THRESHOLD:
        return file_chunks(path)
    try:
        return path.read_bytes()
    except OSError as e:
        raise _local_error(e, path) from e


def walk_tree(root: Path) -> tuple[list[tuple[str, str, int]], int]:
    """``(file path, relative posix path, size)`` for every regular file under ``root``, sorted, and
    how many other entries were skipped (FIFOs, sockets, devices, symlinked directories)."""
    # os.scandir, one stat per file (it follows a symlink, as reading the file will): directories
    # are descended as os.walk does (symlinked ones are not), anything but a regular file is skipped.
    # Paths stay strings: a Path per file cost about a tenth of the walk.
    found: list[tuple[str, str, int]] = []
    skipped = 0
    pending = [(os.fspath(root), "")]
    while pending:
        directory, rel = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    _check_name(entry)
                    name = f"{rel}{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, f"{name}/"))
                        continue
                    try:
                        st = entry.stat()
                    except FileNotFoundError as e:
                        if entry.is_symlink():
                            raise BadInputError(
                                f"{entry.path} is a symbolic link to a missing file", field="--source"
                            ) from e
                        raise _local_error(e, Path(entry.path)) from e
                    except OSError as e:
                        raise _local_error(e, Path(entry.path)) from e
                    if S_ISREG(st.st_mode):
                        if not os.access(entry.path, os.R_OK):  # found now, before any upload
                            denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), entry.path)
                            raise _local_error(denied, Path(entry.path))
                        found.append((entry.path, name, st.st_size))
                    else:
                        skipped += 1
        except OSError as e:
            raise _local_error(e, Path(e.filename or directory)) from e
    found.sort(key=lambda item: item[1])
    return found, skipped


def _check_paths(files: list[tuple[str, str, int]], prefix: str) -> None:
    """Every object path fits (see staging_writes.check_new_path): refused by file, before any upload."""
    for local, rel, _ in files:
        size = len(fs_transfer.object_key(prefix, rel).encode())
        if size > MAX_PATH_BYTES:
            raise BadInputError(
                f"{local}: its object path would be {size} bytes (at most {MAX_PATH_BYTES})", field="--source"
            )


def _check_name(entry: os.DirEntry[str]) -> None:
    """Object keys are UTF-8: a file name that is not (bytes the OS gave back as surrogates) is
    refused by name, before anything is uploaded."""
    try:
        entry.name.encode("utf-8")
    except UnicodeEncodeError:
        shown = undecodable_shown(entry.path)
        raise BadInputError(f"{shown}: the file name is not valid UTF-8", field="--source") from None


@click.group()
def fs() -> None:
    """Upload, read, list and delete objects."""


@fs.command("upload")
@click.argument("dest", metavar="lakefs://<repository>/<branch>/<path>", type=PREFIX_URI)
@click.option("--source", "-s", required=True, help="Local file or directory ('-' reads stdin).")
@click.option("--recursive", "-r", is_flag=True, help="Upload the directory tree under --source.")
@click.option("--content-type", default=None, help="MIME type of the uploaded object(s).")
@click.option("--no-progress", is_flag=True, help="Never show a progress bar.")
@json_option
def upload_cmd(
    dest: LakeFSURI, source: str, recursive: bool, content_type: str | None, no_progress: bool
) -> None:
    """Upload a local file (or, with --recursive, a directory tree) to a branch."""
    if recursive:
        _upload_tree(dest, source, content_type, no_progress)
        return
    if not dest.path or dest.path.endswith("/"):
        raise BadInputError("needs an object path (not a prefix) without --recursive", field="DEST")
    body = _read_source(source)

    async def op(s: Session) -> ObjectStat:
        return await s.objects.upload(dest.repo, dest.ref, dest.path, body, content_type=content_type)

    stat = run_session(op)
    emit(object_doc(stat), lambda: print_stat(stat))


def _upload_tree(dest: LakeFSURI, source: str, content_type: str | None, no_progress: bool) -> None:
    root = Path(source)
    if not root.is_dir():
        if not root.exists():
            raise NotFoundError(f"no such directory: {source}")
        raise BadInputError(f"{source} is not a directory", field="--source")
    try:
        files, skipped = walk_tree(root)
    except OSError as e:
        raise _local_error(e, Path(e.filename or source)) from e
    _check_paths(files, dest.path)
    total = sum(size for _, _, size in files)

    async def op(s: Session) -> list[ObjectStat]:
        return await fs_transfer.upload_tree(s, dest, files, content_type, no_progress)

    results = run_session(op)
    if wants_json():  # a document per object only when it is printed
        results.sort(key=lambda st: st.path)
        doc = {
            "results": [object_doc(st) for st in results],
            "count": len(results),
            "size_bytes": total,
            "skipped": skipped,
        }
        emit(doc, lambda: None)
        return
    noun = "object" if len(results) == 1 else "objects"
    click.echo(f"Uploaded {len(results)} {noun} ({human_bytes(total)}) to {dest}")
    if skipped:
        click.echo(
            f"Skipped {skipped} entries that are not regular files (FIFOs, sockets, symlinked directories)"
        )


@fs.command("cat")
@click.argument("path", metavar="lakefs://<repository>/<ref>/<path>", type=PATH_URI)
@json_option
def cat_cmd(path: LakeFSURI) -> None:
    """Write an object's content to stdout."""
    as_json = wants_json()
    out = sys.stdout.buffer

    async def op(s: Session) -> None:
        if as_json:
            await fs_transfer.cat_json(s, path, out)
            return
        async for chunk in s.objects.read(path.repo, path.ref, path.path):
            out.write(chunk)

    run_session(op)
    out.flush()


@fs.command("download")
@click.argument("src", metavar="lakefs://<repository>/<ref>/<path>", type=PREFIX_URI)
@click.argument("dest", metavar="[DESTINATION]", required=False)
@click.option("--recursive", "-r", is_flag=True, help="Download every object under the path (a prefix).")
@click.option(
    "--parallelism", "-p", default=None, type=click.IntRange(1, 256), help="Objects downloaded at once."
)
@click.option("--no-progress", is_flag=True, help="Never show a progress bar.")
@click.option(
    "--skip-purged",
    is_flag=True,
    help="Skip objects an audited purge destroyed (counted) instead of stopping.",
)
@json_option
def download_cmd(
    *,
    src: LakeFSURI,
    dest: str | None,
    recursive: bool,
    parallelism: int | None,
    no_progress: bool,
    skip_purged: bool,
) -> None:
    """Download an object (or, with --recursive, all objects under a prefix) to local files.

    DESTINATION defaults to the current directory; an existing directory, or a path ending in
    '/', receives the object under its base name."""
    if dest == "":
        raise BadInputError("must not be empty", field="DESTINATION")
    target = Path(dest) if dest is not None else Path(".")
    into = dest is not None and dest.endswith(("/", os.sep))

    async def op(s: Session) -> tuple[list[tuple[ObjectStat, Path]], list[ObjectStat]]:
        limit = parallelism or s.config.upload_concurrency
        return await fs_transfer.download(
            s,
            src,
            target,
            recursive=recursive,
            parallelism=limit,
            no_progress=no_progress,
            into=into,
            skip_purged=skip_purged,
        )

    plan, purged = run_session(op)
    docs = [{"path": st.path, "destination": str(local), "size_bytes": st.size} for st, local in plan]

    def human() -> None:
        for st, local in plan:
            click.echo(printable(f"download: {src.with_path(st.path)} to {local}"))
        for st in purged:
            click.echo(printable(f"skipped (purged): {src.with_path(st.path)}"))

    doc: dict[str, Any] = {"results": docs, "count": len(docs), "size_bytes": sum(st.size for st, _ in plan)}
    if skip_purged:
        doc["skipped_purged"] = [st.path for st in purged]
    emit(doc, human)
    if purged:
        click.echo(f"lakefs-core: skipped {len(purged)} purged object(s)", err=True)


@fs.command("stat")
@click.argument("path", metavar="lakefs://<repository>/<ref>/<path>", type=PATH_URI)
@json_option
def stat_cmd(path: LakeFSURI) -> None:
    """Show an object's metadata (a purged object's too, with its purge record)."""

    async def op(s: Session) -> tuple[ObjectStat, dict[str, Any] | None]:
        stat, audit = await s.objects.describe(path.repo, path.ref, path.path)
        return stat, None if audit is None else await _purge_doc(s, path.repo, audit)

    stat, purge = run_session(op)
    doc = object_doc(stat)
    if purge is not None:
        doc["purged"], doc["purge"] = purge["audit_id"], purge

    def human() -> None:
        print_stat(stat)
        if purge is not None:
            click.echo(f"Purged: audit record {purge['audit_id']}")
            for key, label in (
                ("created_at", "Purged At"),
                ("actor", "Purged By"),
                ("reason", "Purge Reason"),
            ):
                if key in purge:
                    click.echo(printable(f"{label}: {purge[key]}"))

    emit(doc, human)


async def _purge_doc(s: Session, repo: str, audit_id: str) -> dict[str, Any]:
    """What ``fs stat`` shows of the purge ``audit_id``: its record without the address lists (as
    ``lakefs-gc purges``), or the id alone when the record is not (or no longer) readable."""
    try:
        record = await s.graveler.purge_record(repo, audit_id)
    except NotFoundError:
        return {"audit_id": audit_id}
    doc: dict[str, Any] = record.model_dump(mode="json", exclude={"addresses", "skipped_external"})
    return doc


@fs.command("update-metadata")
@click.argument("path", metavar="lakefs://<repository>/<branch>/<path>", type=PATH_URI)
@click.option(
    "--metadata", multiple=True, metavar="KEY=VALUE", help="User metadata (repeatable); replaces all."
)
@json_option
def update_metadata_cmd(path: LakeFSURI, metadata: tuple[str, ...]) -> None:
    """Replace an object's user metadata on a branch (lakectl's fs update-metadata)."""
    meta = parse_meta(metadata, field="--metadata")
    parse_uri(str(path.with_path("")), Kind.BRANCH, field="PATH")  # staged on a branch only

    async def op(s: Session) -> ObjectStat:
        return await s.objects.update_metadata(path.repo, path.ref, path.path, meta)

    stat = run_session(op)
    emit(object_doc(stat), lambda: print_stat(stat))


@fs.command("presign")
@click.argument("path", metavar="lakefs://<repository>/<ref>/<path>", type=PATH_URI)
@click.option(
    "--expiry",
    type=click.IntRange(1, 7 * 24 * 3600),
    default=900,
    show_default=True,
    help="Seconds the URL stays valid (at most 7 days).",
)
@json_option
def presign_cmd(path: LakeFSURI, expiry: int) -> None:
    """Print a presigned GET URL of an object in an S3 namespace (lakectl's fs presign)."""

    async def op(s: Session) -> str:
        return await s.objects.presign(path.repo, path.ref, path.path, expires_seconds=expiry)

    url = run_session(op)
    emit({"path": path.path, "url": url, "expiry_seconds": expiry}, lambda: click.echo(url))


@fs.command("rm")
@click.argument("path", metavar="lakefs://<repository>/<branch>/<path>", type=PREFIX_URI)
@click.option("--recursive", "-r", is_flag=True, help="Delete every object under the path (a prefix).")
@json_option
def rm_cmd(path: LakeFSURI, recursive: bool) -> None:
    """Delete an object (or, with --recursive, all objects under a prefix) on a branch."""
    if not recursive and (not path.path or path.path.endswith("/")):
        raise BadInputError("needs an object path (use --recursive for a prefix)", field="PATH")

    async def op(s: Session) -> list[str]:
        if not recursive:
            await s.objects.delete(path.repo, path.ref, path.path)
            return [path.path]
        prefix = path.path if not path.path or path.path.endswith("/") else path.path + "/"
        keys = [r.key async for r in s.graveler.list_entries(path.repo, path.ref, prefix=prefix.encode())]
        if not keys:
            raise NotFoundError(f"no objects under {path.with_path(prefix)}")

        # One KV batch per RM_BATCH keys (one transaction on SQL), as uploads stage theirs.
        for start in range(0, len(keys), RM_BATCH):
            await s.graveler.delete_entries(path.repo, path.ref, keys[start : start + RM_BATCH])
        return [k.decode("utf-8", "backslashreplace") for k in keys]

    deleted = run_session(op)

    def human() -> None:
        for p in deleted:
            click.echo(printable(f"deleted: {path.with_path(p)}"))

    emit({"deleted": deleted}, human)


def _ls_line(item: dict[str, Any], trim: str) -> str:
    shown = item["path"][len(trim) :] if item["path"].startswith(trim) else item["path"]
    if item["path_type"] == "object":
        mtime = fmt_time_unix(item["mtime"])
        detail = f"{mtime.ljust(29)}    {human_bytes(item['size_bytes']).ljust(12)}"
    else:
        detail = " " * (29 + 4 + 12)
    line = f"{item['path_type'].ljust(12)}    {detail}    {printable(shown)}"
    if "purged" in item:
        line += f"    (purged: audit record {item['purged']})"
    return line


def fmt_time_unix(ts: int) -> str:
    from datetime import UTC, datetime

    return fmt_time(datetime.fromtimestamp(ts, UTC))


def merge_page(objects: Iterable[ObjectStat], prefixes: Iterable[str]) -> list[dict[str, Any]]:
    items = [object_doc(o) for o in objects] + [prefix_doc(p) for p in prefixes]
    return sorted(items, key=lambda item: str(item["path"]))


@fs.command("ls")
@click.argument("prefix", metavar="lakefs://<repository>/<ref>/[prefix]", type=PREFIX_URI)
@click.option("--recursive", "-r", is_flag=True, help="List every object under the prefix (no grouping).")
@json_option
def ls_cmd(prefix: LakeFSURI, recursive: bool) -> None:
    """List objects and common prefixes under a prefix."""
    as_json = wants_json()
    trim = prefix.path[: prefix.path.rfind("/") + 1]
    results: list[dict[str, Any]] = []

    async def op(s: Session) -> None:
        after = ""
        while True:
            page = await s.objects.list(
                prefix.repo,
                prefix.ref,
                prefix=prefix.path,
                delimiter="" if recursive else "/",
                after=after,
                amount=LIST_PAGE,
            )
            purged = await s.objects.purged(prefix.repo, page.objects)
            for item in merge_page(page.objects, page.common_prefixes):
                if item["path"] in purged and item["path_type"] == "object":
                    item["purged"] = purged[item["path"]]  # the audit record that destroyed it
                if as_json:
                    results.append(item)
                else:
                    click.echo(_ls_line(item, trim))
            if not page.has_more:
                return
            after = page.next_after

    run_session(op)
    if as_json:
        emit({"results": results}, lambda: None)

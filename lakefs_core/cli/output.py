"""Output of the repository commands: lakectl-looking text by default, one JSON document with ``--json``.

``--json`` is accepted both as a global option (``lakefs-core --json log ...``) and on every
repository command (``lakefs-core log ... --json``); either one switches the command to print exactly
one JSON document on stdout. JSON field names follow the lakeFS API (``id``, ``commit_id``,
``creation_date`` as Unix seconds, ``path_type``, ``size_bytes``, ``checksum``, ``mtime``, ...); lists
are ``{"results": [...]}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lakefs_core.cli.state import app_state
from lakefs_core.errors import BadInputError

if TYPE_CHECKING:
    from lakefs_core.committed.model import DiffRecord
    from lakefs_core.refs.model import Commit, Repository
    from lakefs_core.repos.objects import ObjectStat

F = TypeVar("F", bound=Callable[..., Any])

_JSON_META = "lakefs_core.cli.json"


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_JSON_META] = True


def json_option(fn: F) -> F:
    """Add the per-command ``--json`` flag (same effect as the global one)."""
    return click.option(
        "--json",
        "json_output",
        is_flag=True,
        expose_value=False,
        callback=_set_json,
        help="Print one JSON document instead of text.",
    )(fn)


# C0 controls, DEL and C1 controls: a key may hold any of them (lakeFS allows it), and printed
# raw they would split a line or drive the terminal. Human output shows them escaped.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_CONTROLS.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def printable(text: str) -> str:
    """``text`` for a human reader: control characters as ``\\n``, ``\\x1b`` (JSON output keeps keys
    exact)."""
    return text.translate(_CONTROLS)


def wants_json() -> bool:
    ctx = click.get_current_context()
    return bool(ctx.meta.get(_JSON_META)) or app_state().json


def emit(doc: Any, human: Callable[[], None]) -> None:
    """Print ``doc`` as JSON when asked to, else call ``human`` to print text."""
    if wants_json():
        click.echo(json.dumps(doc, sort_keys=True))
    else:
        human()


# -- formatting -----------------------------------------------------------------------------------


def fmt_time(when: datetime | None) -> str:
    """Go's ``time.Time.String()`` shape (what lakectl prints), in UTC."""
    if when is None:
        return ""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def unix(when: datetime | None) -> int:
    return int(when.timestamp()) if when is not None else 0


def human_bytes(n: int) -> str:
    """go-humanize ``Bytes``: SI units, one decimal below 10 (``9 B``, ``1.2 kB``, ``34 MB``)."""
    if n < 10:
        return f"{n} B"
    sizes = ["B", "kB", "MB", "GB", "TB", "PB", "EB"]
    e = min(math.floor(math.log(n, 1000)), len(sizes) - 1)
    val = math.floor(n / 1000**e * 10 + 0.5) / 10
    return f"{val:.1f} {sizes[e]}" if val < 10 else f"{val:.0f} {sizes[e]}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain aligned table (header, then one line per row)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    for line in (headers, *rows):
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


# -- JSON documents (lakeFS API shapes) -------------------------------------------------------------


def commit_doc(c: Commit) -> dict[str, Any]:
    return {
        "id": c.id,
        "parents": list(c.parents),
        "committer": c.committer,
        "message": c.message,
        "creation_date": unix(c.creation_date),
        "meta_range_id": c.metarange_id,
        "metadata": dict(sorted(c.metadata.items())),
        "generation": c.generation,
        "version": c.version,
    }


def repo_doc(r: Repository) -> dict[str, Any]:
    return {
        "id": r.id,
        "creation_date": unix(r.creation_date),
        "default_branch": r.default_branch,
        "storage_namespace": r.storage_namespace,
        "read_only": r.read_only,
    }


def ref_doc(ref_id: str, commit_id: str) -> dict[str, Any]:
    return {"id": ref_id, "commit_id": commit_id}


def object_doc(s: ObjectStat) -> dict[str, Any]:
    return {
        "path": s.path,
        "path_type": "object",
        "physical_address": s.physical_address,
        "address_type": s.address_type.lower(),
        "checksum": s.etag,
        "size_bytes": s.size,
        "mtime": unix(s.last_modified),
        "content_type": s.content_type,
        "metadata": dict(sorted(s.metadata.items())),
    }


def prefix_doc(path: str) -> dict[str, Any]:
    return {"path": path, "path_type": "common_prefix"}


def diff_doc(d: DiffRecord) -> dict[str, Any]:
    from lakefs_core.format.records import decode_entry

    side = d.right if d.right is not None else d.left
    doc: dict[str, Any] = {
        "type": d.type.value,
        "path": d.key.decode("utf-8", "backslashreplace"),
        "path_type": "object",
    }
    if side is not None:
        doc["size_bytes"] = decode_entry(side.data).size
    return doc


# -- text ---------------------------------------------------------------------------------------------


def print_commit(c: Commit, *, show_metarange: bool = False) -> None:
    """One commit the way ``lakectl log`` prints it."""
    click.echo("")
    click.echo(f"ID:            {c.id}")
    if c.committer:
        click.echo(f"Author:        {c.committer}")
    click.echo(f"Date:          {fmt_time(c.creation_date)}")
    if show_metarange:
        click.echo(f"Meta Range ID: {c.metarange_id}")
    if len(c.parents) > 1:
        click.echo(f"Merge:         {', '.join(c.parents)}")
    click.echo("")
    for line in c.message.splitlines() or [""]:
        click.echo(f"    {line}")
    for k, v in sorted(c.metadata.items()):
        click.echo(f"        {k} = {v}")


def print_commit_summary(c: Commit) -> None:
    """The block ``lakectl commit``/``merge`` print for a new commit."""
    click.echo(f"ID: {c.id}")
    click.echo(f"Message: {c.message}")
    click.echo(f"Timestamp: {fmt_time(c.creation_date)}")
    click.echo(f"Parents: {', '.join(c.parents)}")
    if c.metadata:
        click.echo("Metadata:")
        for k, v in sorted(c.metadata.items()):
            click.echo(f"    {k} = {v}")


def print_stat(s: ObjectStat) -> None:
    click.echo(f"Path: {printable(s.path)}")
    click.echo(f"Modified Time: {fmt_time(s.last_modified)}")
    click.echo(f"Size: {s.size} bytes")
    click.echo(f"Human Size: {human_bytes(s.size)}")
    click.echo(f"Physical Address: {s.physical_address}")
    click.echo(f"Checksum: {s.etag}")
    click.echo(f"Content-Type: {s.content_type}")
    if s.metadata:
        click.echo("Metadata:")
        for k, v in sorted(s.metadata.items()):
            click.echo(f"    {k} = {v}")


def parse_meta(pairs: tuple[str, ...], *, field: str = "--meta") -> dict[str, str]:
    """``KEY=VALUE`` options as a mapping (commit metadata, object metadata); a key given twice or
    a pair without ``=`` is refused naming ``field``."""
    meta: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise BadInputError(f"{pair!r} is not key=value", field=field)
        if key in meta:
            raise BadInputError(f"key {key!r} given twice", field=field)
        meta[key] = value
    return meta

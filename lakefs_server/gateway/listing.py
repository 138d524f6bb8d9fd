"""ListObjects (v1) and ListObjectsV2 with lakeFS's semantics: a key is ``<ref>/<path>``.

- A prefix without ``/`` lists the repository's branches whose names start with it, as common
  prefixes ``<branch>/`` (whatever the delimiter, as lakeFS does); hidden branches are not listed.
- A prefix ``<ref>/<path prefix>`` lists the ref's objects: staging over committed on a branch, any
  delimiter (common prefixes are skipped by seeking, never read key by key), ``max-keys`` up to
  1,000 (an unparsable value means 1,000, as lakeFS reads it), pagination by ``marker``
  (v1: ``NextMarker`` when a delimiter is given, as S3) or ``continuation-token`` / ``start-after``
  (v2; the token is the last key returned, ``<ref>/<path>``). A marker or token naming another ref
  is BadRequest (lakeFS's answer). A missing ref lists nothing.
- ``encoding-type=url``: keys, prefixes, delimiter, markers percent-encoded (``/`` kept, ``+`` and
  space encoded), as S3 encodes them; other values of it are InvalidArgument.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import quote
from xml.sax.saxutils import escape

from aiohttp import web

from lakefs_core.auth.s3perms import S3Operation
from lakefs_core.errors import NotFoundError
from lakefs_core.repos.objects import ListPage
from lakefs_server.gateway.common import quoted_etag, repository
from lakefs_server.gateway.errors import S3Error
from lakefs_server.gateway.handler import S3Call, register
from lakefs_server.gateway.xml import element, iso8601, xml_response

__all__ = ["MAX_KEYS"]

MAX_KEYS = 1000


def _max_keys(call: S3Call) -> int:
    raw = call.query("max-keys")
    if raw is None or not raw.strip().lstrip("-").isdigit() or len(raw) > 12:
        return MAX_KEYS
    return max(0, min(int(raw), MAX_KEYS))


#: Text that percent-encoding (``/`` kept) and XML escaping both leave as it is: most keys.
_PLAIN = re.compile(r"[A-Za-z0-9_.~/-]*").fullmatch


def _plain_text(s: str) -> str:
    return s if _PLAIN(s) else escape(s)


def _url_text(s: str) -> str:
    return s if _PLAIN(s) else escape(quote(s, safe="/"))


def _encoder(call: S3Call) -> tuple[bool, Callable[[str], str]]:
    """Whether ``encoding-type=url`` was asked, and what makes a key XML text: percent-encoded
    then, escaped in any case (a plain key is both already: one regex match, no copy)."""
    kind = call.query("encoding-type")
    if kind is None:
        return False, _plain_text
    if kind.lower() != "url":
        raise S3Error("InvalidArgument", "encoding-type must be url")
    return True, _url_text


async def _branches(call: S3Call, prefix: str, after: str, limit: int) -> tuple[list[str], bool]:
    names: list[str] = []
    async for branch in call.ctx.graveler.list_branches(call.repo, after):
        if branch.hidden:
            continue
        if branch.id < prefix:
            continue
        if not branch.id.startswith(prefix):
            break
        if len(names) == limit:
            return names, True
        names.append(branch.id)
    return names, False


async def _objects(
    call: S3Call, ref: str, *, path_prefix: str, delimiter: str, after: str, limit: int
) -> ListPage:
    if limit == 0:
        return ListPage([], [], False, "")
    try:
        return await call.ctx.objects.list(
            call.repo, ref, prefix=path_prefix, delimiter=delimiter, after=after, amount=limit
        )
    except NotFoundError as e:
        if type(e) is not NotFoundError:
            raise
        return ListPage([], [], False, "")


def _cursor_path(cursor: str, ref: str, what: str) -> str:
    """The path within ``ref`` of a marker/token ``<ref>/<path>``; another ref is BadRequest."""
    cursor_ref, sep, path = cursor.partition("/")
    if not sep or cursor_ref != ref:
        raise S3Error("BadRequest", f"{what} must start with the prefix's ref {ref!r}")
    return path


def _contents(page: ListPage, ref: str, text: Callable[[str], str]) -> list[str]:
    parts = [
        f"<Contents><Key>{text(f'{ref}/{stat.path}')}</Key>"
        f"<LastModified>{iso8601(stat.last_modified)}</LastModified>"
        + element("ETag", quoted_etag(stat.etag))
        + f"<Size>{stat.size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        for stat in page.objects
    ]
    parts += [
        f"<CommonPrefixes><Prefix>{text(f'{ref}/{common}')}</Prefix></CommonPrefixes>"
        for common in page.common_prefixes
    ]
    return parts


@register(S3Operation.LIST_OBJECTS, S3Operation.LIST_OBJECTS_V2)
async def list_objects(call: S3Call) -> web.StreamResponse:
    await repository(call)
    v2 = call.operation is S3Operation.LIST_OBJECTS_V2
    prefix = call.query("prefix") or ""
    delimiter = call.query("delimiter") or ""
    limit = _max_keys(call)
    encoded, text = _encoder(call)
    if v2:
        token = call.query("continuation-token")
        start_after = call.query("start-after")
        cursor = token if token else (start_after or "")
    else:
        token = start_after = None
        cursor = call.query("marker") or ""
    ref, sep, path_prefix = prefix.partition("/")
    parts = [element("Name", call.repo), f"<Prefix>{text(prefix)}</Prefix>"]
    if delimiter:
        parts.append(f"<Delimiter>{text(delimiter)}</Delimiter>")
    parts.append(element("MaxKeys", limit))
    if encoded:
        parts.append(element("EncodingType", "url"))
    if not sep:
        names, truncated = await _branches(call, prefix, cursor.rstrip("/"), limit)
        body = [f"<CommonPrefixes><Prefix>{text(f'{n}/')}</Prefix></CommonPrefixes>" for n in names]
        next_cursor = names[-1] if names else ""
        count = len(names)
    else:
        after = _cursor_path(cursor, ref, "the marker") if cursor else ""
        page = await _objects(
            call, ref, path_prefix=path_prefix, delimiter=delimiter, after=after, limit=limit
        )
        body = _contents(page, ref, text)
        truncated = page.has_more
        next_cursor = f"{ref}/{page.next_after}" if truncated else ""
        count = len(page.objects) + len(page.common_prefixes)
    if v2:
        parts.append(element("KeyCount", count))
        if token:
            parts.append(element("ContinuationToken", token))
        if start_after:
            parts.append(f"<StartAfter>{text(start_after)}</StartAfter>")
        if truncated:
            parts.append(element("NextContinuationToken", next_cursor))
    else:
        parts.append(f"<Marker>{text(cursor)}</Marker>")
        if truncated and delimiter:
            parts.append(f"<NextMarker>{text(next_cursor)}</NextMarker>")
    parts.append(element("IsTruncated", truncated))
    return xml_response("ListBucketResult", [*parts, *body])

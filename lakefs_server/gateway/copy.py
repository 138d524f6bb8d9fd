"""CopyObject: same branch, across branches, across repositories; metadata COPY (default) or REPLACE.

The source (``x-amz-copy-source: [/]<repo>/<ref>/<path>``, any ref) is read by its entry, so a
concurrent overwrite of the source path never mixes two objects; the block store copies its bytes
to a fresh address of the destination through :meth:`lakefs_core.repos.objects.Objects.copy`
(server-side within one S3 store; journalled and staged as a PUT): repositories on different stores
copy too. The source's reads are checked like a GET (purged: ObjectPurged; data missing:
NoSuchVersion). ``x-amz-copy-source-if-match`` / ``-if-none-match`` / ``-if-modified-since`` /
``-if-unmodified-since`` are checked against the source; ``If-None-Match: *`` / ``If-Match`` against
the destination.
"""

from __future__ import annotations

from aiohttp import web

from lakefs_core.auth.s3perms import S3Operation, parse_copy_source
from lakefs_core.errors import NotFoundError
from lakefs_core.repos.objects import ObjectStat
from lakefs_server.gateway.common import (
    parse_http_date,
    quoted_etag,
    repository,
    require_branch,
    user_metadata,
)
from lakefs_server.gateway.errors import S3Error
from lakefs_server.gateway.handler import S3Call, register
from lakefs_server.gateway.objects import check_write_conditions, etag_matches, stat_object
from lakefs_server.gateway.xml import element, iso8601, xml_response

__all__: list[str] = []


def _check_source_conditions(call: S3Call, stat: ObjectStat) -> None:
    header = call.signed.header
    if_match, if_none = header("x-amz-copy-source-if-match"), header("x-amz-copy-source-if-none-match")
    if if_match is not None and not etag_matches(if_match, stat.etag):
        raise S3Error("PreconditionFailed", "x-amz-copy-source-if-match does not match the source")
    if if_none is not None and etag_matches(if_none, stat.etag):
        raise S3Error("PreconditionFailed", "x-amz-copy-source-if-none-match matches the source")
    modified = stat.last_modified.timestamp() if stat.last_modified else 0.0
    since = parse_http_date(header("x-amz-copy-source-if-modified-since"))
    if since is not None and if_none is None and modified <= since.timestamp():
        raise S3Error("PreconditionFailed", "the source was not modified since")
    until = parse_http_date(header("x-amz-copy-source-if-unmodified-since"))
    if until is not None and if_match is None and int(modified) > until.timestamp():
        raise S3Error("PreconditionFailed", "the source was modified since")


@register(S3Operation.COPY_OBJECT)
async def copy_object(call: S3Call) -> web.StreamResponse:
    repo = await repository(call)
    if repo.read_only:
        raise S3Error("ErrReadOnlyRepository", f"repository {repo.id!r} is read-only")
    await require_branch(call, call.repo, call.ref)
    if not call.path:
        raise S3Error("InvalidArgument", "the key names no object path within the branch")
    source = parse_copy_source(call.signed.header("x-amz-copy-source") or "")
    stat = await stat_object(call, source.repo, source.ref, source.path)
    _check_source_conditions(call, stat)
    directive = (call.signed.header("x-amz-metadata-directive") or "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "x-amz-metadata-directive is COPY or REPLACE")
    if directive == "COPY":
        content_type, metadata = stat.content_type or None, dict(stat.metadata)
    else:
        content_type, metadata = call.signed.header("content-type"), user_metadata(call)
    condition = await check_write_conditions(call)
    try:
        copied = await call.ctx.objects.copy(
            source.repo,
            stat,
            call.repo,
            call.ref,
            call.path,
            content_type=content_type or "",
            metadata=metadata,
            condition=condition,
        )
    except NotFoundError as e:
        # Objects.copy names missing source data by the store's NotFoundError as its cause.
        if type(e) is not NotFoundError or not isinstance(e.__cause__, NotFoundError):
            raise
        raise S3Error("NoSuchVersion", "the source's data is missing from the store") from None
    result = [
        element("LastModified", iso8601(copied.last_modified)),
        element("ETag", quoted_etag(copied.etag)),
    ]
    return xml_response("CopyObjectResult", result)

"""The XML S3 answers with and reads: small builders (escaped text, no templates) and a bounded parser.

Request bodies (DeleteObjects, CompleteMultipartUpload) are hostile: :func:`read_xml` reads at most
:data:`MAX_XML_BYTES`, refuses any DTD (no entity expansion is ever attempted) and answers
``MalformedXML`` for anything it cannot parse, naming what was wrong.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import UTC, datetime
from xml.sax.saxutils import escape

from aiohttp import web

from lakefs_server.gateway.errors import S3Error

__all__ = ["MAX_XML_BYTES", "S3_NS", "element", "iso8601", "read_xml", "xml_response"]

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_XML_BYTES = 2 * 1024 * 1024  # 1,000 keys of 1,024 bytes, with their markup


def iso8601(when: datetime | None) -> str:
    """S3's timestamp in listings: ``2006-02-03T16:45:09.000Z``."""
    when = (when or datetime.fromtimestamp(0, UTC)).astimezone(UTC)
    if when.year >= 1000:  # (isoformat pads a year to 4 digits, strftime may not: kept as it was)
        return when.isoformat(timespec="milliseconds")[:23] + "Z"  # a third of strftime's time
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def element(name: str, value: object) -> str:
    """``<name>escaped value</name>`` (booleans as S3 writes them)."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"<{name}>{escape(str(value))}</{name}>"


def xml_response(
    root: str, parts: Iterable[str], *, status: int = 200, namespace: bool = True
) -> web.Response:
    ns = f' xmlns="{S3_NS}"' if namespace else ""
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<{root}{ns}>{"".join(parts)}</{root}>'
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


async def read_xml(request: web.Request, root: str) -> ET.Element:
    """The request body parsed, its root element named ``root`` (any namespace)."""
    body = await request.content.read(MAX_XML_BYTES + 1)
    if len(body) > MAX_XML_BYTES:
        raise S3Error("MalformedXML", f"the XML body is larger than {MAX_XML_BYTES} bytes")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "DTDs are not accepted")
    try:
        parsed = ET.fromstring(body)
    except ET.ParseError as e:
        raise S3Error(
            "MalformedXML", f"the body is not well-formed XML ({e.msg if hasattr(e, 'msg') else e})"
        ) from None
    if local_name(parsed.tag) != root:
        raise S3Error("MalformedXML", f"the body's root element must be {root}")
    return parsed


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2]


def children(parent: ET.Element, name: str) -> list[ET.Element]:
    return [child for child in parent if local_name(child.tag) == name]


def child_text(parent: ET.Element, name: str) -> str | None:
    found = children(parent, name)
    if not found:
        return None
    return found[0].text or ""

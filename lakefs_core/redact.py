"""Credentials in URLs: where the userinfo ends, and the one masking function for messages and logs.

A password may hold ``@``, ``:``, ``/`` or ``%`` written raw (``postgresql://user:p@ss/w@host/db``);
RFC 3986 wants them percent-encoded, but people paste passwords as they are, and splitting at the
FIRST ``@`` (as SQLAlchemy's URL parser and the old masking did) leaves the rest of the password in
the "host" for every message to repeat. Here the userinfo ends at the LAST ``@`` whose user part
(the text before the first ``:``) holds no ``/``: a path that merely contains ``@``
(``s3://bucket/dir/a@b``) is not taken for credentials, while a password with ``/`` or ``@`` is
covered whole.

:func:`redact_url` masks the whole userinfo (user and password) as ``***``; it may over-mask a URL
whose path or query also holds ``@`` after credentials (``user:pw@host/db?x=a@b`` shows as
``***@b``), never under-mask. :func:`userinfo_end` is the split it uses; parsers that must keep a
trailing ``@`` in the path apart (the SQL URL normaliser) use :func:`sql_userinfo_end`, and
:func:`quote_sql_userinfo` percent-encodes such a userinfo for a URL parser.
"""

from __future__ import annotations

import re

__all__ = ["quote_sql_userinfo", "redact_url", "sql_userinfo_end", "userinfo_end"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.DOTALL)
# What may follow the userinfo's ``@`` in a SQL URL: a host (name, IPv4 or [IPv6]), an optional
# port, then the end of the authority; or nothing before the path (a Unix-socket URL, ``user@/db``).
_SQL_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::[0-9]+)?(?=[/?#]|$)|(?=/)")


def _user_part_ok(userinfo: str) -> bool:
    return "/" not in userinfo.split(":", 1)[0]


def userinfo_end(rest: str) -> int:
    """The index of the ``@`` ending the userinfo in ``rest`` (the URL after ``://``), or -1."""
    at = rest.rfind("@")
    while at >= 0:
        if _user_part_ok(rest[:at]):
            return at
        at = rest.rfind("@", 0, at)
    return -1


def sql_userinfo_end(rest: str) -> int:
    """Like :func:`userinfo_end` for SQL URLs, whose query may carry ``@`` (``sslrootcert=/a@b``).

    The userinfo ends at the last ``@`` before the query (the first ``?``) that is followed by a whole
    ``host[:port]`` authority and whose user part holds no ``/``: ``user:p@ss/w@host/db?x=/a@b``
    splits before ``host``. -1 when there is no such ``@``. A raw ``?`` in a password must be
    percent-encoded, and a database name holding ``@`` after credentials is taken for a host.
    """
    head = rest.split("?", 1)[0]
    at = head.rfind("@")
    while at >= 0:
        if _user_part_ok(head[:at]) and _SQL_HOST.match(head, at + 1):
            return at
        at = head.rfind("@", 0, at)
    return -1


# What a pasted password may hold raw that would end the userinfo for a URL parser.
_USERINFO_QUOTES = str.maketrans({"@": "%40", "/": "%2F", "#": "%23"})


def quote_sql_userinfo(url: str) -> str:
    """``url`` with ``@``, ``/`` and ``#`` inside its userinfo (as :func:`sql_userinfo_end` splits
    it) percent-encoded, so a URL parser takes the password whole; the drivers decode it back."""
    scheme, sep, rest = url.partition("://")
    end = sql_userinfo_end(rest) if sep else -1
    if end <= 0:
        return url
    return f"{scheme}://{rest[:end].translate(_USERINFO_QUOTES)}{rest[end:]}"


def redact_url(text: str) -> str:
    """``text`` fit for a message or a log line: a URL's whole userinfo becomes ``***``.

    Anything that is not ``scheme://...`` is returned as it is.
    """
    m = _URL.match(text)
    if m is None:
        return text
    rest = m.group(2)
    end = userinfo_end(rest)
    if end < 0:
        return text
    return f"{m.group(1)}***@{rest[end + 1 :]}"

"""Reading hostile request input into pydantic models, with 400 errors that name the field.

- :func:`json_object` reads a JSON object body: unreadable framing or encoding, an empty body,
  invalid JSON (also ``NaN``/``Infinity``, over-deep nesting), a non-object, or strings that are not
  valid Unicode (lone surrogates) are :class:`~lakefs_core.errors.BadInputError` with ``field="body"``
  (or the path of the bad string).
- :func:`parse_model` validates a mapping (a JSON body, the path parameters, the query string)
  against a model. The first pydantic error becomes a ``BadInputError`` whose ``field`` is the
  dotted location (``branch_filter.2``) and whose message is: "unknown field", "required field is
  missing", the text of a validator's ``ValueError``, the caller's hint for that field, or pydantic's
  own message, in that order. Request values are never echoed into messages (no ``input`` is kept).

The models are the single description of the input: the same classes produce the OpenAPI document
(:mod:`lakefs_core.service.http.openapi`), so the schema and the server cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from pydantic import BaseModel, ValidationError

from lakefs_core.errors import BadInputError

__all__ = ["UnreadableBodyError", "json_object", "parse_model"]

M = TypeVar("M", bound=BaseModel)


class UnreadableBodyError(BadInputError):
    """The request body could not be decoded; the connection is closed after the 400 response."""


def _bad_strings(value: Any) -> str | None:
    """The path of the first string (or key) that is not valid Unicode text (a lone surrogate).

    Iterative: the JSON parser already bounded the depth, this must not add recursion of its own.
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return path or "body"
        elif isinstance(node, dict):
            for k, v in reversed(node.items()):
                sub = f"{path}.{k}" if path else str(k)
                stack.append((sub, v))
                stack.append((sub, k))
        elif isinstance(node, list):
            for i in reversed(range(len(node))):
                stack.append((f"{path}.{i}" if path else str(i), node[i]))
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request's body as a JSON object (see the module for what is refused)."""
    try:
        raw = await request.read()
    except (RequestPayloadError, HttpProcessingError):
        raise UnreadableBodyError(
            "the body cannot be read (bad Content-Encoding or framing)", field="body"
        ) from None
    if not raw.strip():
        raise BadInputError("a JSON object body is required", field="body")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadInputError("the body is not valid JSON", field="body") from None
    if not isinstance(data, dict):
        raise BadInputError("the body must be a JSON object", field="body")
    bad = _bad_strings(data)
    if bad is not None:
        raise BadInputError("strings must be valid Unicode (no lone surrogates)", field=bad)
    return data


def parse_model(model: type[M], data: Mapping[str, Any], hints: Mapping[str, str] | None = None) -> M:
    """``model`` validated from ``data``, or :class:`BadInputError` naming the first bad field.

    ``hints`` maps a top-level field name to the message used for a malformed value of that field
    (e.g. the syntax of an id), instead of pydantic's generic text.
    """
    try:
        return model.model_validate(dict(data))
    except ValidationError as e:
        first = e.errors(include_input=False, include_url=False, include_context=False)[0]
        loc = [str(p) for p in first["loc"]]
        field = ".".join(loc) or "body"
        kind = first["type"]
        if kind == "extra_forbidden":
            message = "unknown field"
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "value_error":
            message = str(first["msg"]).removeprefix("Value error, ")
        elif hints and loc and loc[0] in hints:
            message = hints[loc[0]]
        else:
            message = str(first["msg"])
        raise BadInputError(message, field=field) from None

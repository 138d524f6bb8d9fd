"""The route table of a daemon's API and the OpenAPI 3.0.3 document generated from it.

Each :class:`Route` declares its method, path, handler, and the pydantic models of its path
parameters, query string, request body and response body, with its success status and the error
statuses it may answer. :func:`openapi_document` builds the document from those models alone
(``pydantic.json_schema.models_json_schema`` with ``ref_template="#/components/schemas/{model}"``):
there is no second, hand-written schema to drift from what the server validates.

JSON Schema (2020-12, what pydantic emits) is turned into OpenAPI 3.0's dialect: ``anyOf [X,
{"type": "null"}]`` becomes ``X`` with ``nullable: true`` (``allOf [X]`` when ``X`` is a reference),
``const`` becomes a one-value ``enum``, and pydantic's ``title`` keys are dropped. Models should
use ``extra="forbid"`` (-> ``additionalProperties: false``) and avoid constructs OpenAPI 3.0 lacks
(``prefixItems``, numeric ``exclusiveMinimum``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

__all__ = ["ERROR_DESCRIPTIONS", "Route", "openapi_document"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REF_TEMPLATE = "#/components/schemas/{model}"

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Malformed request; `field` names the offending parameter or body field.",
    401: "Missing or wrong credentials (HTTP basic auth with a configured access key id and secret).",
    404: "No such resource (the message names it).",
    409: "Conflicts with the current state; `field` names what collided.",
    422: "Well-formed, but the daemon cannot act on it (the message says why; `field` names the input).",
    500: "Internal error (details are in the daemon's log, never in the response).",
    502: "An object store or database refused this daemon's credentials.",
    503: "A database or store is temporarily unreachable; retry later (`Retry-After`).",
    507: "A store or database is full.",
}


@dataclass(frozen=True)
class Route:
    """One operation. ``response=None`` means no JSON body (e.g. 204); ``content_type`` other than
    JSON (e.g. ``text/plain`` for ``/metrics``) is documented as a plain string. ``public`` routes
    need no authentication. ``errors`` lists the error statuses beyond the automatic ones (401 and
    503 on authenticated routes, 400 on routes that take parameters or a body)."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: str
    handler: Handler
    operation_id: str
    summary: str
    status: int = 200
    response: type[BaseModel] | None = None
    request: type[BaseModel] | None = None
    path_params: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    errors: tuple[int, ...] = ()
    public: bool = False
    content_type: str = "application/json"
    description: str = ""
    links: Mapping[str, Any] = field(default_factory=dict)

    def error_statuses(self) -> list[int]:
        codes = set(self.errors)
        if not self.public:
            codes |= {401, 503}
        if self.request is not None or self.path_params is not None or self.query is not None:
            codes.add(400)
        return sorted(codes)


def _to_openapi30(node: Any) -> Any:
    """JSON Schema as pydantic emits it -> the OpenAPI 3.0 schema dialect (see the module)."""
    if isinstance(node, list):
        return [_to_openapi30(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_openapi30(v) for k, v in node.items() if k != "title"}
    if "properties" in node:  # property NAMES are data, not keywords: keep a property called "title"
        out["properties"] = {k: _to_openapi30(v) for k, v in node["properties"].items()}
    if "const" in out:
        out["enum"] = [out.pop("const")]
    options = out.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        del out["anyOf"]
        if len(rest) == 1 and "$ref" not in rest[0]:
            out = {**rest[0], **out}
        elif len(rest) == 1:
            out["allOf"] = rest
        else:
            out["anyOf"] = rest
        out["nullable"] = True
        if out.get("default", 0) is None:
            del out["default"]
    return out


def _schemas(routes: Sequence[Route], error_model: type[BaseModel]) -> dict[str, Any]:
    wanted: dict[type[BaseModel], JsonSchemaMode] = {error_model: "serialization"}
    for route in routes:
        if route.request is not None:
            wanted[route.request] = "validation"
        if route.response is not None:
            wanted[route.response] = "serialization"
    _, top = models_json_schema(list(wanted.items()), ref_template=REF_TEMPLATE)
    defs: dict[str, Any] = top.get("$defs", {})
    return {name: _to_openapi30(schema) for name, schema in sorted(defs.items())}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=model.__name__)}


def _parameters(model: type[BaseModel] | None, where: str) -> list[dict[str, Any]]:
    if model is None:
        return []
    schema = _to_openapi30(model.model_json_schema(ref_template=REF_TEMPLATE))
    required = set(schema.get("required", []))
    params = []
    for name, raw in schema.get("properties", {}).items():
        prop = dict(raw)
        param: dict[str, Any] = {"name": name, "in": where, "required": where == "path" or name in required}
        description = prop.pop("description", None)
        if description:
            param["description"] = description
        param["schema"] = prop
        params.append(param)
    return params


def _operation(route: Route, error_ref: dict[str, str]) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": route.description or route.summary}
    if route.response is not None:
        ok["content"] = {route.content_type: {"schema": _ref(route.response)}}
    elif route.content_type != "application/json":
        ok["content"] = {route.content_type: {"schema": {"type": "string"}}}
    if route.links:
        ok["links"] = dict(route.links)
    responses: dict[str, Any] = {str(route.status): ok}
    for code in route.error_statuses():
        error: dict[str, Any] = {
            "description": ERROR_DESCRIPTIONS.get(code, "Error."),
            "content": {"application/json": {"schema": error_ref}},
        }
        if code == 401:
            error["headers"] = {
                "WWW-Authenticate": {
                    "description": "Basic challenge",
                    "schema": {"type": "string"},
                    "required": True,
                }
            }
        responses[str(code)] = error
    op: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary, "responses": responses}
    params = _parameters(route.path_params, "path") + _parameters(route.query, "query")
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(route.request)}},
        }
    if route.public:
        op["security"] = []
    return op


def openapi_document(
    routes: Sequence[Route], *, title: str, version: str, description: str, error_model: type[BaseModel]
) -> dict[str, Any]:
    """The OpenAPI 3.0.3 document describing ``routes`` (errors are bodies of ``error_model``)."""
    paths: dict[str, dict[str, Any]] = {}
    error_ref = _ref(error_model)
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, error_ref)
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": {
            "schemas": _schemas(routes, error_model),
            "securitySchemes": {"basicAuth": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"basicAuth": []}],
    }

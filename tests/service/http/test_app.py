"""The shared HTTP platform (:mod:`lakefs_core.service.http`) on its own, over real sockets.

A tiny daemon ("demo") built with :func:`build_app`: one authenticated route raising a chosen
error class, one with a path parameter, query and body model; real ``DaemonLoop`` liveness; real
readiness probes. Checks: basic auth; every error class of the project maps to the status its
``http_status`` attribute declares; ``/_health``, ``/_ready``, ``/metrics`` (request metrics and
build info) and the generated ``/openapi.json`` (validated with ``openapi-spec-validator``).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import importlib
import inspect
import json
import pkgutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field, SecretStr

import lakefs_core
import lakefs_core.errors
import lakefs_gc
import lakefs_mirror
from lakefs_core.errors import LakeFSError, MergeConflictError
from lakefs_core.service.daemon import DaemonLoop
from lakefs_core.service.http import (
    ApiRunner,
    ReadinessProbe,
    Route,
    ServiceSpec,
    build_app,
    json_object,
    parse_model,
)
from lakefs_core.service.http import app as http_app

KEY, SECRET = "AKIAHTTPTEST", "http-secret-never-shown"


@dataclass(frozen=True)
class Key:
    access_key_id: str
    secret_access_key: SecretStr


KEYS = [Key(KEY, SecretStr(SECRET)), Key("AKIAOTHER", SecretStr("other-secret"))]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


AUTH = {"Authorization": basic(KEY, SECRET)}


# -- every error class of the project ----------------------------------------------------------------------


def all_error_classes() -> list[type[LakeFSError]]:
    """LakeFSError and every subclass defined anywhere in the three packages (imported first)."""
    for package in (lakefs_core, lakefs_mirror, lakefs_gc):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
    seen: list[type[LakeFSError]] = []
    todo: list[type[LakeFSError]] = [LakeFSError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(seen), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def instance(cls: type[LakeFSError]) -> LakeFSError:
    """An instance of ``cls`` whatever its constructor wants (message plus keyword-only fields)."""
    if issubclass(cls, MergeConflictError):
        return cls([b"k"], "boom")
    params = list(inspect.signature(cls.__init__).parameters)
    if params[1:2] == ["problems"]:  # ConfigError: (key path, message) pairs
        return cls([("the_field", "boom")])  # type: ignore[call-arg]
    kwargs: dict[str, Any] = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if param.kind is param.KEYWORD_ONLY and param.default is param.empty:
            kwargs[name] = "the_field" if name in ("field", "key") else "x"
    return cls("boom", **kwargs)


ERROR_CLASSES = all_error_classes()


# -- the demo daemon -------------------------------------------------------------------------------------


class ItemPath(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    item: str = Field(pattern="^[a-z]{3,8}$", description="An item id.")


class ItemQuery(BaseModel):
    model_config = ConfigDict(extra="ignore")
    limit: int = Field(default=10, ge=1, le=100)


class ItemBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    size: int = Field(ge=0)
    note: str | None = None


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item: str
    size: int
    limit: int
    note: str | None


RAISE: web.AppKey[list[LakeFSError]] = web.AppKey("raise")


async def boom(request: web.Request) -> web.Response:
    raise request.app[RAISE][0]


async def put_item(request: web.Request) -> web.Response:
    path = parse_model(ItemPath, request.match_info, {"item": "3-8 lower-case letters"})
    query = parse_model(ItemQuery, {k: request.query[k] for k in request.query})
    body = parse_model(ItemBody, await json_object(request))
    out = Item(item=path.item, size=body.size, limit=query.limit, note=body.note)
    return web.json_response(out.model_dump())


ROUTES = [
    Route(
        "GET", "/boom", boom, "boom", "Raise the chosen error.", errors=(400, 404, 409, 422, 500, 502, 507)
    ),
    Route(
        "PUT",
        "/items/{item}",
        put_item,
        "putItem",
        "Store an item.",
        response=Item,
        request=ItemBody,
        path_params=ItemPath,
        query=ItemQuery,
    ),
]


@dataclass
class Demo:
    url: str
    app: web.Application
    http: aiohttp.ClientSession

    async def get(self, path: str, **kw: Any) -> tuple[int, Any, Any]:
        async with self.http.get(self.url + path, **kw) as r:
            body = await r.read()
            data = json.loads(body) if r.content_type == "application/json" else body.decode()
            return r.status, data, r.headers


@asynccontextmanager
async def demo(
    *, is_live: Callable[[], bool] = lambda: True, probes: tuple[ReadinessProbe, ...] = ()
) -> AsyncIterator[Demo]:
    spec = ServiceSpec(
        daemon="demo",
        region="r1",
        version="9.9.9",
        title="demo",
        description="demo daemon",
        routes=ROUTES,
        access_keys=KEYS,
        registry=CollectorRegistry(),
        is_live=is_live,
        probes=probes,
    )
    app = build_app(spec)
    app[RAISE] = [LakeFSError("unset")]
    runner = ApiRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession() as http:
            yield Demo(f"http://{host}:{port}", app, http)
    finally:
        await runner.cleanup()


# -- authentication ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        None,
        basic(KEY, "wrong"),
        basic("AKIAOTHER", SECRET),
        basic(KEY.lower(), SECRET),
        "Bearer x",
        "Basic !!",
    ],
)
async def test_authenticated_routes_refuse_bad_credentials(header: str | None) -> None:
    async with demo() as d:
        headers = {} if header is None else {"Authorization": header}
        status, body, resp_headers = await d.get("/boom", headers=headers)
        assert status == 401 and set(body) == {"message"}
        assert resp_headers["WWW-Authenticate"].startswith('Basic realm="lakefs-demo"')
        assert SECRET not in json.dumps(body)
        for public in ("/_health", "/_ready", "/metrics", "/openapi.json"):
            status, _, _ = await d.get(public, headers=headers)
            assert status == 200, public
        # unknown routes are 404 before authentication
        status, body, _ = await d.get("/nope", headers=headers)
        assert status == 404 and body == {"message": "no such route"}


async def test_every_configured_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(http_app.hmac, "compare_digest", counting)
    async with demo() as d:
        d.app[RAISE][0] = lakefs_core.errors.NotFoundError("nothing here")
        status, _, _ = await d.get("/boom", headers=AUTH)  # the FIRST key matches...
    assert status == 404
    assert len(calls) == 2 * len(KEYS)  # ...and still every key's id and secret were compared


# -- error mapping ----------------------------------------------------------------------------------------


def test_every_error_class_declares_its_status() -> None:
    for cls in vars(lakefs_core.errors).values():
        if isinstance(cls, type) and issubclass(cls, LakeFSError) and "exit_code" in vars(cls):
            # a class of the tree with its own exit code chooses its own status too
            assert "http_status" in vars(cls), f"{cls.__name__} must declare http_status itself"
    for cls in ERROR_CLASSES:
        assert 400 <= cls.http_status <= 599, cls
    # the tree the HTTP layer relies on (spot checks of the table in errors.py)
    assert lakefs_core.errors.NotFoundError.http_status == 404
    assert lakefs_core.errors.BadInputError.http_status == 400
    assert lakefs_core.errors.ConflictError.http_status == 409
    assert lakefs_core.errors.TransientError.http_status == 503
    assert lakefs_core.errors.StorageFullError.http_status == 507


async def test_every_error_class_maps_to_its_http_status(caplog: pytest.LogCaptureFixture) -> None:
    assert len(ERROR_CLASSES) >= 17  # the tree in errors.py plus the daemons' own subclasses
    async with demo() as d:
        for cls in ERROR_CLASSES:
            error = instance(cls)
            d.app[RAISE][0] = error
            status, body, headers = await d.get("/boom", headers=AUTH)
            assert status == cls.http_status, (cls, status, body)
            assert set(body) <= {"message", "field"} and body["message"], (cls, body)
            if status == 503:
                assert headers["Retry-After"] == "1"
                assert body == {"message": "temporarily unavailable, retry later"}
            elif status >= 500:
                assert "boom" not in body["message"], cls  # internals are logged, not answered
            else:
                assert "boom" in body["message"], cls
                assert body.get("field") == getattr(error, "field", None), cls
                assert not body["message"].startswith("the_field: "), cls
    assert "boom" in caplog.text  # the 5xx causes are in the log
    assert SECRET not in caplog.text


async def test_a_bug_is_a_500_internal_error(caplog: pytest.LogCaptureFixture) -> None:
    async with demo() as d:
        d.app[RAISE][0] = KeyError("secret-detail")  # type: ignore[assignment]
        status, body, _ = await d.get("/boom", headers=AUTH)
    assert (status, body) == (500, {"message": "internal error"})
    assert "secret-detail" in caplog.text


async def test_models_validate_path_query_and_body() -> None:
    async with demo() as d:
        url = f"{d.url}/items/abcd"
        async with d.http.put(url, params={"limit": "5"}, json={"size": 3}, headers=AUTH) as r:
            assert (r.status, await r.json()) == (200, {"item": "abcd", "size": 3, "limit": 5, "note": None})
        for path, params, body, field in (
            ("/items/AB", {}, {"size": 1}, "item"),
            ("/items/abcd", {"limit": "0"}, {"size": 1}, "limit"),
            ("/items/abcd", {}, {"size": -1}, "size"),
            ("/items/abcd", {}, {"size": "1"}, "size"),
            ("/items/abcd", {}, {"size": 1, "extra": 1}, "extra"),
            ("/items/abcd", {}, [1], "body"),
        ):
            async with d.http.put(d.url + path, params=params, json=body, headers=AUTH) as r:
                payload = await r.json()
                assert (r.status, payload["field"]) == (400, field), (path, params, body, payload)
        async with d.http.put(f"{d.url}/items/AB", json={"size": 1}, headers=AUTH) as r:
            assert (await r.json())["message"] == "3-8 lower-case letters"  # the hint, not the regex


# -- health and readiness ---------------------------------------------------------------------------------


async def test_health_is_503_while_the_loop_hangs() -> None:
    hang = asyncio.Event()  # never set

    async def stuck() -> None:
        await hang.wait()

    loop = DaemonLoop(stuck, name="stuck", interval=0.1, pass_timeout=0.3, grace=0.2)
    async with demo(is_live=loop.is_live) as d:
        status, body, _ = await d.get("/_health")
        assert (status, body) == (200, {"status": "ok", "region": "r1"})
        task = asyncio.create_task(loop.run())
        try:
            # no heartbeat for pass_timeout + grace (grace is at least two idle beats, 1 s)
            await asyncio.sleep(loop.pass_timeout + loop.grace + 0.3)
            assert not loop.is_live()
            status, body, _ = await d.get("/_health")
            assert status == 503 and body["status"] == "unavailable" and "hung" in body["message"]
        finally:
            loop.request_stop()
            loop.request_stop()  # the second request cancels the hung pass
            await asyncio.wait_for(task, 5)


def probe(
    result: bool | BaseException | None, detail: str = "d"
) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def check() -> tuple[bool, str]:
        if result is None:
            await asyncio.sleep(60)
        if isinstance(result, BaseException):
            raise result
        return bool(result), detail

    return check


async def test_ready_reports_every_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_app, "PROBE_TIMEOUT_SECONDS", 0.2)
    cases: list[tuple[tuple[ReadinessProbe, ...], int]] = [
        ((), 200),
        ((ReadinessProbe("db", probe(True)), ReadinessProbe("lease", probe(False), gates=False)), 200),
        ((ReadinessProbe("db", probe(False)),), 503),
        ((ReadinessProbe("db", probe(lakefs_core.errors.UnreachableError("pw=hunter2"))),), 503),
        ((ReadinessProbe("db", probe(None)),), 503),
    ]
    for probes, expected in cases:
        async with demo(probes=probes) as d:
            status, body, _ = await d.get("/_ready")
            assert status == expected, (probes, body)
            assert body["status"] == ("ok" if expected == 200 else "unavailable")
            assert [c["name"] for c in body["checks"]] == [p.name for p in probes]
            assert "hunter2" not in json.dumps(body)  # a probe's error text is logged, not answered
    async with demo(probes=cases[1][0]) as d:
        _, body, _ = await d.get("/_ready")
        assert body["checks"] == [
            {"name": "db", "ok": True, "detail": "d", "gates": True},
            {"name": "lease", "ok": False, "detail": "d", "gates": False},
        ]


# -- metrics and the OpenAPI document ---------------------------------------------------------------------


async def test_metrics_have_build_info_and_request_series() -> None:
    async with demo() as d:
        await d.get("/boom", headers=AUTH)
        status, text, headers = await d.get("/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert 'lakefs_demo_build_info{version="9.9.9"} 1.0' in text
    assert 'lakefs_demo_api_requests_total{method="GET",route="/boom",status="500"} 1.0' in text
    assert "lakefs_demo_api_request_duration_seconds_bucket{" in text


async def test_openapi_is_generated_from_the_models_and_valid() -> None:
    async with demo() as d:
        status, doc, _ = await d.get("/openapi.json")
    assert status == 200
    from openapi_spec_validator import validate  # here: jsonschema's validators, slow to import

    validate(doc)  # openapi-spec-validator: a valid OpenAPI 3.0 document
    assert doc["openapi"] == "3.0.3"
    routes = {(r.method.lower(), r.path) for r in ROUTES} | {
        ("get", p) for p in ("/_health", "/_ready", "/metrics", "/openapi.json")
    }
    assert {(m, p) for p, item in doc["paths"].items() for m in item} == routes
    schemas = doc["components"]["schemas"]
    assert {"Error", "Health", "Readiness", "ProbeResult", "Item", "ItemBody"} <= set(schemas)
    assert schemas["ItemBody"]["additionalProperties"] is False
    assert schemas["ItemBody"]["properties"]["size"] == {"type": "integer", "minimum": 0}
    assert schemas["ItemBody"]["properties"]["note"] == {"type": "string", "nullable": True}
    assert schemas["Item"]["required"] == ["item", "size", "limit", "note"]
    put = doc["paths"]["/items/{item}"]["put"]
    assert put["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ItemBody"
    }
    assert put["parameters"] == [
        {
            "name": "item",
            "in": "path",
            "required": True,
            "description": "An item id.",
            "schema": {"type": "string", "pattern": "^[a-z]{3,8}$"},
        },
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
        },
    ]
    assert set(put["responses"]) == {"200", "400", "401", "503"}
    assert "WWW-Authenticate" in put["responses"]["401"]["headers"]
    for path in ("/_health", "/_ready", "/metrics", "/openapi.json"):
        assert doc["paths"][path]["get"]["security"] == []
    # no JSON-Schema-only constructs left for an OpenAPI 3.0 reader
    text = json.dumps(doc)
    assert '"type": "null"' not in text and '"const"' not in text and '"$defs"' not in text


@pytest.mark.favour_the_loop
async def test_serving_an_api_favours_the_loop_for_the_gil() -> None:
    """A daemon's loop thread must win the GIL back from CPU workers quickly after each system call
    (lakefs_core.offloop): serve_api shortens the switch interval, and never lengthens a shorter one."""
    import sys

    from lakefs_core import offloop
    from lakefs_core.service.http import serve_api

    sys.setswitchinterval(0.005)  # CPython's default (tests/conftest.py restores the test's own)
    runner, port = await serve_api(web.Application(), "127.0.0.1", 0)
    try:
        assert port > 0
        assert sys.getswitchinterval() == pytest.approx(offloop.LOOP_SWITCH_INTERVAL) == 0.0002
    finally:
        await runner.cleanup()
    sys.setswitchinterval(0.0001)
    offloop.favour_the_loop()
    assert sys.getswitchinterval() == pytest.approx(0.0001)

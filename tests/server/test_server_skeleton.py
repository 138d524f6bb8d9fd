"""lakefs-server as a real process: the admin listener, the router (S3 vs /api/v1) and check-config."""

from __future__ import annotations

import hashlib
import http.client
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.harness import ADMIN, BIN, REPO, Server, local_core, running
from tests.support.timing import scaled

DOMAIN = "s3.lakefs.test"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("server")
    core, namespace = local_core(directory)
    with running(directory, core, namespace, domain=DOMAIN) as server:
        yield server


def fetch(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=scaled(10)) as answer:
            return answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_admin_listener_serves_health_ready_metrics_openapi(server: Server) -> None:
    assert fetch(server.admin + "/_health")[0] == 200
    status, body, _ = fetch(server.admin + "/_ready")
    assert status == 200 and json.loads(body)["checks"][0]["name"] == "kv"
    status, body, _ = fetch(server.admin + "/metrics")
    assert (
        status == 200 and b"lakefs_server_build_info" in body and b"lakefs_server_s3_requests_total" in body
    )
    assert json.loads(fetch(server.admin + "/openapi.json")[1])["openapi"].startswith("3.")


def test_api_v1_is_the_rest_api(server: Server) -> None:
    """/api/v1 is lakeFS's REST API (lakefs_server.rest): an unknown path is its JSON 404, an
    operation without credentials its JSON 401."""
    status, body, _ = fetch(server.endpoint + "/api/v1/no/such/endpoint")
    assert status == 404 and json.loads(body) == {"message": "invalid API endpoint"}
    status, body, _ = fetch(server.endpoint + "/api/v1/repositories")
    assert status == 401 and json.loads(body) == {"message": "error authenticating request"}


def test_anonymous_s3_request_is_access_denied_xml(server: Server) -> None:
    status, body, headers = fetch(server.endpoint + "/repo/main/x")
    assert status == 403 and b"<Code>AccessDenied</Code>" in body
    assert headers["Content-Type"].startswith("application/xml") and headers["x-amz-request-id"]


def test_signed_api_path_is_s3(server: Server) -> None:
    """An AWS-signed request under /api/v1 is S3 (a bucket named api), as lakeFS routes it."""
    status, body, _ = fetch(server.endpoint + "/api/v1/x", headers={"Authorization": "AWS4-HMAC-SHA256 junk"})
    assert status == 400 and b"<Code>AuthorizationHeaderMalformed</Code>" in body


def test_check_config_reports_a_missing_secret(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"core: {{kv_url: 'sqlite:///{tmp_path}/kv.sqlite3'}}\nauth: {{}}\n")
    done = subprocess.run(
        [str(BIN / "lakefs-server"), "check-config", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 9 and "auth" in done.stderr and "secret_key" in done.stderr


def signed(server: Server, method: str, url: str, headers: dict[str, str], body: bytes = b"") -> Any:
    """A botocore-signed request for ``url`` (any Host), sent to the server's port."""
    from botocore.auth import SigV4Auth  # not S3SigV4Auth: it replaces x-amz-content-sha256
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(ADMIN.access_key_id, ADMIN.secret_access_key), "s3", "us-east-1").add_auth(request)
    return request


def send(server: Server, request: Any, body: bytes = b"") -> tuple[int, bytes]:
    split = urllib.parse.urlsplit(request.url)
    port = int(server.endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
    try:
        path = split.path + (f"?{split.query}" if split.query else "")
        connection.putrequest(request.method, path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", split.netloc)  # as signed (the signer read it from the URL)
        for name, value in request.headers.items():
            connection.putheader(name, value)
        if body and "Content-Length" not in request.headers:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_virtual_host_style(server: Server) -> None:
    """``<repo>.<domain>/<ref>/<path>``: the bucket comes from the Host header (signed as sent)."""
    port = server.endpoint.rsplit(":", 1)[1]
    url = f"http://{REPO}.{DOMAIN}:{port}/main/vhost/obj"
    put = signed(server, "PUT", url, {"X-Amz-Content-SHA256": hashlib.sha256(b"vh").hexdigest()}, b"vh")
    assert send(server, put, b"vh") == (200, b"")
    get = signed(server, "GET", url, {"X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()})
    assert send(server, get) == (200, b"vh")
    path_style = signed(
        server,
        "GET",
        f"http://127.0.0.1:{port}/{REPO}/main/vhost/obj",
        {"X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()},
    )
    assert send(server, path_style) == (200, b"vh")


def chunked(seed: str, key: bytes, amz_date: str, scope: str, chunks: list[bytes]) -> bytes:
    """An aws-chunked body with chained chunk signatures (the final zero-length chunk included)."""
    from lakefs_core.auth.sigv4 import chunk_signature

    out, previous = [], seed
    for chunk in [*chunks, b""]:
        previous = chunk_signature(key, amz_date, scope, previous, hashlib.sha256(chunk).hexdigest())
        out.append(f"{len(chunk):x};chunk-signature={previous}\r\n".encode() + chunk + b"\r\n")
    return b"".join(out)


def test_streaming_signed_chunks_and_a_tampered_chunk(server: Server) -> None:
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD: accepted with the right chain; a chunk changed in flight is
    refused and nothing is staged."""
    from lakefs_core.auth.sigv4 import signing_key

    port = server.endpoint.rsplit(":", 1)[1]
    parts = [b"a" * 70000, b"b" * 1000]
    for name, tamper in (("good", False), ("tampered", True)):
        url = f"http://127.0.0.1:{port}/{REPO}/main/stream/{name}"
        headers = {
            "X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            "x-amz-decoded-content-length": str(sum(map(len, parts))),
            "Content-Encoding": "aws-chunked",
        }
        request = signed(server, "PUT", url, headers)
        amz_date = request.headers["X-Amz-Date"]
        seed = request.headers["Authorization"].rsplit("Signature=", 1)[1]
        scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
        key = signing_key(ADMIN.secret_access_key, amz_date[:8], "us-east-1", "s3")
        body = chunked(seed, key, amz_date, scope, parts)
        if tamper:
            body = body.replace(b"b" * 10, b"c" * 10, 1)
        status, answer = send(server, request, body)
        if tamper:
            assert status == 403 and b"SignatureDoesNotMatch" in answer, answer
        else:
            assert status == 200, answer
    get = signed(
        server,
        "GET",
        f"http://127.0.0.1:{port}/{REPO}/main/stream/good",
        {"X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()},
    )
    assert send(server, get) == (200, b"".join(parts))
    missing = signed(
        server,
        "HEAD",
        f"http://127.0.0.1:{port}/{REPO}/main/stream/tampered",
        {"X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()},
    )
    assert send(server, missing)[0] == 404


def sha(body: bytes) -> dict[str, str]:
    return {"X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'<!DOCTYPE d [<!ENTITY x "y">]><Delete><Object><Key>a</Key></Object></Delete>', b"MalformedXML"),
        (b"<Delete>" + b"<Object><Key>main/k</Key></Object>" * 1001 + b"</Delete>", b"MalformedXML"),
        (b"<Delete><Object><Key>main/a</Key></Object>", b"MalformedXML"),
        (b"<Other/>", b"MalformedXML"),
        (b"<Delete/>", b"MalformedXML"),
    ],
    ids=["dtd", "1001-keys", "truncated", "wrong-root", "no-keys"],
)  # fmt: skip
def test_hostile_delete_objects_bodies_are_malformed_xml(server: Server, body: bytes, code: bytes) -> None:
    port = server.endpoint.rsplit(":", 1)[1]
    request = signed(server, "POST", f"http://127.0.0.1:{port}/{REPO}?delete", sha(body), body)
    status, answer = send(server, request, body)
    assert status == 400 and b"<Code>" + code + b"</Code>" in answer, answer


def test_unsupported_subresources_and_bad_parameters(server: Server) -> None:
    port = server.endpoint.rsplit(":", 1)[1]
    base = f"http://127.0.0.1:{port}/{REPO}"
    for url, status, code in (
        (f"{base}?acl", 405, b"ERRLakeFSNotSupported"),
        (f"{base}?policy", 405, b"ERRLakeFSNotSupported"),
        (f"{base}/main/x?uploadId=nope&partNumber=1", 404, b"NoSuchUpload"),
        (f"{base}/main/x?uploadId=abc&partNumber=0", 400, b"InvalidArgument"),
        (f"{base}?list-type=2&encoding-type=base64", 400, b"InvalidArgument"),
    ):
        method = "PUT" if "partNumber" in url else "GET"
        answer = send(server, signed(server, method, url, sha(b"")))
        assert answer[0] == status and b"<Code>" + code + b"</Code>" in answer[1], (url, answer)

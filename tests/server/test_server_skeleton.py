"""lakefs-server as a real process: the admin listener, the router (S3 vs /api/v1) and check-config."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.harness import BIN, Server, local_core, running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("server")
    core, namespace = local_core(directory)
    with running(directory, core, namespace) as server:
        yield server


def fetch(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
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


def test_api_v1_answers_lakefs_json_404_without_the_rest_api(server: Server) -> None:
    status, body, _ = fetch(server.endpoint + "/api/v1/repositories")
    assert status == 404 and json.loads(body) == {"message": "invalid API endpoint"}


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

"""``lakefs-core fs presign`` (issue 38): a presigned GET URL of an object in an S3 namespace (moto),
fetched with a plain HTTP client; a local namespace's object, a missing path and an expiry out of
range are refused."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from tests.cli.helpers import InProcess, set_user_env
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.timing import scaled


def test_presign_an_s3_object(
    run: InProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto: Callable[[str], MotoServer]
) -> None:
    server = moto("us-east-1")
    s3 = boto3.client("s3", **server.client_kwargs())
    try:
        s3.create_bucket(Bucket="presign-bucket")
    finally:
        s3.close()
    config = tmp_path / "core.yaml"
    config.write_text(
        f"s3:\n  region: us-east-1\n  endpoint_url: {server.endpoint}\n"
        f"  access_key_id: {ACCESS_KEY}\n  secret_access_key: {SECRET_KEY}\n"
    )
    set_user_env(monkeypatch, tmp_path / "home", LAKEFS_CORE_CONFIG=str(config))
    run("repo", "create", "lakefs://pre", "s3://presign-bucket/ns").ok()
    (tmp_path / "f.csv").write_bytes(b"a,b\n1,2\n")
    run("fs", "upload", "lakefs://pre/main/t/f.csv", "-s", str(tmp_path / "f.csv")).ok()
    doc = run.json("fs", "presign", "lakefs://pre/main/t/f.csv", "--expiry", "60")
    assert doc["expiry_seconds"] == 60 and "X-Amz-Signature=" in doc["url"] and SECRET_KEY not in doc["url"]
    # no credentials: the URL is the grant
    with urllib.request.urlopen(doc["url"], timeout=scaled(30)) as response:
        assert response.read() == b"a,b\n1,2\n"
    run("fs", "presign", "lakefs://pre/main/t/nope.csv").failed(2)
    assert run("fs", "presign", "lakefs://pre/main/t/f.csv", "--expiry", "0").returncode == 64  # usage
    run("repo", "create", "lakefs://loc", f"local://{tmp_path / 'ns'}").ok()
    run("fs", "upload", "lakefs://loc/main/f.csv", "-s", str(tmp_path / "f.csv")).ok()
    run("fs", "presign", "lakefs://loc/main/f.csv").failed(9, "only S3 objects can be presigned")

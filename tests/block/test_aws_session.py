"""lakefs_core.block.aws_session: new sessions share botocore's data loader, and with it the parsed
S3 and DynamoDB models (the files are read once per process, not once per store opened)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import aiobotocore.httpsession
import pytest
from botocore.loaders import JSONFileLoader

from lakefs_core.block import aws_session
from lakefs_core.block.aws_session import new_session, shared_loader
from lakefs_core.block.s3 import S3BlockStore
from lakefs_core.block.s3_settings import S3Settings
from lakefs_core.errors import UnreachableError
from lakefs_core.kv.dynamodb import DynamoKVStore

SETTINGS = S3Settings(
    endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="AK", secret_access_key="SK"
)


async def _open_unreachable_kv() -> None:
    """A DynamoDB KV opened where nothing listens: raises ``UnreachableError`` after its client
    made its first request."""
    await DynamoKVStore.open(
        "kvstore",
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
        attempts=1,
        connect_timeout=0.5,
        read_timeout=0.5,
    )


def test_sessions_are_distinct_and_share_one_loader() -> None:
    a, b = new_session(), new_session()
    assert a is not b and a._session is not b._session
    loader = a._session.get_component("data_loader")
    assert b._session.get_component("data_loader") is loader
    # boto3 adds its data directory to its session's loader: once, however many sessions share it
    for _ in range(5):
        new_session()
    assert len(loader.search_paths) == len(set(loader.search_paths))
    assert any(p.endswith("boto3/data") for p in loader.search_paths)


def test_aws_data_path_gets_its_own_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    default = new_session()._session.get_component("data_loader")
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    loader = new_session()._session.get_component("data_loader")
    assert loader is not default and loader is shared_loader(str(tmp_path))
    assert loader.search_paths[0] == str(tmp_path)  # searched before botocore's own data


async def test_a_store_opened_again_reads_no_model_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first S3 store opened in this process may read botocore's files; every later one, each
    with a new session, reads none (before: each parsed the S3 model, ~0.1 s of CPU)."""
    reads: Counter[str] = Counter()
    load_file = JSONFileLoader.load_file

    def counting(self: JSONFileLoader, file_path: str) -> Any:
        reads[file_path] += 1
        return load_file(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counting)  # every loader's reads
    async with S3BlockStore("warm-bucket", settings=SETTINGS):
        pass
    reads.clear()
    for _ in range(3):
        async with S3BlockStore("some-bucket", settings=SETTINGS) as store:
            assert store.uri == "s3://some-bucket"
    assert not reads, f"model files parsed again: {dict(reads)}"


async def test_dynamodb_kv_sessions_share_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DynamoDB KV's default session is a :func:`new_session` too."""
    made: list[Any] = []

    def recording() -> Any:
        made.append(new_session())
        return made[-1]

    monkeypatch.setattr("lakefs_core.kv.dynamodb.new_session", recording)
    with pytest.raises(UnreachableError):  # nothing listens there: only the session matters
        await _open_unreachable_kv()
    assert made and made[0]._session.get_component("data_loader") is shared_loader(None)


async def test_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiobotocore built a TLS context per client at its first request (the CA bundle parsed:
    ~24 ms of CPU), even for an http:// endpoint; the stores' and the KV's clients take the
    process's own."""
    built: list[str] = []
    ours = aws_session.create_urllib3_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append("built")
        return ours(*args, **kwargs)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("aiobotocore built a TLS context of its own")

    monkeypatch.setattr(aws_session, "create_urllib3_context", counting)
    monkeypatch.setattr(aws_session, "_CONTEXTS", {})
    monkeypatch.setattr(aiobotocore.httpsession, "create_urllib3_context", refused)
    unreachable = replace(SETTINGS, max_attempts=1, connect_timeout=0.5)
    for _ in range(3):  # each store's first request makes its connector (then fails to connect)
        async with S3BlockStore("some-bucket", settings=unreachable) as store:
            with pytest.raises(UnreachableError):
                await store.exists("key")
    with pytest.raises(UnreachableError):
        await _open_unreachable_kv()
    assert built == ["built"]

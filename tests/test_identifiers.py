"""Identifier checks match whole strings over ASCII classes, as lakeFS's Go RE2 patterns do (issue 8).

Python's ``re.match(r"^...$")`` also accepts a trailing newline and its ``\\w``/``\\d`` are Unicode;
every case below was accepted before the fix.
"""

from __future__ import annotations

import pytest

from lakefs_core.block._common import normalize_content_type, normalize_metadata
from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.block.s3 import S3BlockStore
from lakefs_core.block.s3_settings import S3Settings
from lakefs_core.errors import BadInputError, LakeFSError
from lakefs_core.kv import open_kv
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs.ids import validate_branch_id, validate_repo_id, validate_tag_id
from lakefs_core.repos.refexpr import parse_ref
from lakefs_mirror.config import load_mirror_config
from tests.support.moto import free_port

COMMIT = "0123456789abcdef" * 4


@pytest.mark.parametrize("repo", ["rr1\n", "r\u00e9po", "repo\n\n", "\uff52\uff52\uff52"])
def test_repo_id_rejects(repo: str) -> None:
    with pytest.raises(BadInputError, match="invalid repository id"):
        validate_repo_id(repo)


@pytest.mark.parametrize("branch", ["main\n", "br\u00fcnch", "\u0661\u0662", "ma\u0131n", "_\u00b2", COMMIT])
def test_branch_id_rejects(branch: str) -> None:
    with pytest.raises(BadInputError, match="invalid branch id"):
        validate_branch_id(branch)


@pytest.mark.parametrize("tag", ["t\n", "t\u00e9", "v1.", "v1.lock", "v1..2", COMMIT])
def test_tag_id_rejects(tag: str) -> None:
    with pytest.raises(BadInputError, match="invalid tag id"):
        validate_tag_id(tag)


def test_identifiers_still_accepted() -> None:
    assert validate_repo_id("repo-1") == "repo-1"
    for branch in ("main", "_x", "feature-1_A", COMMIT[:63], COMMIT.upper()):
        assert validate_branch_id(branch) == branch
    for tag in ("v1.0", "_t", "release-2024.01", "v1.locked"):
        assert validate_tag_id(tag) == tag


@pytest.mark.parametrize("ref", ["main\n", "main ~1", "main~\u0663", "main^\u0661"])
def test_ref_expression_rejects(ref: str) -> None:
    with pytest.raises(BadInputError):
        parse_ref(ref)


def test_ref_expression_modifiers() -> None:
    assert parse_ref("main~12^2").modifiers == (("~", 12), ("^", 2))


@pytest.mark.parametrize("value", ["text/plain\n", "text/plain\r\n"])
def test_content_type_with_newline_is_bad_input(value: str) -> None:
    with pytest.raises(BadInputError, match="content_type"):
        normalize_content_type(value)


@pytest.mark.parametrize("meta", [{"k\n": "v"}, {"k": "v\n"}])
def test_metadata_with_newline_is_bad_input(meta: dict[str, str]) -> None:
    with pytest.raises(BadInputError, match="metadata"):
        normalize_metadata(meta)


async def test_s3_content_type_with_newline_fails_before_any_request() -> None:
    # Nothing listens on this endpoint: a request would end as UnreachableError/TransientError.
    settings = S3Settings(endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1, region="us-east-1")
    store = S3BlockStore("bucket", settings=settings)
    try:
        with pytest.raises(BadInputError, match="content_type"):
            await store.put("k", b"x", content_type="text/plain\n")
    finally:
        await store.close()


@pytest.mark.parametrize("name", ["bucket\n"])
def test_store_names_reject_trailing_newline(name: str) -> None:
    with pytest.raises(BadInputError):
        MemoryBlockStore(name)
    with pytest.raises(BadInputError):
        S3BlockStore(name)


@pytest.mark.parametrize("uri", ["mem://abc\n/repo", "s3://bucket\n/repo"])
def test_storage_namespace_rejects_trailing_newline(uri: str) -> None:
    with pytest.raises(BadInputError, match="invalid"):
        StorageNamespace.parse(uri)


async def test_kv_url_scheme_with_newline_is_malformed() -> None:
    with pytest.raises(BadInputError, match="malformed URL scheme"):
        await open_kv("memory\n://")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("LAKEFS_MIRROR__LISTEN", "127.0.0.1:\u0668\u0660\u0668\u0660"),
        ("LAKEFS_MIRROR__REGIONS__A__S3__ENDPOINT_URL", "http://h\u00f3st:9000"),
        ("LAKEFS_MIRROR__REGIONS__A__S3__ENDPOINT_URL", "http://host:9000/\u00e9"),
    ],
)
def test_mirror_config_ascii_only(key: str, value: str) -> None:
    env = {
        "LAKEFS_MIRROR__REGION": "a",
        "LAKEFS_MIRROR__REGIONS__A__KV_URL": "memory://",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": "sqlite:////tmp/m.sqlite3",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID": "K",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": "S",
    }
    load_mirror_config(None, env)  # the base is valid
    with pytest.raises(LakeFSError):
        load_mirror_config(None, {**env, key: value})

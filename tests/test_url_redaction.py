"""Credentials in URLs are masked whole, even when the password holds ``@``, ``:``, ``/`` or ``%``.

Through the real surfaces: the block store URI check's messages, the SQL KV store's and the mirrors
database's connection errors (a refused port on 127.0.0.1), the daemon's configuration display and
``check-config``, and the S3 endpoint setting (which refuses credentials without repeating them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakefs_core.block import split_store_uri
from lakefs_core.errors import BadInputError, LakeFSError
from lakefs_core.kv.sql import SQLKVStore
from lakefs_mirror.cli import cli
from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.db import MirrorsDB

PASSWORDS = ["Pa@ss-Word-XYZ", "Pa:ss@Wo/rd-XYZ", "Pa/ss-Word@XYZ", "Pa%40ss-Word-XYZ", "P@:/%ss@Word@XYZ"]


def pieces(password: str) -> list[str]:
    """Every fragment of the password a split at one of its special characters would leave behind."""
    out = {password}
    for sep in "@:/%":
        out.update(p for p in password.split(sep) if len(p) >= 3)
    out.add(password.replace("%40", "@"))
    return sorted(out)


def assert_hidden(text: str, password: str) -> None:
    for piece in pieces(password):
        assert piece not in text, (piece, text)


@pytest.mark.parametrize("password", PASSWORDS)
def test_redact_url_masks_the_whole_userinfo(password: str) -> None:
    from lakefs_core.redact import redact_url  # the one masking function (new with the fix)

    shown = redact_url(f"postgresql://lakefs:{password}@db.example.com:5432/kv?sslmode=require")
    assert shown == "postgresql://***@db.example.com:5432/kv?sslmode=require"
    assert redact_url("s3://bucket/dir/a@b") == "s3://bucket/dir/a@b"  # an @ in a path is no password
    assert redact_url("local:///data/x@y") == "local:///data/x@y"


@pytest.mark.parametrize("password", PASSWORDS)
def test_store_uri_errors_mask_the_whole_password(password: str) -> None:
    with pytest.raises(BadInputError) as info:
        split_store_uri(f"local://user:{password}@host/data")
    assert "***@host/data" in str(info.value)
    assert_hidden(str(info.value), password)


@pytest.mark.parametrize("password", PASSWORDS)
async def test_sql_connection_errors_mask_the_whole_password(password: str) -> None:
    url = f"postgresql://lakefs:{password}@127.0.0.1:1/kv"  # port 1: refused at once
    for opener in (SQLKVStore.open, MirrorsDB.open):
        with pytest.raises(LakeFSError) as info:
            await opener(url)
        text = str(info.value)
        assert "127.0.0.1" in text, text  # the host is still named: the password did not swallow it
        assert_hidden(text, password)


@pytest.mark.parametrize("password", PASSWORDS)
def test_mirror_config_display_and_check_config_mask_the_whole_password(
    password: str, tmp_path: Path
) -> None:
    env = {
        "LAKEFS_MIRROR__REGION": "us-east-1",
        "LAKEFS_MIRROR__REGIONS__US-EAST-1__KV_URL": f"postgresql://kv:{password}@kv.example.com/kv",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"postgresql://m:{password}@db.example.com:5432/mirrors",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID": "AKIAREDACT",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": "redact-secret-1",
    }
    config = load_mirror_config(None, env)
    assert config.mirrors_db_url_display.endswith("@db.example.com:5432/mirrors")
    assert_hidden(config.mirrors_db_url_display, password)
    result = CliRunner().invoke(cli, ["check-config"], env=env)
    assert result.exit_code == 0, result.output
    json.loads(result.output)
    assert_hidden(result.output, password)
    assert "redact-secret-1" not in result.output


@pytest.mark.parametrize("password", PASSWORDS)
def test_s3_endpoint_with_credentials_is_refused_without_repeating_them(password: str) -> None:
    env = {
        "LAKEFS_MIRROR__REGION": "us-east-1",
        "LAKEFS_MIRROR__REGIONS__US-EAST-1__KV_URL": "memory://",
        "LAKEFS_MIRROR__REGIONS__US-EAST-1__S3__ENDPOINT_URL": f"http://minio:{password}@s3.local:9000",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": "sqlite:////tmp/unused-mirrors.sqlite3",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID": "AKIAREDACT",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": "redact-secret-1",
    }
    with pytest.raises(BadInputError) as info:
        load_mirror_config(None, env)
    assert info.value.field == "regions.us-east-1.s3.endpoint_url"
    assert_hidden(str(info.value), password)


@pytest.mark.parametrize("password", [*PASSWORDS, "p#ss/w@rd"])
def test_both_sql_url_parsers_take_a_raw_password_whole(password: str) -> None:
    """The SQLAlchemy engines (``normalize_sql_url``) and the PostgreSQL KV store (asyncpg's DSN from
    ``normalize_url``) read the same user, password, host, port and database from a pasted URL:
    both go through ``redact.quote_sql_userinfo``."""
    from urllib.parse import unquote, urlsplit

    from lakefs_core.kv.sql import normalize_url
    from lakefs_core.sqlengine import normalize_sql_url

    url = f"postgresql://lakefs:{password}@db.example.com:5432/kv?sslmode=require"
    sa = normalize_sql_url(url)
    dsn = urlsplit(normalize_url(url))
    expected = ("lakefs", password.replace("%40", "@"), "db.example.com", 5432, "kv")
    assert (sa.username, sa.password, sa.host, sa.port, sa.database) == expected
    assert dsn.username is not None and dsn.password is not None
    parsed = (unquote(dsn.username), unquote(dsn.password), dsn.hostname, dsn.port, dsn.path[1:])
    assert parsed == expected

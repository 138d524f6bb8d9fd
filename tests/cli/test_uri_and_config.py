"""``lakefs://`` URI parsing, the CLI configuration (file, env overrides, defaults) and formatting."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefs_core.cli.context import CoreConfig, default_kv_url, load_core_config, user_config_file
from lakefs_core.cli.output import human_bytes
from lakefs_core.cli.uri import Kind, LakeFSURI, parse_uri
from lakefs_core.errors import BadInputError
from tests.cli.helpers import InProcess, set_user_env


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("lakefs://repo", Kind.REPO, LakeFSURI("repo")),
        ("lakefs://repo/", Kind.REPO, LakeFSURI("repo")),
        ("lakefs://repo/main", Kind.REF, LakeFSURI("repo", "main")),
        ("lakefs://repo/main~2", Kind.REF, LakeFSURI("repo", "main~2")),
        ("lakefs://repo/main@", Kind.REF, LakeFSURI("repo", "main@")),
        ("lakefs://repo/main/", Kind.REF, LakeFSURI("repo", "main")),
        ("lakefs://repo/feature-1", Kind.BRANCH, LakeFSURI("repo", "feature-1")),
        ("lakefs://repo/v1.0", Kind.TAG, LakeFSURI("repo", "v1.0")),
        ("lakefs://repo/main/a/b.txt", Kind.PATH, LakeFSURI("repo", "main", "a/b.txt")),
        ("lakefs://repo/v1/dir/", Kind.PATH, LakeFSURI("repo", "v1", "dir/")),
        ("lakefs://repo/main", Kind.PREFIX, LakeFSURI("repo", "main", "")),
        ("lakefs://repo/main/", Kind.PREFIX, LakeFSURI("repo", "main", "")),
        ("lakefs://repo/main/pre", Kind.PREFIX, LakeFSURI("repo", "main", "pre")),
    ],
)
def test_parse_valid(text: str, kind: Kind, expected: LakeFSURI) -> None:
    assert parse_uri(text, kind, field="ARG") == expected


@pytest.mark.parametrize(
    ("text", "kind", "needle"),
    [
        ("s3://bucket/x", Kind.PATH, "not a lakefs:// URI"),
        ("repo/main", Kind.REF, "not a lakefs:// URI"),
        ("lakefs://", Kind.REPO, "missing repository"),
        ("lakefs://Bad_Name", Kind.REPO, "invalid repository id"),
        ("lakefs://ab", Kind.REPO, "invalid repository id"),
        ("lakefs://repo/main", Kind.REPO, "takes no ref"),
        ("lakefs://repo", Kind.REF, "missing ref"),
        ("lakefs://repo/main/x", Kind.REF, "takes no object path"),
        ("lakefs://repo/main~1", Kind.BRANCH, "invalid branch id"),
        ("lakefs://repo/~1", Kind.REF, "no branch, tag or commit"),
        ("lakefs://repo/main~x", Kind.REF, "cannot parse modifier"),
        ("lakefs://repo/main", Kind.PATH, "missing object path"),
        ("lakefs://repo/main/", Kind.PATH, "empty object path"),
        ("lakefs://repo/main//x", Kind.PATH, "must not start with '/'"),
        ("lakefs://repo/main/a\0b", Kind.PATH, "NUL"),
    ],
)
def test_parse_invalid_names_the_argument(text: str, kind: Kind, needle: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_uri(text, kind, field="ARG")
    assert info.value.field == "ARG"
    assert needle in str(info.value) and str(info.value).startswith("ARG: ")


def test_uri_str_round_trips() -> None:
    for text, kind in (
        ("lakefs://repo", Kind.REPO),
        ("lakefs://repo/main~1", Kind.REF),
        ("lakefs://repo/main/a/b", Kind.PATH),
    ):
        assert str(parse_uri(text, kind)) == text


def test_defaults_come_from_the_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    set_user_env(monkeypatch, tmp_path / "home")
    config = load_core_config(None, env={})
    assert config == CoreConfig()
    assert config.kv() == default_kv_url() == f"sqlite:///{tmp_path / 'home/data/lakefs-core/kv.sqlite3'}"
    assert config.author() == "tester"
    assert user_config_file() == tmp_path / "home/config/lakefs-core/config.yaml"


def test_file_env_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    set_user_env(monkeypatch, tmp_path / "home")
    user_file = user_config_file()
    user_file.parent.mkdir(parents=True)
    user_file.write_text(
        "kv_url: postgresql://u:pgsekret@db/x\n"
        "committer: from-file\n"
        "s3:\n  region: eu-west-1\n  access_key_id: AKID\n  secret_access_key: s3sekret\n"
    )
    config = load_core_config(None, env={"LAKEFS_CORE__S3__ENDPOINT_URL": "http://127.0.0.1:9000"})
    assert config.author() == "from-file" and config.kv() == "postgresql://u:pgsekret@db/x"
    settings = config.s3.settings()
    assert (settings.region, settings.endpoint_url, settings.secret_access_key) == (
        "eu-west-1",
        "http://127.0.0.1:9000",
        "s3sekret",
    )
    assert "sekret" not in repr(config) and "sekret" not in str(config.model_dump())
    explicit = tmp_path / "other.yaml"
    explicit.write_text("committer: explicit\n")
    overridden = load_core_config(explicit, env={"LAKEFS_CORE__CLEANUP_LIMIT": "7"})
    assert overridden.author() == "explicit" and overridden.cleanup_limit == 7 and overridden.kv_url is None


def test_user_config_file_is_used_by_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_user_env(monkeypatch, tmp_path / "home")
    user_file = user_config_file()
    user_file.parent.mkdir(parents=True)
    user_file.write_text(f"committer: configured\nkv_url: sqlite:///{tmp_path / 'elsewhere.db'}\n")
    run = InProcess(capsys)
    run("repo", "create", "lakefs://cfg", f"local://{tmp_path / 'ns'}").ok()
    made = run("commit", "lakefs://cfg/main", "-m", "empty", "--allow-empty", "--json").json()
    assert made["committer"] == "configured"
    assert (tmp_path / "elsewhere.db").is_file() and not (tmp_path / "home/data").exists()


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0 B"),
        (9, "9 B"),
        (10, "10 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (1234, "1.2 kB"),
        (12_345_678, "12 MB"),
    ],
)
def test_human_bytes_like_go_humanize(n: int, shown: str) -> None:
    assert human_bytes(n) == shown

"""``lakefs://`` URI parsing, the CLI configuration (file, env overrides, defaults) and formatting."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
import pytest
from pydantic import SecretStr

from lakefs_core.block.local import LocalBlockStore
from lakefs_core.cli.output import human_bytes
from lakefs_core.config import load_config, load_raw, validate
from lakefs_core.coreconfig import CoreConfig, default_kv_url, load_core_config, user_config_file
from lakefs_core.defaults import DEFAULTS
from lakefs_core.errors import BadInputError, ConfigError, StartupError
from lakefs_core.repos.uri import Kind, LakeFSURI, parse_uri
from lakefs_core.service.cli import run
from lakefs_core.settings import MIN_HEARTBEATS_PER_STALE, CoreSettings, S3Config, StaticCredentials
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
        # bytes the OS could not decode (argv is surrogate-escaped), shown as the bytes given
        ("lakefs://repo/main/a\udcffb", Kind.PATH, "'lakefs://repo/main/a\\xffb' is not valid UTF-8"),
        ("lakefs://repo/main/dir\udcc3/", Kind.PREFIX, "dir\\xc3/' is not valid UTF-8"),
        ("lakefs://repo/main/\ud800", Kind.PATH, "'lakefs://repo/main/\\ud800' is not valid UTF-8"),
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


def test_the_unvalidated_default_is_the_validated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No file and no LAKEFS_CORE__ override: the schema's defaults, built without validation (start-up)
    set_user_env(monkeypatch, tmp_path)
    lean = load_core_config(None, env={"LAKEFS_CORE_CONFIG_X": "1", "HOME": "/"})
    assert lean == CoreConfig.model_validate({}) == load_config(CoreConfig, None)
    assert lean.model_dump() == CoreConfig.model_validate({}).model_dump()
    assert lean.s3.settings() == S3Config.model_validate({}).settings()
    # and the plain values a session opens with on the embedded default are the schema's
    assert DEFAULTS == CoreConfig.model_validate({}).options() == CoreSettings().options()
    # an override or a file still goes through validation
    with pytest.raises(ConfigError):
        load_core_config(None, env={"LAKEFS_CORE__UPLOAD_CONCURRENCY": "0"})
    (tmp_path / "c.yaml").write_text("upload_concurrency: 0\n")
    with pytest.raises(ConfigError):
        load_core_config(tmp_path / "c.yaml", env={})


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


def test_explicit_sqlite_kv_url_in_a_missing_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_user_env(monkeypatch, tmp_path / "home", LAKEFS_CORE__KV_URL=f"sqlite:///{tmp_path}/typo/kv.sqlite3")
    result = InProcess(capsys)("repo", "list")
    line = result.failed(StartupError.exit_code, "kv_url: ", f"{tmp_path}/typo")
    assert "does not exist" in line
    assert not (tmp_path / "typo").exists()  # no fresh, empty database somewhere
    # the embedded default (no kv_url) still creates its own directory
    monkeypatch.delenv("LAKEFS_CORE__KV_URL")
    InProcess(capsys)("repo", "list").ok()
    assert (tmp_path / "home/data/lakefs-core/kv.sqlite3").is_file()


def test_check_config_lists_every_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_user_env(monkeypatch, tmp_path / "home")
    config = tmp_path / "core.yaml"
    config.write_text(
        f"kv_url: sqlite:///{tmp_path}/missing/kv.sqlite3\n"
        "upload_concurrency: 0\ncomitter: typo\n"
        "s3:\n  endpoint_url: ftp://x\n  access_key_id: AKID\n  secret_access_key: s3sekret\n"
    )
    result = InProcess(capsys)("--config", str(config), "check-config")
    assert result.returncode == BadInputError.exit_code, result.err
    lines = result.err.splitlines()
    assert lines[0] == f"lakefs-core: 4 configuration problem(s) in {config}:", result.err
    keys = sorted(line.strip().split(": ", 1)[0] for line in lines[1:])
    assert keys == ["comitter", "kv_url", "s3.endpoint_url", "upload_concurrency"], result.err
    assert "s3sekret" not in result.err and f"{tmp_path}/missing" in result.err
    # the ordinary commands report every schema problem too, on one line, with the config's code
    line = InProcess(capsys)("--config", str(config), "repo", "list").failed(BadInputError.exit_code)
    assert all(f"{key}: " in line for key in ("comitter", "s3.endpoint_url", "upload_concurrency"))


def test_check_config_prints_the_configuration_secrets_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_user_env(monkeypatch, tmp_path / "home", LAKEFS_CORE__TEMP_SWEEP_GRACE_SECONDS="60")
    config = tmp_path / "core.yaml"
    config.write_text(
        "kv_url: postgresql://u:pgsekret@db/x\ns3:\n  access_key_id: AKID\n  secret_access_key: s3sekret\n"
    )
    shown = InProcess(capsys)("--config", str(config), "check-config").json()
    assert shown["kv_url"] == shown["effective_kv_url"] == "postgresql://***@db/x"
    assert shown["s3"]["credentials"] == {
        "source": "static",
        "access_key_id": "AKID",
        "secret_access_key": "***",
        "session_token": None,
    }
    assert shown["temp_sweep_grace_seconds"] == 60.0 and shown["config_file"] == str(config)
    default = InProcess(capsys)("check-config").json()
    assert default["kv_url"] is None and default["effective_kv_url"] == default_kv_url()


def test_s3_section_is_the_shared_schema_with_the_flat_keys_kept() -> None:
    flat = CoreConfig.model_validate({"s3": {"access_key_id": "AKID", "secret_access_key": "s"}})
    assert isinstance(flat.s3, S3Config) and isinstance(flat.s3.credentials, StaticCredentials)
    assert (flat.s3.settings().access_key_id, flat.s3.settings().secret_access_key) == ("AKID", "s")
    nested = CoreConfig.model_validate(
        {"s3": {"credentials": {"source": "static", "access_key_id": "AKID", "secret_access_key": "s"}}}
    )
    assert nested == flat
    both = {"s3": {"access_key_id": "AKID", "secret_access_key": "s", "credentials": {"source": "env"}}}
    with pytest.raises(ConfigError) as info:
        validate(CoreConfig, both)
    assert info.value.field == "s3" and "not both" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(CoreConfig, None, env={"APP__S3__SECRET_ACCESS_KEY": "s3sekret"}, env_prefix="APP")
    assert info.value.field == "s3.access_key_id" and "s3sekret" not in str(info.value)


async def test_import_status_intervals_are_validated_core_settings(tmp_path: Path) -> None:
    """``import_heartbeat_seconds`` / ``import_stale_seconds``: lakeFS's 1 s and 60 s by default,
    finite and > 0, the stale timeout at least MIN_HEARTBEATS_PER_STALE refreshes; open_core hands
    them to the repositories' settings."""
    from lakefs_core.wiring import open_core

    default = CoreSettings()
    assert (default.import_heartbeat_seconds, default.import_stale_seconds) == (1.0, 60.0)
    for key in ("import_heartbeat_seconds", "import_stale_seconds"):
        for bad in (0, -1.0, float("inf"), float("nan"), "fast"):
            with pytest.raises(ConfigError) as info:
                validate(CoreConfig, {key: bad})
            assert info.value.field == key
    with pytest.raises(ConfigError) as info:
        validate(CoreConfig, {"import_heartbeat_seconds": 1.0, "import_stale_seconds": 4.9})
    assert "import_stale_seconds must be at least 5 times import_heartbeat_seconds" in str(info.value)
    assert MIN_HEARTBEATS_PER_STALE == 5
    (tmp_path / "kv").mkdir()
    settings = CoreSettings(
        kv_url=SecretStr(f"sqlite:///{tmp_path}/kv/kv.sqlite3"),
        import_heartbeat_seconds=0.05,
        import_stale_seconds=0.25,
    )
    async with await open_core(settings) as core:
        opened = core.graveler.context.settings
        assert (opened.import_heartbeat_seconds, opened.import_stale_seconds) == (0.05, 0.25)


async def test_open_core_passes_the_temp_sweep_grace_to_local_namespaces(tmp_path: Path) -> None:
    from lakefs_core.block.local_leftovers import DEFAULT_TMP_GRACE_SECONDS, TMP_PREFIX
    from lakefs_core.wiring import open_core

    assert CoreSettings().temp_sweep_grace_seconds == DEFAULT_TMP_GRACE_SECONDS
    (tmp_path / "kv").mkdir()
    leftovers = {}
    for name, grace in (("short", 5.0), ("default", None)):
        root = tmp_path / name
        root.mkdir()
        leftover = root / f"{TMP_PREFIX}{'0' * 32}"  # an interrupted write of long ago (10 minutes)
        leftover.write_bytes(b"partial")
        os.utime(leftover, (time.time() - 600, time.time() - 600))
        leftovers[name] = leftover
        extra = {} if grace is None else {"temp_sweep_grace_seconds": grace}
        settings = CoreSettings(kv_url=SecretStr(f"sqlite:///{tmp_path}/kv/{name}.sqlite3"), **extra)
        async with await open_core(settings) as core:
            await core.graveler.create_repository("repo", f"local://{root}")
            await core.objects.upload("repo", "main", "a.txt", b"x")  # the first write sweeps
            store = await core.graveler.stores.block_store(f"local://{root}")
            assert isinstance(store, LocalBlockStore)
            await store.sweep_leftovers()
    assert not leftovers["short"].exists()  # older than the configured 5 s
    assert leftovers["default"].exists()  # younger than the default hour


def test_run_returns_the_code_of_an_explicit_click_exit() -> None:
    @click.group()
    def group() -> None:
        pass

    @group.command("fail")
    def fail() -> None:
        raise click.exceptions.Exit(3)

    @group.command("fine")
    def fine() -> None:
        pass

    assert run(group, ["fail"], "prog") == 3  # lakefs-mirror run --once: a failed pass exits 1
    assert run(group, ["fine"], "prog") == 0


def test_run_turns_an_unexpected_error_into_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every CLI (lakefs-core, -gc, -mirror) goes through ``run``: an error no check anticipated is
    one line and exit 1, never a traceback; with the debug variable set it propagates."""

    @click.group()
    def group() -> None:
        pass

    @group.command("boom")
    def boom() -> None:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.delenv("LAKEFS_CORE_DEBUG", raising=False)
    assert run(group, ["boom"], "prog") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("prog: unexpected UnicodeDecodeError: ") and "LAKEFS_CORE_DEBUG=1" in err
    monkeypatch.setenv("LAKEFS_CORE_DEBUG", "1")
    with pytest.raises(UnicodeDecodeError):
        run(group, ["boom"], "prog")


def test_a_config_file_that_is_not_utf8_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b'kv_url: "\xff"\n')
    with pytest.raises(BadInputError, match=r"^config: config file .* is not UTF-8 text \(byte 9\)"):
        load_raw(path)

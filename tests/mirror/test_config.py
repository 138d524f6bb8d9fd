"""lakefs_mirror.config: YAML + LAKEFS_MIRROR__ overrides, exact key paths, secrets kept secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefs_core.block.local_leftovers import DEFAULT_TMP_GRACE_SECONDS
from lakefs_core.errors import BadInputError, ConfigError
from lakefs_core.service.daemon import DEFAULT_PASS_TIMEOUT
from lakefs_core.settings import S3Config
from lakefs_mirror.commands import pass_timeout_of
from lakefs_mirror.config import (
    EnvCredentials,
    ProfileCredentials,
    StaticCredentials,
    load_mirror_config,
    normalize_db_url,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-very-secret"
DB_PASSWORD = "pg-pass-w0rd"

BASE = f"""
region: us-east-1
regions:
  us-east-1:
    kv_url: sqlite:////tmp/a/kv.sqlite3
    s3:
      endpoint_url: http://127.0.0.1:9000
      region: us-east-1
      credentials: {{source: static, access_key_id: AKIAA, secret_access_key: {SECRET}}}
  eu-west-1:
    kv_url: postgresql://kv:{DB_PASSWORD}@db/kv
    local_roots: [/srv/eu]
mirrors_db_url: postgresql://mirror:{DB_PASSWORD}@db.example.com/mirrors
access_keys:
  - {{access_key_id: APIKEY, secret_access_key: {SECRET}}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mirror.yaml"
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> BadInputError:
    with pytest.raises(BadInputError) as info:
        load_mirror_config(write(tmp_path, text), env)
    return info.value


def test_full_file_loads_with_defaults(tmp_path: Path) -> None:
    conf = load_mirror_config(write(tmp_path, BASE), {})
    assert conf.region == "us-east-1"
    assert set(conf.regions) == {"us-east-1", "eu-west-1"}
    assert conf.this_region is conf.regions["us-east-1"]
    assert conf.listen == "127.0.0.1:8008"
    assert (conf.listen_host, conf.listen_port) == ("127.0.0.1", 8008)
    assert conf.poll_interval_seconds == 5.0
    assert conf.lease_ttl_seconds == 30.0
    assert conf.workers == 8
    assert conf.state_dir is None
    assert isinstance(conf.regions["eu-west-1"].s3.credentials, EnvCredentials)
    assert conf.regions["eu-west-1"].local_roots == [Path("/srv/eu")]
    # plain postgresql:// is normalised to the asyncpg driver
    assert conf.mirrors_db_url.get_secret_value().startswith("postgresql+asyncpg://mirror:")


def test_env_overrides_scalars_lists_and_region_keys(tmp_path: Path) -> None:
    env = {
        "LAKEFS_MIRROR__REGION": "eu-west-1",
        "LAKEFS_MIRROR__LISTEN": "0.0.0.0:9999",
        "LAKEFS_MIRROR__WORKERS": "3",
        "LAKEFS_MIRROR__POLL_INTERVAL_SECONDS": "0.5",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": "from-env",
        "LAKEFS_MIRROR__ACCESS_KEYS__1__ACCESS_KEY_ID": "SECOND",
        "LAKEFS_MIRROR__ACCESS_KEYS__1__SECRET_ACCESS_KEY": "second-secret",
        "LAKEFS_MIRROR__REGIONS__EU-WEST-1__S3__REGION": "eu-west-1",
        "LAKEFS_MIRROR__REGIONS__EU-WEST-1__LOCAL_ROOTS__0": "/srv/other",
        "OTHER__REGION": "ignored",
    }
    conf = load_mirror_config(write(tmp_path, BASE), env)
    assert conf.region == "eu-west-1"
    assert conf.listen_port == 9999
    assert conf.workers == 3
    assert conf.poll_interval_seconds == 0.5
    assert [k.access_key_id for k in conf.access_keys] == ["APIKEY", "SECOND"]
    assert conf.access_keys[0].secret_access_key.get_secret_value() == "from-env"
    assert conf.regions["eu-west-1"].s3.region == "eu-west-1"
    assert conf.regions["eu-west-1"].local_roots == [Path("/srv/other")]


def test_env_alone_can_build_a_config() -> None:
    env = {
        "LAKEFS_MIRROR__REGION": "a",
        "LAKEFS_MIRROR__REGIONS__A__KV_URL": "memory://",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": "sqlite:////tmp/m.sqlite3",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID": "K",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": "S",
    }
    conf = load_mirror_config(None, env)
    assert conf.mirrors_db_url.get_secret_value() == "sqlite+aiosqlite:////tmp/m.sqlite3"
    assert conf.access_keys[0].access_key_id == "K"


def test_env_override_beyond_list_end_names_the_key(tmp_path: Path) -> None:
    err = error_for(tmp_path, BASE, {"LAKEFS_MIRROR__ACCESS_KEYS__5__SECRET_ACCESS_KEY": "x"})
    assert err.field == "access_keys.5"


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("region: us-east-1\n", "region: mars-1\n", "region"),
        ("region: us-east-1\n", "", "region"),
        ("kv_url: sqlite:////tmp/a/kv.sqlite3", "kv_url: ftp://x", "regions.us-east-1.kv_url"),
        (
            f", secret_access_key: {SECRET}}}",
            "}",
            "regions.us-east-1.s3.credentials.secret_access_key",
        ),
        (
            "endpoint_url: http://127.0.0.1:9000",
            "endpoint_url: 127.0.0.1:9000",
            "regions.us-east-1.s3.endpoint_url",
        ),
        ("local_roots: [/srv/eu]", "local_roots: [relative/dir]", "regions.eu-west-1.local_roots"),
        ("mirrors_db_url: postgresql", "mirrors_db_url: mysql", "mirrors_db_url"),
        ("region: us-east-1\n", "region: us-east-1\nlisten: nowhere\n", "listen"),
        ("region: us-east-1\n", "region: us-east-1\nworkers: lots\n", "workers"),
        ("region: us-east-1\n", "region: us-east-1\nworkers: 0\n", "workers"),
        ("region: us-east-1\n", "region: us-east-1\nlease_ttl_seconds: -1\n", "lease_ttl_seconds"),
        ("region: us-east-1\n", "region: us-east-1\nlog_level: LOUD\n", "log_level"),
        ("region: us-east-1\n", "region: us-east-1\npoll_intervall_seconds: 1\n", "poll_intervall_seconds"),
        ("  eu-west-1:\n", "  EU_West:\n", "regions"),
    ],
)
def test_errors_name_the_exact_key_path(tmp_path: Path, old: str, new: str, field: str) -> None:
    assert old in BASE
    text = BASE.replace(old, new, 1)
    err = error_for(tmp_path, text)
    assert err.field == field, str(err)
    assert str(err).startswith(f"{field}: ")


def test_credentials_source_errors(tmp_path: Path) -> None:
    text = BASE.replace("source: static, access_key_id: AKIAA", "source: magic, access_key_id: AKIAA")
    assert error_for(tmp_path, text).field == "regions.us-east-1.s3.credentials.source"
    text = BASE.replace("{source: static, access_key_id: AKIAA, ", "{access_key_id: AKIAA, ")
    assert error_for(tmp_path, text).field == "regions.us-east-1.s3.credentials.source"
    text = BASE.replace(
        f"{{source: static, access_key_id: AKIAA, secret_access_key: {SECRET}}}", "{source: profile}"
    )
    assert error_for(tmp_path, text).field == "regions.us-east-1.s3.credentials.profile"


def test_access_keys_are_required_and_unique(tmp_path: Path) -> None:
    without = BASE.split("access_keys:", maxsplit=1)[0]
    assert error_for(tmp_path, without).field == "access_keys"
    dup = BASE + f"  - {{access_key_id: APIKEY, secret_access_key: {SECRET}x}}\n"
    assert error_for(tmp_path, dup).field == "access_keys"
    colon = BASE.replace("access_key_id: APIKEY", "access_key_id: 'API:KEY'")
    assert error_for(tmp_path, colon).field == "access_keys.0.access_key_id"


def test_secrets_never_in_errors_or_repr(tmp_path: Path) -> None:
    # A secret in the wrong shape: the error names the key but never repeats the value.
    text = BASE.replace(f"APIKEY, secret_access_key: {SECRET}}}", f"APIKEY, secret_access_key: [{SECRET}]}}")
    err = error_for(tmp_path, text)
    assert err.field == "access_keys.0.secret_access_key"
    assert SECRET not in str(err)
    # A malformed database URL carrying a password is not echoed either.
    err = error_for(tmp_path, BASE.replace("postgresql://mirror:", "nosuch://mirror:"))
    assert err.field == "mirrors_db_url"
    assert DB_PASSWORD not in str(err)
    conf = load_mirror_config(write(tmp_path, BASE), {})
    for shown in (repr(conf), str(conf), conf.model_dump_json(), repr(conf.s3_settings())):
        assert SECRET not in shown
        assert DB_PASSWORD not in shown
    assert DB_PASSWORD not in conf.mirrors_db_url_display
    assert "***" in conf.mirrors_db_url_display


def test_db_url_normalisation() -> None:
    assert normalize_db_url("sqlite:///rel/m.db") == "sqlite+aiosqlite:///rel/m.db"
    assert normalize_db_url("sqlite+aiosqlite:////abs/m.db") == "sqlite+aiosqlite:////abs/m.db"
    assert normalize_db_url("postgres://u:p@h/d") == "postgresql+asyncpg://u:p@h/d"
    assert normalize_db_url("postgresql+asyncpg://u@h:5433/d") == "postgresql+asyncpg://u@h:5433/d"
    for bad in ("sqlite://", "sqlite:///:memory:", "mysql://u:p@h/d", "not a url"):
        with pytest.raises(ValueError) as info:
            normalize_db_url(bad)
        assert "p@h" not in str(info.value)


def test_s3_settings_per_credentials_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = tmp_path / "aws-credentials"
    creds.write_text("[mirror]\naws_access_key_id = PROFILEKEY\naws_secret_access_key = profile-secret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    text = BASE.replace(
        "  eu-west-1:\n",
        "  ap-south-1:\n    kv_url: memory://\n    s3:\n"
        "      credentials: {source: profile, profile: mirror}\n"
        "  eu-west-1:\n",
    )
    conf = load_mirror_config(write(tmp_path, text), {})
    static = conf.s3_settings()  # this region
    assert isinstance(conf.this_region.s3.credentials, StaticCredentials)
    assert (static.access_key_id, static.secret_access_key) == ("AKIAA", SECRET)
    assert static.endpoint_url == "http://127.0.0.1:9000"
    assert static.region == "us-east-1"
    env = conf.s3_settings("eu-west-1")
    assert env.access_key_id is None and env.secret_access_key is None and env.endpoint_url is None
    assert isinstance(conf.regions["ap-south-1"].s3.credentials, ProfileCredentials)
    prof = conf.s3_settings("ap-south-1")
    assert (prof.access_key_id, prof.secret_access_key) == ("PROFILEKEY", "profile-secret")
    with pytest.raises(BadInputError) as info:
        conf.s3_settings("nowhere")
    assert info.value.field == "region"
    missing = load_mirror_config(write(tmp_path, text.replace("profile: mirror", "profile: nope")), {})
    with pytest.raises(BadInputError) as info:
        missing.s3_settings("ap-south-1")
    assert info.value.field == "regions.ap-south-1.s3.credentials.profile"


def test_deploy_local_example_loads() -> None:
    conf = load_mirror_config(REPO_ROOT / "deploy" / "mirror-local.yaml", {})
    assert set(conf.regions) == {"us-east", "eu-west"}  # the README's and the demo's names
    assert conf.mirrors_db_url.get_secret_value().startswith("sqlite+aiosqlite:///")
    for region in conf.regions.values():
        assert region.kv_url.get_secret_value().startswith("sqlite:///")
        assert region.local_roots
    b = load_mirror_config(REPO_ROOT / "deploy" / "mirror-local.yaml", {"LAKEFS_MIRROR__REGION": "eu-west"})
    assert b.region == "eu-west"


def test_deploy_aws_example_needs_its_secrets_from_env() -> None:
    path = REPO_ROOT / "deploy" / "mirror-aws.yaml"
    env = {
        "LAKEFS_MIRROR__REGION": "eu-central-1",
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"postgresql://mirror:{DB_PASSWORD}@rds.example.com/mirrors",
        "LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY": SECRET,
    }
    conf = load_mirror_config(path, env)
    assert set(conf.regions) == {"us-east-1", "eu-central-1"}
    assert conf.regions["us-east-1"].kv_url.get_secret_value().startswith("dynamodb://")
    assert conf.mirrors_db_url.get_secret_value().startswith("postgresql+asyncpg://")
    assert conf.s3_settings().region == "eu-central-1"
    for missing, field in (
        ("LAKEFS_MIRROR__REGION", "region"),
        ("LAKEFS_MIRROR__MIRRORS_DB_URL", "mirrors_db_url"),
        ("LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY", "access_keys.0.secret_access_key"),
    ):
        with pytest.raises(BadInputError) as info:
            load_mirror_config(path, {k: v for k, v in env.items() if k != missing})
        assert info.value.field == field
        assert SECRET not in str(info.value) and DB_PASSWORD not in str(info.value)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        BASE.replace(
            "region: us-east-1\n", "region: us-east-1\nlisten: nowhere\nworkers: 0\nlog_levl: INFO\n", 1
        )
        .replace("endpoint_url: http://127.0.0.1:9000", "endpoint_url: 127.0.0.1:9000")
        .replace("mirrors_db_url: postgresql", "mirrors_db_url: mysql")
    )
    env = {"LAKEFS_MIRROR__ACCESS_KEYS__7__ACCESS_KEY_ID": "x"}
    err = error_for(tmp_path, text, env)
    assert isinstance(err, ConfigError)
    fields = [field for field, _ in err.problems]
    assert set(fields) == {
        "access_keys.7",
        "listen",
        "workers",
        "log_levl",
        "regions.us-east-1.s3.endpoint_url",
        "mirrors_db_url",
    }, err.problems
    assert err.field == fields[0] and str(err).startswith(f"{fields[0]}: ")
    for field in fields:
        assert f"{field}: " in str(err)
    assert SECRET not in str(err) and DB_PASSWORD not in str(err)


def test_region_must_name_a_configured_region_beside_other_problems(tmp_path: Path) -> None:
    text = BASE.replace("region: us-east-1\n", "region: mars-1\nworkers: lots\n", 1)
    err = error_for(tmp_path, text)
    assert isinstance(err, ConfigError)
    assert sorted(f for f, _ in err.problems) == ["region", "workers"]


def test_object_store_is_the_shared_s3_schema(tmp_path: Path) -> None:
    text = BASE.replace(
        "      region: us-east-1\n",
        "      region: us-east-1\n      addressing_style: virtual\n      max_attempts: 9\n"
        "      multipart_chunk: 6291456\n",
        1,
    )
    conf = load_mirror_config(write(tmp_path, text), {})
    assert isinstance(conf.this_region.s3, S3Config)
    s3 = conf.s3_settings()
    assert (s3.addressing_style, s3.max_attempts, s3.multipart_chunk) == ("virtual", 9, 6291456)
    assert s3.access_key_id == "AKIAA"
    bad = text.replace("multipart_chunk: 6291456", "multipart_chunk: 1024")
    assert error_for(tmp_path, bad).field == "regions.us-east-1.s3.multipart_chunk"


def test_pass_timeout_and_temp_sweep_grace_are_config_keys(tmp_path: Path) -> None:
    conf = load_mirror_config(write(tmp_path, BASE), {})
    assert conf.pass_timeout_seconds == DEFAULT_PASS_TIMEOUT
    assert conf.temp_sweep_grace_seconds == DEFAULT_TMP_GRACE_SECONDS
    env = {"LAKEFS_MIRROR__PASS_TIMEOUT_SECONDS": "42", "LAKEFS_MIRROR__TEMP_SWEEP_GRACE_SECONDS": "7"}
    conf = load_mirror_config(write(tmp_path, BASE), env)
    assert pass_timeout_of(conf, None) == 42.0  # the key, unless the flag is given
    assert pass_timeout_of(conf, 5.0) == 5.0
    core = conf.core_settings("eu-west-1")
    assert core.temp_sweep_grace_seconds == 7.0
    assert core.kv_url is not None and core.kv_url.get_secret_value().startswith("postgresql://kv:")
    assert core.s3 is conf.regions["eu-west-1"].s3
    assert (
        error_for(tmp_path, BASE, {"LAKEFS_MIRROR__PASS_TIMEOUT_SECONDS": "0"}).field
        == "pass_timeout_seconds"
    )


def test_object_store_is_still_read_as_the_deprecated_name_of_s3(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Configurations written before the regions took the core's ``s3`` keep loading, with a
    warning; an error inside the old section names the key the file uses."""
    old = BASE.replace("    s3:\n", "    object_store:\n", 1)
    assert "object_store" in old
    with caplog.at_level("WARNING", logger="lakefs_mirror.config"):
        conf = load_mirror_config(write(tmp_path, old), {})
    assert any("object_store" in r.getMessage() and "deprecated" in r.getMessage() for r in caplog.records)
    assert conf.this_region.s3.endpoint_url == "http://127.0.0.1:9000"
    assert conf.s3_settings().access_key_id == "AKIAA"
    assert conf.core_settings().s3 is conf.this_region.s3
    bad = old.replace("endpoint_url: http://127.0.0.1:9000", "endpoint_url: ftp://x")
    assert error_for(tmp_path, bad).field == "regions.us-east-1.object_store.endpoint_url"


def test_an_s3_override_of_a_file_using_object_store_wins(tmp_path: Path) -> None:
    """The file still says ``object_store``, the environment overrides ``s3``: both are read, the
    override's keys win (the new name in an environment must not break an old file)."""
    old = BASE.replace("    s3:\n", "    object_store:\n", 1)
    env = {"LAKEFS_MIRROR__REGIONS__US-EAST-1__S3__REGION": "us-west-2"}
    conf = load_mirror_config(write(tmp_path, old), env)
    assert conf.this_region.s3.region == "us-west-2"
    assert conf.this_region.s3.endpoint_url == "http://127.0.0.1:9000"  # from the old section


def test_a_region_is_the_core_settings_schema(tmp_path: Path) -> None:
    """A region takes the core's keys (as GC's ``core`` and the CLI's file); its own
    ``temp_sweep_grace_seconds`` wins over the top level's; the shared cache is not a region's."""
    text = BASE.replace(
        "    local_roots: [/srv/eu]\n",
        "    local_roots: [/srv/eu]\n    temp_sweep_grace_seconds: 12\n    hard_delete_journal: false\n",
    )
    conf = load_mirror_config(write(tmp_path, text), {"LAKEFS_MIRROR__TEMP_SWEEP_GRACE_SECONDS": "7"})
    eu, us = conf.core_settings("eu-west-1"), conf.core_settings("us-east-1")
    assert (eu.temp_sweep_grace_seconds, eu.hard_delete_journal) == (12.0, False)
    assert (us.temp_sweep_grace_seconds, us.hard_delete_journal) == (7.0, True)
    assert eu.table_cache_bytes == us.table_cache_bytes == conf.table_cache_bytes
    roots = "    local_roots: [/srv/eu]\n"
    shared = BASE.replace(roots, roots + "    table_cache_bytes: 5\n")
    err = error_for(tmp_path, shared)
    assert err.field == "regions.eu-west-1" and "table cache" in str(err)
    unknown = BASE.replace("    local_roots: [/srv/eu]\n", "    local_roots: [/srv/eu]\n    kv: x\n")
    assert error_for(tmp_path, unknown).field == "regions.eu-west-1.kv"


def test_every_daemon_config_extends_the_platform_s(tmp_path: Path) -> None:
    from lakefs_core.service.config import DaemonConfig
    from lakefs_gc.config import GCConfig
    from lakefs_mirror.config import MirrorConfig

    assert issubclass(GCConfig, DaemonConfig) and issubclass(MirrorConfig, DaemonConfig)
    conf = load_mirror_config(write(tmp_path, BASE), {})
    assert (conf.listen_host, conf.listen_port, conf.poll_interval_seconds) == ("127.0.0.1", 8008, 5.0)
    dup = BASE + "  - {access_key_id: APIKEY, secret_access_key: other}\n"
    assert error_for(tmp_path, dup).field == "access_keys"
    assert error_for(tmp_path, BASE + "listen: nowhere\n").field == "listen"

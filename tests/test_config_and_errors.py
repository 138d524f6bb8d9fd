"""The config loader (YAML + env overrides, key-path errors) and the error tree."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pydantic import SecretStr

from lakefs_core import errors
from lakefs_core.config import StrictModel, load_config


class Api(StrictModel):
    listen: str = "127.0.0.1:8080"
    secret: SecretStr | None = None


class Region(StrictModel):
    name: str
    workers: int = 4


class Conf(StrictModel):
    region: str
    api: Api = Api()
    regions: tuple[Region, ...] = ()
    debug: bool = False


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_yaml_and_env_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "region: eu\napi:\n  listen: 0.0.0.0:1\nregions:\n  - name: eu\n")
    env = {"APP__API__LISTEN": "127.0.0.1:9", "APP__DEBUG": "true", "OTHER__REGION": "x"}
    conf = load_config(Conf, path, env=env, env_prefix="APP")
    assert conf.api.listen == "127.0.0.1:9"
    assert conf.debug is True
    assert conf.region == "eu"
    assert conf.regions[0].workers == 4


def test_error_names_exact_key_path(tmp_path: Path) -> None:
    path = write(tmp_path, "region: eu\nregions:\n  - name: a\n  - name: b\n    workers: lots\n")
    with pytest.raises(errors.BadInputError) as info:
        load_config(Conf, path)
    assert info.value.field == "regions.1.workers"
    assert "regions.1.workers" in str(info.value)


def test_unknown_key_rejected(tmp_path: Path) -> None:
    with pytest.raises(errors.BadInputError) as info:
        load_config(Conf, write(tmp_path, "region: eu\napi:\n  lisen: x\n"))
    assert info.value.field == "api.lisen"


def test_missing_required_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(errors.BadInputError) as info:
        load_config(Conf, write(tmp_path, "debug: false\n"))
    assert info.value.field == "region"
    with pytest.raises(errors.BadInputError, match="does not exist"):
        load_config(Conf, tmp_path / "absent.yaml")


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(errors.BadInputError, match="line 2"):
        load_config(Conf, write(tmp_path, "region: eu\n\tapi: x\n"))


def test_secret_value_never_in_error(tmp_path: Path) -> None:
    path = write(tmp_path, "region: eu\napi:\n  secret: {nested: hunter2-secret}\n")
    with pytest.raises(errors.BadInputError) as info:
        load_config(Conf, path)
    assert "hunter2" not in str(info.value)
    assert info.value.field == "api.secret"
    conf = load_config(Conf, write(tmp_path, "region: eu\napi:\n  secret: hunter2-secret\n"))
    assert "hunter2" not in repr(conf)


def test_error_tree_shape() -> None:
    leaves = [
        errors.NotFoundError,
        errors.PreconditionFailedError,
        errors.CorruptDataError,
        errors.BadInputError,
        errors.TransientError,
        errors.UnreachableError,
        errors.ReadOnlyError,
        errors.TooManyRetriesError,
        errors.MergeConflictError,
        errors.NoChangesError,
        errors.AuthenticationError,
        errors.PermissionDeniedError,
        errors.BadRequestError,
        errors.AlreadySetUpError,
        errors.TamperedError,
    ]
    assert all(issubclass(cls, errors.LakeFSError) for cls in leaves)
    assert len({cls.exit_code for cls in leaves}) == len(leaves)
    assert issubclass(errors.PreconditionFailedError, errors.ConflictError)
    assert errors.is_retryable(errors.UnreachableError("kv down"))
    assert not errors.is_retryable(errors.CorruptDataError("bad", file="f", offset=3))
    assert "file f, offset 3" in str(errors.CorruptDataError("bad", file="f", offset=3))
    conflict = errors.MergeConflictError([b"a/1", b"b/2"])
    assert conflict.keys == [b"a/1", b"b/2"] and "a/1" in str(conflict)


@pytest.mark.parametrize(
    "error",
    [
        errors.PurgedError("gone", audit_id="a1"),
        errors.CorruptDataError("bad", file="f", offset=3),
        errors.TamperedError("digest differs", reason="digest", file="f"),
        errors.BadInputError("no", field="path"),
        errors.StartupError("port in use", key="api.listen"),
        errors.ConfigError([("a.b", "missing"), ("c", "not an int")]),
        errors.MergeConflictError([b"a/1"]),
        errors.UnreachableError("kv down"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_error_survives_pickling(error: errors.LakeFSError) -> None:
    """Worker processes send errors back pickled; keyword-only fields must not break that."""
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error) and again.args == error.args
    assert again.__dict__ == error.__dict__
    noted = error.with_note("3 of 7 staged")  # the same class, fields and exit code; a longer message
    assert type(noted) is type(error) and noted.__dict__ == error.__dict__
    assert str(noted) == f"{error} (3 of 7 staged)" and noted.exit_code == error.exit_code

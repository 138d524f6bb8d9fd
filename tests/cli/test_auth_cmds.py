"""``lakefs-core auth`` as real processes on the embedded SQLite store, and on PostgreSQL.

On SQLite they are children of the pre-imported ``lakefs-core`` (tests/cli/conftest.py's
``core_zygote``), but for the first refused setup, a fresh process. On PostgreSQL the same
commands run in-process (:class:`~tests.cli.helpers.Mixed`; the one reading
stdin and the one without the secret key stay processes): every one of them ran as a process on
SQLite, and the PostgreSQL run is about the store (it saves ~40 interpreter starts).

Setup refuses without ``auth.encrypt.secret_key`` (exit 9, nothing written), then prints the first
admin's keys once and refuses a second time (exit 23). Users, groups, members, policies (lakeFS's
policy JSON, from a file and from stdin), attachments and credentials are created, listed, shown and
deleted; what the processes wrote is read back in this process by the auth store: the printed secret
is the stored one, the built-in groups grant what lakeFS's do (a Developer may write, a Viewer may
not), and deleting a user takes its keys. Secrets never reach stderr or ``check-config``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakefs_core.auth import permissions as perms
from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.permissions import Permission
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import (
    AlreadySetUpError,
    BadInputError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
)
from lakefs_core.kv import open_kv
from tests.cli.helpers import Cli, Mixed, set_user_env, user_env
from tests.support.pg import create_database, drop_database
from tests.support.zygote import Zygote

SECRET_KEY = "installation-secret-that-is-long"
POLICY = {
    "statement": [
        {
            "effect": "allow",
            "action": ["fs:ReadObject"],
            "resource": "arn:lakefs:fs:::repository/r/object/pub/*",
        }
    ]
}


@pytest.fixture(params=["sqlite", "postgres"])
def kv_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kv.sqlite3'}"
        return
    request.getfixturevalue("pg_database")  # skips locally / fails in CI when unreachable
    db = create_database()  # one of its own: the auth partition is the whole installation's
    try:
        yield db.url
    finally:
        drop_database(db)


def store_call(kv_url: str, fn: object) -> object:
    async def run() -> object:
        kv = await open_kv(kv_url)
        try:
            return await fn(AuthStore(kv, SecretStore(SECRET_KEY)))  # type: ignore[operator]
        finally:
            await kv.close()

    return asyncio.run(run())


def test_auth_commands_end_to_end(
    tmp_path: Path,
    kv_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
    core_zygote: Zygote,
) -> None:
    base = user_env(tmp_path / "home", LAKEFS_CORE__KV_URL=kv_url)
    bare = Cli(base, tmp_path)  # exec'd: an auth command as a fresh interpreter
    keyed = {"LAKEFS_CORE__KV_URL": kv_url, "LAKEFS_CORE__AUTH__ENCRYPT__SECRET_KEY": SECRET_KEY}
    processes = Cli(user_env(tmp_path / "home", **keyed), tmp_path, zygote=core_zygote)
    cli: Cli | Mixed = processes
    if not kv_url.startswith("sqlite:"):  # PostgreSQL: in-process, as the module docstring says
        set_user_env(monkeypatch, tmp_path / "home", **keyed)
        monkeypatch.chdir(tmp_path)
        cli = Mixed(processes, capsysbinary)

    bare("auth", "setup", "--user", "admin").failed(BadInputError.exit_code, "auth.encrypt.secret_key")
    assert cli.json("auth", "users", "list") == {"results": []}

    admin = cli.json("auth", "setup", "--user", "admin")
    assert (
        admin["user"] == "admin"
        and len(admin["access_key_id"]) == 20
        and len(admin["secret_access_key"]) == 40
    )
    cli("auth", "setup", "--user", "again").failed(AlreadySetUpError.exit_code, "already set up")
    assert [u["id"] for u in cli.json("auth", "users", "list")["results"]] == ["admin"]
    groups = [g["id"] for g in cli.json("auth", "groups", "list")["results"]]
    assert groups == ["Admins", "Developers", "SuperUsers", "Viewers"]

    (tmp_path / "policy.json").write_text(json.dumps(POLICY))
    created = cli.json("auth", "policies", "create", "--id", "PubRead", "--statement-document", "policy.json")
    assert created["statement"] == POLICY["statement"]
    from_stdin = cli(
        "auth", "policies", "create", "--statement-document", "-", "--json", stdin=b'{"id": "S", **x}'
    )
    from_stdin.failed(BadInputError.exit_code, "JSON")
    assert cli.json("auth", "policies", "show", "--id", "PubRead")["id"] == "PubRead"
    assert "FSReadWriteAll" in [p["id"] for p in cli.json("auth", "policies", "list")["results"]]
    cli("auth", "policies", "create", "--statement-document", "missing.json").failed(NotFoundError.exit_code)

    for user, group in (("dev", "Developers"), ("viewer", "Viewers")):
        cli("auth", "users", "create", "--id", user).ok()
        cli("auth", "groups", "members", "add", "--id", group, "--user", user).ok()
    cli("auth", "users", "create", "--id", "dev").failed(ConflictError.exit_code, "already exists")
    assert [u["id"] for u in cli.json("auth", "groups", "members", "list", "--id", "Viewers")["results"]] == [
        "viewer"
    ]
    cli("auth", "policies", "attach", "--id", "PubRead", "--user", "viewer").ok()
    cli("auth", "policies", "attach", "--id", "PubRead", "--user", "viewer", "--group", "Viewers").failed(
        BadInputError.exit_code, "exactly one"
    )
    cli("auth", "policies", "attach", "--id", "Nope", "--group", "Viewers").failed(
        NotFoundError.exit_code, "Nope"
    )

    key = cli.json("auth", "credentials", "create", "--id", "dev")
    listed = cli.json("auth", "credentials", "list", "--id", "dev")["results"]
    assert listed == [{"access_key_id": key["access_key_id"], "creation_date": key["creation_date"]}]

    async def check(store: AuthStore) -> None:
        credential = await store.get_credentials(key["access_key_id"])
        assert (credential.username, credential.secret_access_key) == ("dev", key["secret_access_key"])
        write = Permission(perms.WRITE_OBJECT, perms.object_arn("r", "k"))
        await store.authorize("dev", write)
        with pytest.raises(PermissionDeniedError):
            await store.authorize("viewer", write)
        await store.authorize("viewer", Permission(perms.READ_OBJECT, perms.object_arn("r", "pub/x")))

    store_call(kv_url, check)

    cli("auth", "policies", "detach", "--id", "PubRead", "--user", "viewer").ok()
    cli("auth", "policies", "detach", "--id", "PubRead", "--user", "viewer").failed(NotFoundError.exit_code)
    cli("auth", "groups", "members", "remove", "--id", "Viewers", "--user", "viewer").ok()
    cli("auth", "users", "delete", "--id", "dev", "--yes").ok()
    cli("auth", "credentials", "list", "--id", "dev").failed(NotFoundError.exit_code, "dev")

    async def gone(store: AuthStore) -> None:
        with pytest.raises(NotFoundError):
            await store.get_credentials(key["access_key_id"])

    store_call(kv_url, gone)
    cli("auth", "policies", "delete", "--id", "PubRead", "--yes").ok()
    cli("auth", "groups", "delete", "--id", "Viewers", "--yes").ok()
    human = cli("auth", "groups", "list").ok().out
    assert "Viewers" not in human and "Admins" in human

    shown = cli("check-config").ok().out
    assert SECRET_KEY not in shown and '"secret_key": "***"' in shown
    for result in cli.history + bare.history:
        assert SECRET_KEY not in result.err and admin["secret_access_key"] not in result.err
    secret_outputs = [r for r in cli.history if admin["secret_access_key"] in r.out]
    assert [r.args[:2] for r in secret_outputs] == [("auth", "setup")]  # printed once

"""``lakefs-core auth``: lakeFS's users, groups, policies and access keys (lakectl's ``auth`` commands,
which talk to a server, done here on the KV store itself; :mod:`lakefs_core.auth.store`).

- ``auth setup --user NAME``: the one-shot setup (lakeFS's ``lakefs setup``): creates the built-in
  groups and policies that are missing and the first admin, in ``Admins``, and prints its keys once.
  A second setup is refused with exit code 23 (:class:`~lakefs_core.errors.AlreadySetUpError`).
- ``auth users create|list|delete``, ``auth groups create|list|delete``,
  ``auth groups members add|remove|list``, ``auth policies create|list|show|delete|attach|detach``
  (``create`` reads lakeFS's policy JSON, ``--statement-document FILE`` or ``-`` for stdin; attach and
  detach take ``--user`` or ``--group``), ``auth credentials create|list|delete``: ``create`` prints
  the secret access key, this once; nothing else ever shows it.

``auth setup`` and ``auth credentials create`` encrypt secrets with ``auth.encrypt.secret_key`` from
the configuration (env ``LAKEFS_CORE__AUTH__ENCRYPT__SECRET_KEY``); without it they stop with a
configuration error naming the key (exit 9) before touching anything. The key is never printed.
Every command takes ``--json``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.model import Credential, Group, User
from lakefs_core.auth.policy import Policy, parse_policy_document
from lakefs_core.auth.store import AuthStore
from lakefs_core.cli.context import Session, local_path_error, run_session
from lakefs_core.cli.output import emit, fmt_time, json_option, printable, table, unix
from lakefs_core.cli.state import app_state
from lakefs_core.errors import BadInputError, ConfigError
from lakefs_core.service.cli import confirm, yes_option

T = TypeVar("T")
MAX_POLICY_DOCUMENT = 1 << 20


def _secrets() -> SecretStore:
    secret = app_state().config().auth.encrypt.secret_key
    if secret is None:
        raise ConfigError([("auth.encrypt.secret_key", "must be set to create or read secret access keys")])
    return SecretStore(secret.get_secret_value())


def run_auth(fn: Callable[[AuthStore], Awaitable[T]], *, secrets: bool = False) -> T:
    """Run ``fn`` with the auth store of the configured KV store (``secrets``: able to encrypt)."""
    store_secrets = _secrets() if secrets else None  # before anything is opened

    async def op(s: Session) -> T:
        return await fn(AuthStore(s.graveler.kv, store_secrets))

    return run_session(op)


def user_doc(u: User) -> dict[str, Any]:
    return {"id": u.username, "creation_date": unix(u.created_at), "email": u.email or None}


def group_doc(g: Group) -> dict[str, Any]:
    return {"id": g.name, "name": g.name, "creation_date": unix(g.created_at), "description": g.description}


def credential_doc(c: Credential) -> dict[str, Any]:
    doc: dict[str, Any] = {"access_key_id": c.access_key_id, "creation_date": unix(c.issued_at)}
    if c.secret_access_key is not None:
        doc["secret_access_key"] = c.secret_access_key
    return doc


def _policy_rows(policies: list[Policy]) -> list[list[str]]:
    return [[printable(p.name), fmt_time(p.created_at)] for p in policies]


@click.group()
def auth() -> None:
    """Manage lakeFS users, groups, policies and credentials in the KV store."""


@auth.command("setup")
@click.option("--user", "username", required=True, help="Name of the first admin user.")
@click.option("--access-key-id", default=None, hidden=True, help="For integration tests: the admin's key id.")
@click.option("--secret-access-key", default=None, hidden=True, help="For integration tests: its secret.")
@json_option
def setup_cmd(username: str, access_key_id: str | None, secret_access_key: str | None) -> None:
    """Create the built-in groups and policies and the first admin; print its keys once."""
    from lakefs_core.auth.setup import setup

    if (access_key_id is None) != (secret_access_key is None):
        raise BadInputError("give both or neither", field="--access-key-id/--secret-access-key")
    credential = run_auth(
        lambda s: setup(s, username, access_key_id=access_key_id, secret_access_key=secret_access_key),
        secrets=True,
    )

    def human() -> None:
        click.echo("credentials:")
        click.echo(f"  access_key_id: {credential.access_key_id}")
        click.echo(f"  secret_access_key: {credential.secret_access_key}")

    emit({"user": username, **credential_doc(credential)}, human)


# -- users -------------------------------------------------------------------------------------------


@auth.group("users")
def users() -> None:
    """Create, list and delete users."""


@users.command("create")
@click.option("--id", "username", required=True, help="Username.")
@click.option("--email", default="", help="The user's email address.")
@json_option
def users_create(username: str, email: str) -> None:
    user = run_auth(lambda s: s.create_user(username, email=email))
    emit(user_doc(user), lambda: click.echo(f"User created: {printable(user.username)}"))


@users.command("list")
@json_option
def users_list() -> None:
    found = run_auth(lambda s: _collect(s.list_users()))
    rows = [[printable(u.username), fmt_time(u.created_at)] for u in found]
    emit({"results": [user_doc(u) for u in found]}, lambda: table(["User ID", "Creation Date"], rows))


@users.command("delete")
@click.option("--id", "username", required=True, help="Username.")
@yes_option
@json_option
def users_delete(username: str, yes: bool) -> None:
    """Delete a user with its credentials, group memberships and policy attachments."""
    confirm(f"Delete user {printable(username)!r}", yes)
    run_auth(lambda s: s.delete_user(username))
    emit({"deleted": username}, lambda: click.echo(f"User deleted: {printable(username)}"))


async def _collect(items: Any) -> list[Any]:
    return [item async for item in items]


# -- groups ------------------------------------------------------------------------------------------


@auth.group("groups")
def groups() -> None:
    """Create, list and delete groups and their members."""


@groups.command("create")
@click.option("--id", "name", required=True, help="Group name.")
@click.option("--description", default="", help="What the group is for.")
@json_option
def groups_create(name: str, description: str) -> None:
    group = run_auth(lambda s: s.create_group(name, description=description))
    emit(group_doc(group), lambda: click.echo(f"Group created: {printable(group.name)}"))


@groups.command("list")
@json_option
def groups_list() -> None:
    found = run_auth(lambda s: _collect(s.list_groups()))
    rows = [[printable(g.name), fmt_time(g.created_at)] for g in found]
    emit({"results": [group_doc(g) for g in found]}, lambda: table(["Group ID", "Creation Date"], rows))


@groups.command("delete")
@click.option("--id", "name", required=True, help="Group name.")
@yes_option
@json_option
def groups_delete(name: str, yes: bool) -> None:
    """Delete a group (its members stay users)."""
    confirm(f"Delete group {printable(name)!r}", yes)
    run_auth(lambda s: s.delete_group(name))
    emit({"deleted": name}, lambda: click.echo(f"Group deleted: {printable(name)}"))


@groups.group("members")
def members() -> None:
    """Add, remove and list the members of a group."""


@members.command("add")
@click.option("--id", "group", required=True, help="Group name.")
@click.option("--user", "username", required=True, help="Username.")
@json_option
def members_add(group: str, username: str) -> None:
    run_auth(lambda s: s.add_user_to_group(username, group))
    emit(
        {"group": group, "user": username},
        lambda: click.echo(f"User {printable(username)} added to {printable(group)}"),
    )


@members.command("remove")
@click.option("--id", "group", required=True, help="Group name.")
@click.option("--user", "username", required=True, help="Username.")
@json_option
def members_remove(group: str, username: str) -> None:
    run_auth(lambda s: s.remove_user_from_group(username, group))
    emit(
        {"group": group, "user": username},
        lambda: click.echo(f"User {printable(username)} removed from {printable(group)}"),
    )


@members.command("list")
@click.option("--id", "group", required=True, help="Group name.")
@json_option
def members_list(group: str) -> None:
    found = run_auth(lambda s: s.list_group_users(group))
    rows = [[printable(u.username)] for u in found]
    emit({"results": [user_doc(u) for u in found]}, lambda: table(["User ID"], rows))


# -- policies ----------------------------------------------------------------------------------------


@auth.group("policies")
def policies() -> None:
    """Create, show, list, delete, attach and detach policies."""


def _read_document(path: str) -> bytes:
    if path == "-":
        data = sys.stdin.buffer.read(MAX_POLICY_DOCUMENT + 1)
    else:
        try:
            with Path(path).open("rb") as f:
                data = f.read(MAX_POLICY_DOCUMENT + 1)
        except OSError as e:
            raise local_path_error(e, path, "--statement-document") from None
    if len(data) > MAX_POLICY_DOCUMENT:
        raise BadInputError(f"is larger than {MAX_POLICY_DOCUMENT} bytes", field="--statement-document")
    return data


@policies.command("create")
@click.option("--id", "name", default=None, help="Policy name (else the document's 'id').")
@click.option(
    "--statement-document", "document", required=True, help="lakeFS's policy JSON: a file, or - for stdin."
)
@json_option
def policies_create(name: str | None, document: str) -> None:
    """Create a policy from lakeFS's policy JSON ({"statement": [{"effect", "action", "resource"}]})."""
    policy = parse_policy_document(_read_document(document), name)
    stored = run_auth(lambda s: s.write_policy(policy))
    emit(stored.to_doc(), lambda: click.echo(f"Policy created: {printable(stored.name)}"))


@policies.command("list")
@json_option
def policies_list() -> None:
    found = run_auth(lambda s: _collect(s.list_policies()))
    emit(
        {"results": [p.to_doc() for p in found]},
        lambda: table(["Policy ID", "Creation Date"], _policy_rows(found)),
    )


@policies.command("show")
@click.option("--id", "name", required=True, help="Policy name.")
@json_option
def policies_show(name: str) -> None:
    import json

    policy = run_auth(lambda s: s.get_policy(name))
    emit(policy.to_doc(), lambda: click.echo(json.dumps(policy.to_doc(), indent=2, ensure_ascii=False)))


@policies.command("delete")
@click.option("--id", "name", required=True, help="Policy name.")
@yes_option
@json_option
def policies_delete(name: str, yes: bool) -> None:
    """Delete a policy, detaching it from every user and group first."""
    confirm(f"Delete policy {printable(name)!r}", yes)
    run_auth(lambda s: s.delete_policy(name))
    emit({"deleted": name}, lambda: click.echo(f"Policy deleted: {printable(name)}"))


def _target(username: str | None, group: str | None) -> tuple[str, str]:
    if (username is None) == (group is None):
        raise BadInputError("give exactly one of --user and --group", field="--user/--group")
    return ("user", username) if username is not None else ("group", group or "")


def _attach_options(fn: Callable[..., None]) -> Callable[..., None]:
    fn = click.option("--group", default=None, help="Group to attach it to / detach it from.")(fn)
    fn = click.option("--user", "username", default=None, help="User to attach it to / detach it from.")(fn)
    return click.option("--id", "name", required=True, help="Policy name.")(fn)


@policies.command("attach")
@_attach_options
@json_option
def policies_attach(name: str, username: str | None, group: str | None) -> None:
    kind, who = _target(username, group)
    run_auth(
        lambda s: (
            s.attach_policy_to_user(name, who) if kind == "user" else s.attach_policy_to_group(name, who)
        )
    )
    emit(
        {"policy": name, kind: who},
        lambda: click.echo(f"Policy {printable(name)} attached to {kind} {printable(who)}"),
    )


@policies.command("detach")
@_attach_options
@json_option
def policies_detach(name: str, username: str | None, group: str | None) -> None:
    kind, who = _target(username, group)
    run_auth(
        lambda s: (
            s.detach_policy_from_user(name, who) if kind == "user" else s.detach_policy_from_group(name, who)
        )
    )
    emit(
        {"policy": name, kind: who},
        lambda: click.echo(f"Policy {printable(name)} detached from {kind} {printable(who)}"),
    )


# -- credentials -------------------------------------------------------------------------------------


@auth.group("credentials")
def credentials() -> None:
    """Create, list and delete a user's access keys."""


@credentials.command("create")
@click.option("--id", "username", required=True, help="Username.")
@json_option
def credentials_create(username: str) -> None:
    """Create an access key; its secret is printed now and never again."""
    credential = run_auth(lambda s: s.create_credentials(username), secrets=True)

    def human() -> None:
        click.echo(f"Access key ID: {credential.access_key_id}")
        click.echo(f"Secret access key: {credential.secret_access_key}")

    emit(credential_doc(credential), human)


@credentials.command("list")
@click.option("--id", "username", required=True, help="Username.")
@json_option
def credentials_list(username: str) -> None:
    found = run_auth(lambda s: s.list_user_credentials(username))
    rows = [[c.access_key_id, fmt_time(c.issued_at)] for c in found]
    emit(
        {"results": [credential_doc(c) for c in found]}, lambda: table(["Access Key ID", "Issued Date"], rows)
    )


@credentials.command("delete")
@click.option("--id", "username", required=True, help="Username.")
@click.option("--access-key-id", required=True, help="The access key to delete.")
@yes_option
@json_option
def credentials_delete(username: str, access_key_id: str, yes: bool) -> None:
    """Delete an access key of a user."""
    confirm(f"Delete access key {access_key_id!r} of user {printable(username)!r}", yes)
    run_auth(lambda s: s.delete_credentials(username, access_key_id))
    emit({"deleted": access_key_id}, lambda: click.echo(f"Credentials deleted: {access_key_id}"))

"""The built-in groups and policies lakeFS's setup creates, and the one-shot setup of the first admin.

The policies and their statements are lakeFS's (``pkg/auth/setup/setup.go``, ``pkg/auth/base.go``),
name for name and action for action; so are the groups and what is attached to them:

=============  ========================================================================================
group          policies
=============  ========================================================================================
Admins         FSFullAccess, CatalogReadWriteAll, AuthFullAccess, RepoManagementFullAccess
SuperUsers     FSFullAccess, CatalogReadWriteAll, AuthManageOwnCredentials, RepoManagementReadAll
Developers     FSReadWriteAll, PRReadWriteAll, CatalogReadWriteAll, AuthManageOwnCredentials,
               RepoManagementReadAll
Viewers        FSReadAll, CatalogReadAll, AuthManageOwnCredentials
=============  ========================================================================================

:func:`setup` is lakeFS's ``lakefs setup``: refused (:class:`~lakefs_core.errors.AlreadySetUpError`)
when the installation metadata already holds a setup time; otherwise it creates whichever built-in
groups, policies and attachments are missing (existing ones, perhaps edited, are left as they are),
the first user in ``Admins`` and its access key, and records the setup time
(``installation_metadata/setup_timestamp``, RFC 3339, with ``setup_auth_internal``) with an
insert-if-absent: of two concurrent setups exactly one returns keys; the other removes the user it
created and is refused. A setup failing after it created its user removes that user again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from datetime import UTC, datetime

from lakefs_core.auth import permissions as perms
from lakefs_core.auth.model import Credential
from lakefs_core.auth.policy import Policy, Statement
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import AlreadySetUpError, ConflictError, LakeFSError

__all__ = ["BUILTIN_GROUPS", "SETUP_TIMESTAMP", "builtin_policies", "ensure_builtins", "setup"]

ADMINS = "Admins"
SUPER_USERS = "SuperUsers"
DEVELOPERS = "Developers"
VIEWERS = "Viewers"
SETUP_TIMESTAMP = "setup_timestamp"
SETUP_AUTH_TYPE = "setup_auth_internal"  # lakeFS's SetupAuthTypeKeyPrefix + its RBAC type

BUILTIN_GROUPS: dict[str, tuple[str, ...]] = {
    ADMINS: ("FSFullAccess", "CatalogReadWriteAll", "AuthFullAccess", "RepoManagementFullAccess"),
    SUPER_USERS: ("FSFullAccess", "CatalogReadWriteAll", "AuthManageOwnCredentials", "RepoManagementReadAll"),
    DEVELOPERS: (
        "FSReadWriteAll",
        "PRReadWriteAll",
        "CatalogReadWriteAll",
        "AuthManageOwnCredentials",
        "RepoManagementReadAll",
    ),
    VIEWERS: ("FSReadAll", "CatalogReadAll", "AuthManageOwnCredentials"),
}

_FS_READ_WRITE = (
    "fs:Read*",
    "fs:List*",
    perms.WRITE_OBJECT,
    perms.DELETE_OBJECT,
    perms.REVERT_BRANCH,
    perms.CREATE_BRANCH,
    perms.CREATE_TAG,
    perms.DELETE_BRANCH,
    perms.DELETE_TAG,
    perms.CREATE_COMMIT,
)
_REPO_MANAGEMENT_READ = (
    "ci:Read*",
    "retention:Get*",
    "branches:Get*",
    "pr:Read*",
    "pr:List*",
    perms.READ_CONFIG,
)
_OWN_CREDENTIALS = (
    perms.CREATE_CREDENTIALS,
    perms.DELETE_CREDENTIALS,
    perms.LIST_CREDENTIALS,
    perms.READ_CREDENTIALS,
)


def _allow(name: str, actions: tuple[str, ...], resource: str = perms.ALL) -> Policy:
    return Policy(name, (Statement("allow", actions, resource),))


def builtin_policies() -> list[Policy]:
    """lakeFS's RBAC base policies, in the order its setup writes them."""
    return [
        _allow("FSFullAccess", ("fs:*",)),
        _allow("FSReadWriteAll", _FS_READ_WRITE),
        _allow("FSReadAll", ("fs:List*", "fs:Read*")),
        _allow("RepoManagementFullAccess", ("ci:*", "retention:*", "branches:*", "pr:*", perms.READ_CONFIG)),
        _allow("PRReadWriteAll", ("pr:*",)),
        _allow("CatalogReadAll", perms.CATALOG_READ_ACTIONS),
        _allow("CatalogReadWriteAll", ("catalog:*",)),
        _allow("RepoManagementReadAll", _REPO_MANAGEMENT_READ),
        _allow("AuthFullAccess", ("auth:*",)),
        _allow("AuthManageOwnCredentials", _OWN_CREDENTIALS, perms.user_arn("${user}")),
    ]


async def _ignore_existing(step: Awaitable[object]) -> None:
    # created before (by lakeFS's setup or an earlier run): left as it is
    with contextlib.suppress(ConflictError):
        await step


async def ensure_builtins(store: AuthStore) -> None:
    """Create the built-in groups, policies and attachments that are missing."""
    for group in BUILTIN_GROUPS:
        await _ignore_existing(store.create_group(group))
    for policy in builtin_policies():
        await _ignore_existing(store.write_policy(policy))
    for group, policies in BUILTIN_GROUPS.items():
        for name in policies:
            await _ignore_existing(store.attach_policy_to_group(name, group))


async def setup(
    store: AuthStore, username: str, *, access_key_id: str | None = None, secret_access_key: str | None = None
) -> Credential:
    """Set the installation up and return the first admin's credential, secret included (see the
    module). ``access_key_id``/``secret_access_key`` are for integration tests, as lakeFS's hidden
    flags; by default both are generated."""
    if await store.get_metadata(SETUP_TIMESTAMP) is not None:
        raise AlreadySetUpError("this installation is already set up (installation_metadata/setup_timestamp)")
    await ensure_builtins(store)
    await store.create_user(username)
    try:
        await store.add_user_to_group(username, ADMINS)
        credential = await store.create_credentials(username, access_key_id, secret_access_key)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await store.set_metadata(SETUP_AUTH_TYPE, stamp)  # harmless without the setup time
    except BaseException as e:
        await _undo(store, username, e)
        raise
    try:
        claimed = await store.claim_metadata(SETUP_TIMESTAMP, stamp)
    except LakeFSError as e:  # the outcome is unknown: nothing is undone
        raise e.with_note(f"whether the setup was recorded is unknown; the user {username} is kept") from e
    if not claimed:
        error = AlreadySetUpError("another setup of this installation finished first")
        await _undo(store, username, error)
        raise error
    return credential


async def _undo(store: AuthStore, username: str, cause: BaseException) -> None:
    """Remove the user a failed setup created (its credential and membership with it)."""
    try:
        await store.delete_user(username)
    except LakeFSError as undo:
        if isinstance(cause, LakeFSError):
            raise cause.with_note(f"the user {username} it created is left: {undo}") from cause

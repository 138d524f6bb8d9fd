"""The auth service on the KV store: users, groups, policies, credentials, memberships and attachments
in lakeFS's ``auth`` partition, with lakeFS's keys and records (:mod:`lakefs_core.refs.kvkeys`,
:mod:`lakefs_core.auth.model`), so lakeFS reads what this writes and the other way round.

Contract:

- Creation is insert-if-absent (``set_if ABSENT``): a name taken is :class:`ConflictError`; a name
  of something missing is :class:`NotFoundError`. Names are validated as lakeFS validates them (no
  ``/``), policies as :func:`lakefs_core.auth.policy.validate_policy`.
- Memberships and attachments are written only between existing records, and re-checked after the
  write: an entry whose user, group or policy vanished meanwhile is removed again. Deleting a user,
  group or policy removes its entries first, the record, then sweeps its entries once more, so an
  entry written by a concurrent attach/add either saw the record gone (and removed itself) or is
  found by the sweep. Stricter than lakeFS: deleting a user also deletes its credentials (lakeFS
  leaves them, and a user re-created under the same name got them back), and creating a user, group
  or policy first removes entries a previous incarnation of the name left behind (lakeFS leaves
  them, and they came back to life), re-checking before each removal that the name is still free.
- Looking a credential up by access key id scans the users (lakeFS's layout has no index by key):
  ``O(users)`` reads. :class:`AuthStore` can cache credentials and effective policies for
  ``cache_seconds`` (a daemon's per-instance cache; the CLI never caches): a change made through the
  same store (a key deleted, a policy detached) clears the cache at once; one made by another
  process (another server instance, ``lakefs-core auth``) is seen within ``cache_seconds``, so a
  revoked key stops working everywhere within that bound.
- Secrets are encrypted with the :class:`~lakefs_core.auth.crypt.SecretStore` (lakeFS's format);
  decrypted only for authentication and creation, never listed, never in a message.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace

from lakefs_core.auth import keys
from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.model import (
    Credential,
    Group,
    User,
    decode_credential,
    decode_group,
    decode_index,
    decode_policy,
    decode_user,
    encode_credential,
    encode_group,
    encode_index,
    encode_policy,
    encode_user,
    now_ns,
)
from lakefs_core.auth.permissions import Node
from lakefs_core.auth.policy import Policy, authorize, validate_entity_id, validate_policy
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.kv.base import Expect, KVStore
from lakefs_core.offloop import run_cpu
from lakefs_core.refs import kvkeys as k

__all__ = ["AuthStore"]

P = k.AUTH_PARTITION
_MAX_CACHED = 10_000


class _TTLCache:
    """A small per-process cache of lookups (credentials, effective policies); ``ttl`` 0 disables it.
    ``clock`` is monotonic seconds."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._items: dict[str, tuple[float, object]] = {}

    def get(self, key: str) -> object | None:
        hit = self._items.get(key)
        if hit is None or hit[0] < self._clock():
            return None
        return hit[1]

    def put(self, key: str, value: object) -> None:
        if self.ttl <= 0:
            return
        if len(self._items) >= _MAX_CACHED:
            self._items.clear()
        self._items[key] = (self._clock() + self.ttl, value)

    def clear(self) -> None:
        self._items.clear()


class AuthStore:
    """lakeFS's KV auth service (see the module). ``secrets`` is needed only to create credentials and
    to read secrets back (authentication); ``cache_seconds`` > 0 caches credentials and policies
    (``clock``: the cache's monotonic seconds)."""

    def __init__(
        self,
        kv: KVStore,
        secrets: SecretStore | None = None,
        *,
        cache_seconds: float = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self._secrets = secrets
        self._credentials = _TTLCache(cache_seconds, clock)
        self._policies = _TTLCache(cache_seconds, clock)
        # (user, node, context) -> the cached policy list that allowed it (see ``authorize``)
        self._allowed: dict[tuple[str, Node, tuple[tuple[str, str], ...]], list[Policy]] = {}

    # -- primitives ------------------------------------------------------------------------------------

    async def _get(self, key: bytes, what: str) -> bytes:
        try:
            return await self.kv.get(P, key)
        except NotFoundError:
            raise NotFoundError(f"{what} not found") from None

    async def _exists(self, key: bytes) -> bool:
        try:
            await self.kv.get(P, key)
        except NotFoundError:
            return False
        return True

    async def _insert(self, key: bytes, value: bytes, what: str) -> None:
        try:
            await self.kv.set_if(P, key, value, Expect.ABSENT)
        except PreconditionFailedError:
            raise ConflictError(f"{what} already exists") from None

    async def _scan(self, prefix: bytes, after: str = "") -> AsyncIterator[tuple[bytes, bytes]]:
        start = prefix + after.encode() + b"\0" if after else prefix
        async for entry in self.kv.scan(P, start):
            if not entry.key.startswith(prefix):
                return
            yield entry.key, entry.value

    async def _names(self, prefix: bytes) -> list[str]:
        return [key[len(prefix) :].decode("utf-8", "surrogateescape") async for key, _ in self._scan(prefix)]

    async def _prefix_keys(self, prefixes: list[bytes]) -> list[bytes]:
        return [key for prefix in prefixes async for key, _ in self._scan(prefix)]

    async def _delete_keys(self, keys: list[bytes], still_free: bytes | None = None) -> None:
        """Delete ``keys``; with ``still_free``, only while that record is absent (entries of a name's
        previous holder are removed, a new holder's are never touched)."""
        for key in keys:
            if still_free is not None and await self._exists(still_free):
                return
            await self.kv.delete(P, key)

    async def _retire(self, key: bytes, entries: Callable[[], Awaitable[list[bytes]]]) -> None:
        """Delete a record's entries, the record, then the entries a racing attach or add wrote
        meanwhile (while the name stays free; see the module)."""
        await self._delete_keys(await entries())
        await self.kv.delete(P, key)
        await self._delete_keys(await entries(), still_free=key)
        self._forget()

    async def _link(self, key: bytes, primary: bytes, owners: list[tuple[bytes, str]], what: str) -> None:
        """Write the secondary entry ``key`` -> ``primary`` between existing ``owners``, then re-check
        them: if one vanished meanwhile, the entry is removed again (see the module)."""
        for owner, name in owners:
            await self._get(owner, name)
        await self._insert(key, encode_index(primary), what)
        for owner, name in owners:
            if not await self._exists(owner):
                await self.kv.delete(P, key)
                raise NotFoundError(f"{name} not found (deleted meanwhile)")
        self._forget()

    def _forget(self) -> None:
        self._credentials.clear()
        self._policies.clear()
        self._allowed.clear()

    # -- users -----------------------------------------------------------------------------------------

    async def create_user(
        self, username: str, *, email: str = "", friendly_name: str = "", source: str = "internal"
    ) -> User:
        validate_entity_id(username, "user")
        key = k.auth_user_key(username)
        if not await self._exists(key):
            await self._delete_keys(await self._user_entries(username), still_free=key)
        user = User(username, now_ns(), friendly_name=friendly_name, email=email, source=source)
        await self._insert(key, encode_user(user), f"user {username}")
        return user

    async def get_user(self, username: str) -> User:
        key = k.auth_user_key(username)
        return decode_user(await self._get(key, f"user {username}"), key)

    async def list_users(self, after: str = "") -> AsyncIterator[User]:
        async for key, value in self._scan(k.AUTH_USERS_PREFIX, after):
            yield decode_user(value, key)

    async def _user_entries(self, username: str) -> list[bytes]:
        """The user's credentials, policy attachments and group memberships."""
        found = await self._prefix_keys(
            [k.auth_credentials_prefix(username), k.auth_user_policies_prefix(username)]
        )
        async for group in self.list_groups():
            key = k.auth_group_user_key(group.name, username)
            if await self._exists(key):
                found.append(key)
        return found

    async def delete_user(self, username: str) -> None:
        """Delete ``username`` with its credentials, attachments and memberships (see the module)."""
        await self.get_user(username)
        await self._retire(k.auth_user_key(username), lambda: self._user_entries(username))

    # -- groups ----------------------------------------------------------------------------------------

    async def create_group(self, name: str, *, description: str = "") -> Group:
        validate_entity_id(name, "group")
        key = k.auth_group_key(name)
        if not await self._exists(key):
            await self._delete_keys(await self._group_entries(name), still_free=key)
        group = Group(name, now_ns(), description)
        await self._insert(key, encode_group(group), f"group {name}")
        return group

    async def get_group(self, name: str) -> Group:
        key = k.auth_group_key(name)
        return decode_group(await self._get(key, f"group {name}"), key)

    async def list_groups(self, after: str = "") -> AsyncIterator[Group]:
        async for key, value in self._scan(k.AUTH_GROUPS_PREFIX, after):
            yield decode_group(value, key)

    async def _group_entries(self, name: str) -> list[bytes]:
        return await self._prefix_keys([k.auth_group_users_prefix(name), k.auth_group_policies_prefix(name)])

    async def delete_group(self, name: str) -> None:
        """Delete the group with its memberships and policy attachments."""
        await self.get_group(name)
        await self._retire(k.auth_group_key(name), lambda: self._group_entries(name))

    async def add_user_to_group(self, username: str, group: str) -> None:
        await self._link(
            k.auth_group_user_key(group, username),
            k.auth_user_key(username),
            [(k.auth_group_key(group), f"group {group}"), (k.auth_user_key(username), f"user {username}")],
            f"user {username} in group {group}",
        )

    async def remove_user_from_group(self, username: str, group: str) -> None:
        await self.get_group(group)
        key = k.auth_group_user_key(group, username)
        await self._get(key, f"user {username} in group {group}")
        await self.kv.delete(P, key)
        self._forget()

    async def list_group_users(self, group: str) -> list[User]:
        """The members of ``group`` that exist (entries of vanished users are skipped, as lakeFS's
        secondary iterator skips them)."""
        await self.get_group(group)
        users = []
        async for key, value in self._scan(k.auth_group_users_prefix(group)):
            primary = decode_index(value, key)
            try:
                users.append(decode_user(await self.kv.get(P, primary), primary))
            except NotFoundError:
                continue
        return users

    async def list_user_groups(self, username: str) -> list[Group]:
        await self.get_user(username)
        return [
            group
            async for group in self.list_groups()
            if await self._exists(k.auth_group_user_key(group.name, username))
        ]

    # -- policies --------------------------------------------------------------------------------------

    async def _attachment_keys(self, policy: str) -> list[bytes]:
        found = []
        async for user in self.list_users():
            found.append(k.auth_user_policy_key(user.username, policy))
        async for group in self.list_groups():
            found.append(k.auth_group_policy_key(group.name, policy))
        return [key for key in found if await self._exists(key)]

    async def write_policy(self, policy: Policy, *, update: bool = False) -> Policy:
        """Create ``policy`` (``update``: replace an existing one, keeping its creation time)."""
        validate_policy(policy)
        key = k.auth_policy_key(policy.name)
        if not update:
            if not await self._exists(key):
                await self._delete_keys(await self._attachment_keys(policy.name), still_free=key)
            created = now_ns()
            await self._insert(key, encode_policy(policy, created), f"policy {policy.name}")
        else:
            old = await self._get(key, f"policy {policy.name}")
            stored, created = decode_policy(old, key)
            policy = replace(policy, acl_permission=stored.acl_permission)
            try:
                await self.kv.set_if(P, key, encode_policy(policy, created), Expect.equals(old))
            except PreconditionFailedError:
                raise ConflictError(f"policy {policy.name} changed meanwhile; try again") from None
            self._forget()
        return await self.get_policy(policy.name)

    async def get_policy(self, name: str) -> Policy:
        key = k.auth_policy_key(name)
        return decode_policy(await self._get(key, f"policy {name}"), key)[0]

    async def list_policies(self, after: str = "") -> AsyncIterator[Policy]:
        async for key, value in self._scan(k.AUTH_POLICIES_PREFIX, after):
            yield decode_policy(value, key)[0]

    async def delete_policy(self, name: str) -> None:
        """Delete the policy, detaching it from every user and group first."""
        await self.get_policy(name)
        await self._retire(k.auth_policy_key(name), lambda: self._attachment_keys(name))

    async def attach_policy_to_user(self, policy: str, username: str) -> None:
        await self._link(
            k.auth_user_policy_key(username, policy),
            k.auth_policy_key(policy),
            [
                (k.auth_user_key(username), f"user {username}"),
                (k.auth_policy_key(policy), f"policy {policy}"),
            ],
            f"policy {policy} attached to user {username}",
        )

    async def attach_policy_to_group(self, policy: str, group: str) -> None:
        await self._link(
            k.auth_group_policy_key(group, policy),
            k.auth_policy_key(policy),
            [(k.auth_group_key(group), f"group {group}"), (k.auth_policy_key(policy), f"policy {policy}")],
            f"policy {policy} attached to group {group}",
        )

    async def _detach(self, key: bytes, what: str) -> None:
        await self._get(key, what)
        await self.kv.delete(P, key)
        self._forget()

    async def detach_policy_from_user(self, policy: str, username: str) -> None:
        await self.get_user(username)
        await self._detach(k.auth_user_policy_key(username, policy), f"policy {policy} on user {username}")

    async def detach_policy_from_group(self, policy: str, group: str) -> None:
        await self.get_group(group)
        await self._detach(k.auth_group_policy_key(group, policy), f"policy {policy} on group {group}")

    async def _attached(self, prefix: bytes) -> list[Policy]:
        """The existing policies an attachment prefix points at (dangling entries skipped)."""
        found = []
        async for key, value in self._scan(prefix):
            primary = decode_index(value, key)
            try:
                found.append(decode_policy(await self.kv.get(P, primary), primary)[0])
            except NotFoundError:
                continue
        return found

    async def list_user_policies(self, username: str) -> list[Policy]:
        await self.get_user(username)
        return await self._attached(k.auth_user_policies_prefix(username))

    async def list_group_policies(self, group: str) -> list[Policy]:
        await self.get_group(group)
        return await self._attached(k.auth_group_policies_prefix(group))

    async def effective_policies(self, username: str) -> list[Policy]:
        """The user's own policies and those of its groups, by name (lakeFS's ``ListEffectivePolicies``)."""
        cached = self._policies.get(username)
        if isinstance(cached, list):
            return cached
        by_name = {p.name: p for p in await self.list_user_policies(username)}
        for group in await self.list_user_groups(username):
            by_name.update(
                (p.name, p) for p in await self._attached(k.auth_group_policies_prefix(group.name))
            )
        policies = [by_name[name] for name in sorted(by_name)]
        self._policies.put(username, policies)
        return policies

    async def authorize(self, username: str, node: Node, context: Mapping[str, str] | None = None) -> None:
        """Raise :class:`~lakefs_core.errors.PermissionDeniedError` unless ``username``'s effective
        policies allow ``node`` (see :mod:`lakefs_core.auth.policy`). With the cache on, an allowed
        ``(user, node, context)`` is remembered with the very policy list it was decided on: a
        repeated request is a dict lookup while that list stays cached, and evaluated afresh as
        soon as the list is re-read (expired, or cleared by a change through this store)."""
        policies = await self.effective_policies(username)
        if self._policies.ttl <= 0:
            authorize(node, username, policies, context)
            return
        key = (username, node, tuple(sorted(context.items())) if context else ())
        if self._allowed.get(key) is policies:
            return
        authorize(node, username, policies, context)  # raises when not allowed: never remembered
        if len(self._allowed) >= _MAX_CACHED:
            self._allowed.clear()
        self._allowed[key] = policies

    # -- credentials -----------------------------------------------------------------------------------

    def _secret_store(self) -> SecretStore:
        if self._secrets is None:
            raise BadInputError(
                "must be set to create or read secret access keys", field="auth.encrypt.secret_key"
            )
        return self._secrets

    async def create_credentials(
        self, username: str, access_key_id: str | None = None, secret_access_key: str | None = None
    ) -> Credential:
        """A new access key of ``username`` (generated as lakeFS generates them unless given); the
        returned credential holds the secret, which is stored only encrypted."""
        store = self._secret_store()
        key_id = keys.generate_access_key_id() if access_key_id is None else access_key_id
        secret = keys.generate_secret_access_key() if secret_access_key is None else secret_access_key
        if not keys.valid_access_key_id(key_id):
            raise BadInputError("must be 3-20 printable ASCII characters without '/'", field="access_key_id")
        if not secret:
            raise BadInputError("must not be empty", field="secret_access_key")
        if await self._find_credential(key_id) is not None:
            raise ConflictError(f"access key {key_id} already exists")
        encrypted = await run_cpu(store.encrypt, secret.encode())
        credential = Credential(key_id, username, now_ns(), encrypted)
        user_key = k.auth_user_key(username)
        await self.get_user(username)
        key = k.auth_credential_key(username, key_id)
        await self._insert(key, encode_credential(credential), f"access key {key_id}")
        if not await self._exists(user_key):  # the user was deleted meanwhile: the key must not outlive it
            await self.kv.delete(P, key)
            raise NotFoundError(f"user {username} not found (deleted meanwhile)")
        return replace(credential, secret_access_key=secret)

    async def list_user_credentials(self, username: str) -> list[Credential]:
        """The user's access keys, without their secrets."""
        await self.get_user(username)
        return [
            decode_credential(value, key)
            async for key, value in self._scan(k.auth_credentials_prefix(username))
        ]

    async def delete_credentials(self, username: str, access_key_id: str) -> None:
        await self.get_user(username)
        key = k.auth_credential_key(username, access_key_id)
        await self._get(key, f"access key {access_key_id} of user {username}")
        await self.kv.delete(P, key)
        self._forget()

    async def _find_credential(self, access_key_id: str) -> tuple[bytes, bytes] | None:
        async for user in self.list_users():
            key = k.auth_credential_key(user.username, access_key_id)
            try:
                return key, await self.kv.get(P, key)
            except NotFoundError:
                continue
        return None

    async def get_credentials(self, access_key_id: str) -> Credential:
        """The credential of ``access_key_id`` with its secret decrypted (for verifying a request's
        signature); :class:`NotFoundError` when no existing user holds it."""
        cached = self._credentials.get(access_key_id)
        if isinstance(cached, Credential):
            return cached
        if not keys.valid_access_key_id(access_key_id):
            raise NotFoundError("access key not found")
        found = await self._find_credential(access_key_id)
        if found is None:
            raise NotFoundError(f"access key {access_key_id} not found")
        key, value = found
        credential = decode_credential(value, key)
        plain = await run_cpu(
            self._secret_store().decrypt,
            credential.encrypted,
            what=f"the secret of access key {access_key_id}",
        )
        try:
            secret = plain.decode()
        except UnicodeDecodeError:
            raise CorruptDataError(f"the secret of access key {access_key_id} is not UTF-8") from None
        credential = replace(credential, secret_access_key=secret)
        self._credentials.put(access_key_id, credential)
        return credential

    # -- installation metadata -------------------------------------------------------------------------

    async def get_metadata(self, name: str) -> str | None:
        try:
            return (await self.kv.get(P, k.auth_metadata_key(name))).decode("utf-8", "replace")
        except NotFoundError:
            return None

    async def claim_metadata(self, name: str, value: str) -> bool:
        """Write ``name`` if absent; False if it was already there."""
        try:
            await self.kv.set_if(P, k.auth_metadata_key(name), value.encode(), Expect.ABSENT)
        except PreconditionFailedError:
            return False
        return True

    async def set_metadata(self, name: str, value: str) -> None:
        await self.kv.set(P, k.auth_metadata_key(name), value.encode())

"""The auth service on real KV stores (lakefs_core.auth.store, lakefs_core.auth.setup).

On memory, SQLite and PostgreSQL: creation, conflicts, listings, memberships, attachments,
credentials and their lookup, effective policies and authorization; deletes that leave nothing
behind (a user's credentials go with it); leftovers of a previous incarnation of a name (as lakeFS's
delete leaves them) swept before the name is reused; an attachment racing a delete (injected through
a KV wrapper) removed again; setup exactly once. A hypothesis state machine drives every operation
that writes or deletes against a model and checks that the store's answers and its keys agree with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from lakefs_core.auth import keys
from lakefs_core.auth import permissions as perms
from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.permissions import Permission
from lakefs_core.auth.policy import Policy, Statement
from lakefs_core.auth.setup import ADMINS, BUILTIN_GROUPS, SETUP_TIMESTAMP, builtin_policies, setup
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import (
    AlreadySetUpError,
    BadInputError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
)
from lakefs_core.kv import KVStore, open_kv
from lakefs_core.kv.base import Expect, KVEntry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from tests.support.profiles import examples

SECRETS = SecretStore("test installation secret")
READ_ALL = Policy("ReadAll", (Statement("allow", ("fs:Read*", "fs:List*"), "*"),))
WRITE_ALL = Policy("WriteAll", (Statement("allow", ("fs:WriteObject",), "*"),))
DENY_SECRET = Policy("NoSecret", (Statement("deny", ("fs:*",), perms.object_arn("r", "secret/*")),))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("pg_database").url)


@pytest.fixture
async def kv(kv_url: str) -> AsyncIterator[KVStore]:
    store = await open_kv(kv_url)
    for entry in [e async for e in store.scan(kvkeys.AUTH_PARTITION)]:  # the session's PostgreSQL database
        await store.delete(kvkeys.AUTH_PARTITION, entry.key)
    try:
        yield store
    finally:
        await store.close()


async def auth_keys(kv: KVStore) -> list[str]:
    return [e.key.decode() async for e in kv.scan(kvkeys.AUTH_PARTITION)]


async def test_users_groups_policies_and_authorization(kv: KVStore) -> None:
    store = AuthStore(kv, SECRETS)
    await store.create_user("alice", email="alice@example.com")
    await store.create_user("bob")
    with pytest.raises(ConflictError, match="already exists"):
        await store.create_user("alice")
    for bad in ("", "a/b", "a\x00b"):
        with pytest.raises(BadInputError):
            await store.create_user(bad)
    await store.create_group("Devs", description="developers")
    for policy in (READ_ALL, WRITE_ALL, DENY_SECRET):
        await store.write_policy(policy)
    await store.add_user_to_group("alice", "Devs")
    with pytest.raises(ConflictError):
        await store.add_user_to_group("alice", "Devs")
    with pytest.raises(NotFoundError, match="user carol"):
        await store.add_user_to_group("carol", "Devs")
    await store.attach_policy_to_group("WriteAll", "Devs")
    await store.attach_policy_to_user("ReadAll", "alice")
    await store.attach_policy_to_user("NoSecret", "alice")
    with pytest.raises(NotFoundError, match="policy Nope"):
        await store.attach_policy_to_user("Nope", "alice")

    assert [u.username async for u in store.list_users()] == ["alice", "bob"]
    assert [u.username async for u in store.list_users(after="alice")] == ["bob"]
    assert [u.username for u in await store.list_group_users("Devs")] == ["alice"]
    assert [g.name for g in await store.list_user_groups("alice")] == ["Devs"]
    assert [p.name for p in await store.effective_policies("alice")] == ["NoSecret", "ReadAll", "WriteAll"]
    assert await store.effective_policies("bob") == []
    await store.authorize("alice", Permission(perms.WRITE_OBJECT, perms.object_arn("r", "k")))
    with pytest.raises(PermissionDeniedError, match="denied"):
        await store.authorize("alice", Permission(perms.READ_OBJECT, perms.object_arn("r", "secret/k")))
    with pytest.raises(PermissionDeniedError, match="not allowed"):
        await store.authorize("bob", Permission(perms.READ_OBJECT, perms.object_arn("r", "k")))

    updated = Policy("ReadAll", (Statement("allow", ("fs:ReadObject",), "*"),))
    created = (await store.get_policy("ReadAll")).created_at
    stored = await store.write_policy(updated, update=True)
    assert stored.statements == updated.statements and stored.created_at == created
    with pytest.raises(NotFoundError):
        await store.write_policy(Policy("Other", updated.statements), update=True)

    await store.remove_user_from_group("alice", "Devs")
    await store.detach_policy_from_user("NoSecret", "alice")
    assert [p.name for p in await store.effective_policies("alice")] == ["ReadAll"]
    with pytest.raises(NotFoundError):
        await store.detach_policy_from_user("NoSecret", "alice")


async def test_credentials(kv: KVStore) -> None:
    store = AuthStore(kv, SECRETS)
    await store.create_user("alice")
    created = await store.create_credentials("alice")
    assert created.access_key_id.startswith("AKIAJ") and created.access_key_id.endswith("Q")
    assert len(created.access_key_id) == 20 and set(created.access_key_id[5:19]) <= set(
        keys.ACCESS_KEY_ALPHABET
    )
    assert len(created.secret_access_key or "") == 40
    assert created.secret_access_key not in repr(created)
    found = await store.get_credentials(created.access_key_id)
    assert (found.username, found.secret_access_key) == ("alice", created.secret_access_key)
    listed = await store.list_user_credentials("alice")
    assert [(c.access_key_id, c.secret_access_key) for c in listed] == [(created.access_key_id, None)]
    raw = await kv.get(kvkeys.AUTH_PARTITION, kvkeys.auth_credential_key("alice", created.access_key_id))
    assert created.secret_access_key.encode() not in raw  # type: ignore[union-attr]
    given = await store.create_credentials("alice", "AKIAJGIVENKEYXXXXXXQ", "given-secret")
    assert (await store.get_credentials(given.access_key_id)).secret_access_key == "given-secret"
    await store.create_user("bob")
    with pytest.raises(ConflictError):
        await store.create_credentials("bob", "AKIAJGIVENKEYXXXXXXQ", "other")
    with pytest.raises(BadInputError):
        await store.create_credentials("bob", "a/b", "x")
    with pytest.raises(BadInputError, match=r"auth\.encrypt\.secret_key"):
        await AuthStore(kv).create_credentials("bob")
    await store.delete_credentials("alice", given.access_key_id)
    with pytest.raises(NotFoundError):
        await store.get_credentials(given.access_key_id)
    with pytest.raises(NotFoundError):
        await store.get_credentials("bad/key")


async def test_deleting_leaves_nothing_and_names_reused_start_clean(kv: KVStore) -> None:
    store = AuthStore(kv, SECRETS)
    await store.create_user("alice")
    await store.create_group("G")
    await store.write_policy(READ_ALL)
    await store.add_user_to_group("alice", "G")
    await store.attach_policy_to_user("ReadAll", "alice")
    await store.attach_policy_to_group("ReadAll", "G")
    credential = await store.create_credentials("alice")
    await store.delete_user("alice")
    assert await auth_keys(kv) == ["gPolicies/G/policies/ReadAll", "groups/G", "policies/ReadAll"]
    with pytest.raises(NotFoundError):
        await store.get_credentials(credential.access_key_id)
    await store.delete_policy("ReadAll")
    await store.delete_group("G")
    assert await auth_keys(kv) == []

    # what lakeFS's delete leaves behind (credentials, memberships, attachments of a deleted user)
    await store.create_group("G")
    await store.write_policy(READ_ALL)
    leftovers = {
        kvkeys.auth_credential_key("bob", "AKIAJOLDKEYXXXXXXXXQ"): b"\n\x14AKIAJOLDKEYXXXXXXXXQ",
        kvkeys.auth_group_user_key("G", "bob"): b"\n\tusers/bob",
        kvkeys.auth_user_policy_key("bob", "ReadAll"): b"\n\x10policies/ReadAll",
    }
    for key, value in leftovers.items():
        await kv.set(kvkeys.AUTH_PARTITION, key, value)
    await store.create_user("bob")
    assert await store.list_user_credentials("bob") == []
    assert await store.effective_policies("bob") == []
    assert await store.list_user_groups("bob") == []
    # a policy re-created under an old name is attached to nobody
    await kv.set(kvkeys.AUTH_PARTITION, kvkeys.auth_user_policy_key("bob", "Gone"), b"\n\rpolicies/Gone")
    await store.write_policy(Policy("Gone", READ_ALL.statements))
    assert await store.effective_policies("bob") == []


class RaceKV:
    """A KV store that runs ``hook`` once right after the insert or delete of ``key`` (fault injection)."""

    def __init__(self, inner: KVStore, key: bytes, hook: Callable[[], Awaitable[None]]) -> None:
        self.inner, self.key, self.hook = inner, key, hook

    async def _after(self, key: bytes) -> None:
        if key == self.key:
            self.key = b""
            await self.hook()

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        await self.inner.set_if(partition, key, value, expected)
        await self._after(key)

    async def delete(self, partition: bytes, key: bytes) -> None:
        await self.inner.delete(partition, key)
        await self._after(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("victim", ["user", "policy"])
async def test_an_attachment_racing_a_delete_removes_itself(kv: KVStore, victim: str) -> None:
    plain = AuthStore(kv, SECRETS)
    await plain.create_user("alice")
    await plain.write_policy(READ_ALL)

    async def delete() -> None:
        await (plain.delete_user("alice") if victim == "user" else plain.delete_policy("ReadAll"))

    racing = AuthStore(RaceKV(kv, kvkeys.auth_user_policy_key("alice", "ReadAll"), delete), SECRETS)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError, match="deleted meanwhile"):
        await racing.attach_policy_to_user("ReadAll", "alice")
    assert [k for k in await auth_keys(kv) if k.startswith("uPolicies/")] == []


async def test_a_name_taken_during_a_delete_keeps_its_new_entries(kv: KVStore) -> None:
    """A user re-created (with a new key) between the record's delete and the final sweep keeps it."""
    plain = AuthStore(kv, SECRETS)
    await plain.create_user("alice")
    await plain.create_credentials("alice")
    fresh: list[str] = []

    async def recreate() -> None:
        await plain.create_user("alice")
        fresh.append((await plain.create_credentials("alice")).access_key_id)

    racing = AuthStore(RaceKV(kv, kvkeys.auth_user_key("alice"), recreate), SECRETS)  # type: ignore[arg-type]
    await racing.delete_user("alice")
    assert [c.access_key_id for c in await plain.list_user_credentials("alice")] == fresh


async def test_setup_once(kv: KVStore) -> None:
    store = AuthStore(kv, SECRETS)
    credential = await setup(store, "admin")
    assert credential.secret_access_key and credential.username == "admin"
    assert [g.name for g in await store.list_user_groups("admin")] == [ADMINS]
    assert sorted([g.name async for g in store.list_groups()]) == sorted(BUILTIN_GROUPS)
    assert sorted([p.name async for p in store.list_policies()]) == sorted(p.name for p in builtin_policies())
    for group, names in BUILTIN_GROUPS.items():
        assert sorted(p.name for p in await store.list_group_policies(group)) == sorted(names)
    assert await store.get_metadata(SETUP_TIMESTAMP) is not None
    await store.authorize("admin", Permission(perms.CREATE_USER, perms.user_arn("x")))
    with pytest.raises(AlreadySetUpError):
        await setup(store, "other")
    assert [u.username async for u in store.list_users()] == ["admin"]


async def test_concurrent_setups_give_keys_once(kv: KVStore) -> None:
    store = AuthStore(kv, SECRETS)
    results = await asyncio.gather(*(setup(store, f"admin{i}") for i in range(3)), return_exceptions=True)
    won = [r for r in results if not isinstance(r, BaseException)]
    assert len(won) == 1, results
    assert all(isinstance(r, (AlreadySetUpError, ConflictError)) for r in results if r not in won)
    assert [u.username async for u in store.list_users()] == [won[0].username]  # type: ignore[union-attr]


async def test_existing_builtins_are_kept(kv: KVStore) -> None:
    store = AuthStore(kv, SECRETS)
    edited = Policy("FSReadAll", (Statement("allow", ("fs:ReadObject",), "*"),))
    await store.write_policy(edited)
    await store.create_group("Viewers", description="ours")
    await setup(store, "admin")
    assert (await store.get_policy("FSReadAll")).statements == edited.statements
    assert (await store.get_group("Viewers")).description == "ours"


# -- the model ------------------------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c"])
POLICIES = {p.name: p for p in (READ_ALL, WRITE_ALL, DENY_SECRET)}


class AuthModel(RuleBasedStateMachine):
    """Every write and delete of the store against a model; nothing dangling is ever left."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.kv = MemoryKVStore()
        self.store = AuthStore(self.kv, SECRETS)
        self.users: set[str] = set()
        self.groups: set[str] = set()
        self.policies: set[str] = set()
        self.members: set[tuple[str, str]] = set()
        self.user_policies: set[tuple[str, str]] = set()
        self.group_policies: set[tuple[str, str]] = set()
        self.credentials: dict[str, str] = {}  # access key -> user

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def attempt(self, coro: Awaitable[Any], ok: bool) -> Any:
        try:
            result = self.run(coro)
        except (ConflictError, NotFoundError):
            assert not ok
            return None
        assert ok
        return result

    @rule(name=NAMES)
    def create_user(self, name: str) -> None:
        self.attempt(self.store.create_user(name), name not in self.users)
        self.users.add(name)

    @rule(name=NAMES)
    def delete_user(self, name: str) -> None:
        self.attempt(self.store.delete_user(name), name in self.users)
        self.users.discard(name)
        self.members = {m for m in self.members if m[0] != name}
        self.user_policies = {a for a in self.user_policies if a[0] != name}
        self.credentials = {k: u for k, u in self.credentials.items() if u != name}

    @rule(name=NAMES)
    def create_group(self, name: str) -> None:
        self.attempt(self.store.create_group(name), name not in self.groups)
        self.groups.add(name)

    @rule(name=NAMES)
    def delete_group(self, name: str) -> None:
        self.attempt(self.store.delete_group(name), name in self.groups)
        self.groups.discard(name)
        self.members = {m for m in self.members if m[1] != name}
        self.group_policies = {a for a in self.group_policies if a[0] != name}

    @rule(name=st.sampled_from(sorted(POLICIES)))
    def create_policy(self, name: str) -> None:
        self.attempt(self.store.write_policy(POLICIES[name]), name not in self.policies)
        self.policies.add(name)

    @rule(name=st.sampled_from(sorted(POLICIES)))
    def delete_policy(self, name: str) -> None:
        self.attempt(self.store.delete_policy(name), name in self.policies)
        self.policies.discard(name)
        self.user_policies = {a for a in self.user_policies if a[1] != name}
        self.group_policies = {a for a in self.group_policies if a[1] != name}

    @rule(user=NAMES, group=NAMES)
    def add_member(self, user: str, group: str) -> None:
        ok = user in self.users and group in self.groups and (user, group) not in self.members
        self.attempt(self.store.add_user_to_group(user, group), ok)
        if ok:
            self.members.add((user, group))

    @rule(user=NAMES, group=NAMES)
    def remove_member(self, user: str, group: str) -> None:
        self.attempt(self.store.remove_user_from_group(user, group), (user, group) in self.members)
        self.members.discard((user, group))

    @rule(user=NAMES, policy=st.sampled_from(sorted(POLICIES)), to_group=st.booleans())
    def attach(self, user: str, policy: str, to_group: bool) -> None:
        owners, links = (self.groups, self.group_policies) if to_group else (self.users, self.user_policies)
        ok = user in owners and policy in self.policies and (user, policy) not in links
        call = self.store.attach_policy_to_group if to_group else self.store.attach_policy_to_user
        self.attempt(call(policy, user), ok)
        if ok:
            links.add((user, policy))

    @rule(user=NAMES)
    def create_credential(self, user: str) -> None:
        created = self.attempt(self.store.create_credentials(user), user in self.users)
        if created is not None:
            self.credentials[created.access_key_id] = user

    @rule(data=st.data())
    def delete_credential(self, data: st.DataObject) -> None:
        if self.credentials:
            key = data.draw(st.sampled_from(sorted(self.credentials)))
            self.run(self.store.delete_credentials(self.credentials.pop(key), key))

    def _expected_policies(self, user: str) -> list[str]:
        names = {p for u, p in self.user_policies if u == user}
        groups = {g for u, g in self.members if u == user}
        names |= {p for g, p in self.group_policies if g in groups}
        return sorted(names)

    @invariant()
    def store_agrees(self) -> None:
        for user in self.users:
            assert [p.name for p in self.run(self.store.effective_policies(user))] == self._expected_policies(
                user
            )
        for key, user in self.credentials.items():
            assert self.run(self.store.get_credentials(key)).username == user
        keys_now = [e.key.decode() for e in self.run(_collect(self.kv.scan(kvkeys.AUTH_PARTITION)))]
        expected = (
            {f"users/{u}" for u in self.users}
            | {f"groups/{g}" for g in self.groups}
            | {f"policies/{p}" for p in self.policies}
            | {f"gUsers/{g}/users/{u}" for u, g in self.members}
            | {f"uPolicies/{u}/policies/{p}" for u, p in self.user_policies}
            | {f"gPolicies/{g}/policies/{p}" for g, p in self.group_policies}
            | {f"uCredentials/{u}/credentials/{k}" for k, u in self.credentials.items()}
        )
        assert set(keys_now) == expected  # nothing dangling, nothing missing

    def teardown(self) -> None:
        self.loop.close()


async def _collect(entries: AsyncIterator[KVEntry]) -> list[KVEntry]:
    return [e async for e in entries]


TestAuthModel = AuthModel.TestCase
TestAuthModel.settings = settings(max_examples=examples(0.6), stateful_step_count=30, deadline=None)

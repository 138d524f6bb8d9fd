"""The per-request caches of authentication: the auth store's credential and policy cache
(``cache_seconds``) and SigV4's remembered signing keys.

Two :class:`AuthStore` instances on one KV store stand for two server processes (or a server and
``lakefs-core auth``): a key revoked or a policy detached through one is seen by the other once its
cache entry expires (``cache_seconds``, on an injected clock), and at once by the instance that made
the change; with ``cache_seconds`` 0 nothing is cached. A remembered signing key never lets a
request signed with another secret through.
"""

from __future__ import annotations

import time

import pytest
from botocore.auth import S3SigV4Auth  # type: ignore[import-untyped]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
from botocore.credentials import Credentials  # type: ignore[import-untyped]

from lakefs_core.auth import sigv4
from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.permissions import Permission
from lakefs_core.auth.policy import Policy, Statement
from lakefs_core.auth.signature import authenticate
from lakefs_core.auth.signed import SignedRequest
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from lakefs_core.kv.memory import MemoryKVStore
from tests.auth.sigreq import from_url

SECRETS = SecretStore("auth cache test secret")
KEY_ID, SECRET = "AKIAIOSFODNN7CACHE00", "cache0secret0123456789abcdefghijklmnopqr"
READ = Policy("Read", (Statement("allow", ("fs:ReadObject",), "*"),))
LEAF = Permission("fs:ReadObject", "arn:lakefs:fs:::repository/r/object/k")
TTL = 20.0


def signed_get(secret: str) -> SignedRequest:
    """A GET botocore signs with ``secret`` now."""
    request = AWSRequest(
        "GET", "http://gw.example.test/r/main/k", headers={"x-amz-content-sha256": sigv4.EMPTY_SHA256}
    )
    S3SigV4Auth(Credentials(KEY_ID, secret), "s3", "us-east-1").add_auth(request)
    return from_url(request.method, request.url, request.headers)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def two_instances(ttl: float = TTL) -> tuple[AuthStore, AuthStore, Clock]:
    """(the server's store with a cache, another process's store on the same KV, the cache's clock)."""
    kv, clock = MemoryKVStore(), Clock()
    other = AuthStore(kv, SECRETS)
    await other.create_user("u")
    await other.create_credentials("u", KEY_ID, SECRET)
    await other.write_policy(READ)
    await other.attach_policy_to_user("Read", "u")
    return AuthStore(kv, SECRETS, cache_seconds=ttl, clock=clock), other, clock


async def test_a_key_revoked_elsewhere_stops_working_within_cache_seconds() -> None:
    server, other, clock = await two_instances()
    assert (await server.get_credentials(KEY_ID)).secret_access_key == SECRET
    await other.delete_credentials("u", KEY_ID)
    clock.now += TTL - 0.1
    assert (await server.get_credentials(KEY_ID)).username == "u"  # cached: within the bound
    clock.now += 0.2
    with pytest.raises(NotFoundError):
        await server.get_credentials(KEY_ID)


async def test_a_key_revoked_through_the_same_store_stops_working_at_once() -> None:
    server, _, _ = await two_instances()
    await server.get_credentials(KEY_ID)
    await server.delete_credentials("u", KEY_ID)
    with pytest.raises(NotFoundError):
        await server.get_credentials(KEY_ID)


async def test_a_deleted_user_loses_its_keys_at_once_here_and_within_the_bound_elsewhere() -> None:
    server, other, clock = await two_instances()
    watcher = AuthStore(server.kv, SECRETS, cache_seconds=TTL, clock=clock)
    await server.get_credentials(KEY_ID)
    await watcher.get_credentials(KEY_ID)
    await server.delete_user("u")
    with pytest.raises(NotFoundError):
        await server.get_credentials(KEY_ID)
    clock.now += TTL + 0.1
    with pytest.raises(NotFoundError):
        await watcher.get_credentials(KEY_ID)
    del other


async def test_policy_changes_elsewhere_bind_within_cache_seconds_here_at_once() -> None:
    server, other, clock = await two_instances()
    await server.authorize("u", LEAF)
    await other.detach_policy_from_user("Read", "u")
    await server.authorize("u", LEAF)  # the cached effective policies
    clock.now += TTL + 0.1
    with pytest.raises(PermissionDeniedError):
        await server.authorize("u", LEAF)
    await other.attach_policy_to_user("Read", "u")
    await server.detach_policy_from_user("Read", "u")  # through the same store: forgotten at once
    with pytest.raises(PermissionDeniedError):
        await server.authorize("u", LEAF)


async def test_cache_seconds_zero_caches_nothing() -> None:
    server, other, _ = await two_instances(ttl=0)
    await server.get_credentials(KEY_ID)
    await server.authorize("u", LEAF)
    await other.detach_policy_from_user("Read", "u")
    await other.delete_credentials("u", KEY_ID)
    with pytest.raises(NotFoundError):
        await server.get_credentials(KEY_ID)
    with pytest.raises(PermissionDeniedError):
        await server.authorize("u", LEAF)


async def test_a_remembered_signing_key_never_admits_another_secret() -> None:
    """The key's secret changed (deleted, created again with another secret): the request signed
    with the old secret is refused although its signing key is remembered, the new one passes."""
    server, other, clock = await two_instances()
    now = time.time()
    old = signed_get(SECRET)
    assert (await authenticate(old, server, now))[0].username == "u"
    new_secret = SECRET[::-1]
    await server.delete_credentials("u", KEY_ID)
    await other.create_credentials("u", KEY_ID, new_secret)
    hits = sigv4.signing_key.cache_info().hits
    with pytest.raises(AuthenticationError) as refused:
        await authenticate(old, server, now)
    assert refused.value.s3_code == "SignatureDoesNotMatch"
    fresh = signed_get(new_secret)
    assert (await authenticate(fresh, server, now))[0].username == "u"
    assert (await authenticate(fresh, server, now))[0].username == "u"
    assert sigv4.signing_key.cache_info().hits > hits  # the second request's key was remembered
    assert sigv4.signing_key.cache_info().maxsize == sigv4.SIGNING_KEYS_CACHED
    del clock


async def test_a_remembered_decision_is_per_node_and_context_and_never_a_denial() -> None:
    """An allowed (user, node, context) is remembered with its cached policy list: another source
    address or another object is evaluated afresh; a denial is never remembered (a policy attached
    through the same store allows at once); an expired list drops what was remembered with it."""
    server, other, clock = await two_instances()
    from_ten = Policy(
        "FromTen",
        (Statement("allow", ("fs:WriteObject",), "*", {"IpAddress": {"SourceIp": ("10.0.0.0/8",)}}),),
    )
    await other.write_policy(from_ten)
    await other.attach_policy_to_user("FromTen", "u")
    write = Permission("fs:WriteObject", LEAF.resource)
    inside, outside = {"SourceIp": "10.1.2.3"}, {"SourceIp": "192.0.2.1"}
    await server.authorize("u", write, inside)
    await server.authorize("u", write, inside)  # remembered
    with pytest.raises(PermissionDeniedError):
        await server.authorize("u", write, outside)  # another context: evaluated, refused
    other_object = Permission("fs:DeleteObject", LEAF.resource)
    with pytest.raises(PermissionDeniedError):
        await server.authorize("u", other_object, inside)
    await server.write_policy(Policy("Delete", (Statement("allow", ("fs:DeleteObject",), "*"),)))
    await server.attach_policy_to_user("Delete", "u")  # through this store: the denial is not kept
    await server.authorize("u", other_object, inside)
    await other.detach_policy_from_user("FromTen", "u")
    await server.authorize("u", write, inside)  # within the bound: the cached list allows
    clock.now += TTL + 0.1
    with pytest.raises(PermissionDeniedError):  # the list re-read: what it allowed is forgotten
        await server.authorize("u", write, inside)

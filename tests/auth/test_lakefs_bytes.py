"""The auth records and encrypted secrets are lakeFS's, byte for byte.

``golden/lakefs_records.json`` was written by ``golden/gen_lakefs_records.go``: lakeFS's own
``pkg/auth/crypt`` encrypted the secret (scrypt + Go's NaCl secretbox, random salt and nonce) and Go's
protobuf marshalled the records with the types generated from lakeFS's ``model.proto``. We read every
one of them, write identical bytes for the same inputs (the same salt and nonce for the ciphertext),
and an auth store seeded with them authenticates lakeFS's credential and evaluates its policy. The
primitives are held to their published known answers too: NaCl's secretbox test vector (the layout
Go's ``secretbox.Seal`` and libsodium share) and RFC 7914's scrypt vector.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nacl.secret
import pytest

from lakefs_core.auth import model
from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.permissions import Permission, object_arn
from lakefs_core.auth.policy import Decision, Policy, Statement, check
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import CorruptDataError
from lakefs_core.kv import open_kv
from lakefs_core.refs import kvkeys

GOLDEN = json.loads((Path(__file__).parent / "golden" / "lakefs_records.json").read_text())
SHARED_SECRET = "lakefs shared secret: auth.encrypt.secret_key"
ACCESS_KEY = "AKIAJABCDEFGHIJKLMNQ"
SECRET = "TFFrSXgwYldOeGRHSjJaR0p2WTNaelpXTnlaWFE="
CREATED_NS = 1714979289 * 10**9 + 123456789  # 2024-05-06T07:08:09.123456789Z
GO_ZERO_NS = -62135596800 * 10**9  # Go's time.Time{}
CREDENTIAL_KEY = f"uCredentials/admin/credentials/{ACCESS_KEY}"
POLICY = Policy(
    "FSReadWriteAll",
    (
        Statement("allow", ("fs:Read*", "fs:List*", "fs:WriteObject"), "*"),
        Statement(
            "deny",
            ("fs:*",),
            "arn:lakefs:fs:::repository/r/object/secret/*",
            {"NotIpAddress": {"SourceIp": ("10.0.0.0/8", "192.168.0.1")}},
        ),
    ),
)


def golden(key: str) -> bytes:
    return bytes.fromhex(GOLDEN[key])


def test_records_read_and_written_identically() -> None:
    user = model.User("admin", CREATED_NS, email="admin@example.com", source="internal")
    assert model.decode_user(golden("users/admin"), b"users/admin") == user
    assert model.encode_user(user) == golden("users/admin")

    group = model.Group("Developers", CREATED_NS)
    assert model.decode_group(golden("groups/Developers"), b"g") == group
    assert model.encode_group(group) == golden("groups/Developers")
    zero = model.Group("Zero", GO_ZERO_NS, "zero time")
    assert model.decode_group(golden("groups/Zero"), b"g") == zero
    assert model.encode_group(zero) == golden("groups/Zero")

    policy, created = model.decode_policy(golden("policies/FSReadWriteAll"), b"p")
    assert created == CREATED_NS
    assert (policy.name, policy.statements, policy.acl_permission) == (POLICY.name, POLICY.statements, "")
    assert model.encode_policy(POLICY, CREATED_NS) == golden("policies/FSReadWriteAll")

    for key, primary in [
        ("gUsers/Developers/users/admin", b"users/admin"),
        ("uPolicies/admin/policies/FSReadWriteAll", b"policies/FSReadWriteAll"),
    ]:
        assert model.decode_index(golden(key), key.encode()) == primary
        assert model.encode_index(primary) == golden(key)

    credential = model.decode_credential(golden(CREDENTIAL_KEY), CREDENTIAL_KEY.encode())
    assert (credential.access_key_id, credential.username, credential.issued_ns) == (
        ACCESS_KEY,
        "admin",
        CREATED_NS,
    )
    assert credential.encrypted == golden("encrypted_secret")
    assert model.encode_credential(credential) == golden(CREDENTIAL_KEY)


def test_lakefs_ciphertext_decrypts_and_is_reproduced() -> None:
    encrypted = golden("encrypted_secret")
    store = SecretStore(SHARED_SECRET)
    assert store.decrypt(encrypted) == SECRET.encode()
    assert store.encrypt(SECRET.encode(), salt=encrypted[:8], nonce=encrypted[8:32]) == encrypted
    with pytest.raises(CorruptDataError, match="does not decrypt") as wrong:
        SecretStore(SHARED_SECRET + "!").decrypt(encrypted)
    assert SHARED_SECRET not in str(wrong.value) and SECRET not in str(wrong.value)
    with pytest.raises(CorruptDataError, match="shorter"):
        store.decrypt(encrypted[:47])
    tampered = bytearray(encrypted)
    tampered[-1] ^= 1
    with pytest.raises(CorruptDataError):
        store.decrypt(bytes(tampered))
    assert "secret" not in repr(store).replace("SecretStore(<secret>)", "")


def test_nacl_secretbox_known_answer() -> None:
    """NaCl's secretbox vector: the box is the 16-byte tag then the ciphertext (Go's Seal, libsodium)."""
    key = bytes.fromhex("1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389")
    nonce = bytes.fromhex("69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37")
    message = bytes.fromhex(
        "be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffce5ecbaaf33bd751a1ac728d45e6c61296cdc3c"
        "01233561f41db66cce314adb310e3be8250c46f06dceea3a7fa1348057e2f6556ad6b1318a024a838f21af1fde048977eb48f5"
        "9ffd4924ca1c60902e52f0a089bc76897040e082f937763848645e0705"
    )
    boxed = bytes.fromhex(
        "f3ffc7703f9400e52a7dfb4b3d3305d98e993b9f48681273c29650ba32fc76ce48332ea7164d96a4476fb8c531a1186ac0df"
        "c17c98dce87b4da7f011ec48c97271d2c20f9b928fe2270d6fb863d51738b48eeee314a7cc8ab932164548e526ae9022436851"
        "7acfeabd6bb3732bc0e9da99832b61ca01b6de56244a9e88d5f9b37973f622a43d14a6599b1f654cb45a74e355a5"
    )
    assert nacl.secret.SecretBox(key).encrypt(message, nonce) == nonce + boxed


def test_scrypt_known_answer() -> None:
    """RFC 7914 section 12's second vector: hashlib.scrypt's n, r, p mean what Go's scrypt.Key's do."""
    expected = (
        "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b3731622eaf30d92e22a3886ff109279d9830dac727afb9"
        "4a83ee6d8360cbdfa2cc0640"
    )
    assert hashlib.scrypt(b"password", salt=b"NaCl", n=1024, r=8, p=16, dklen=64).hex() == expected
    salt = golden("encrypted_secret")[:8]
    assert SecretStore(SHARED_SECRET).derive_key(salt) == hashlib.scrypt(
        SHARED_SECRET.encode(), salt=salt, n=512, r=8, p=1, dklen=32
    )


async def test_a_store_seeded_with_lakefs_bytes_authenticates_and_authorizes(tmp_path: Path) -> None:
    kv = await open_kv(f"sqlite:///{tmp_path / 'kv.db'}")
    try:
        for key, value in GOLDEN.items():
            if key != "encrypted_secret":
                await kv.set(kvkeys.AUTH_PARTITION, key.encode(), bytes.fromhex(value))
        store = AuthStore(kv, SecretStore(SHARED_SECRET))
        credential = await store.get_credentials(ACCESS_KEY)
        assert (credential.username, credential.secret_access_key) == ("admin", SECRET)
        assert [g.name for g in await store.list_user_groups("admin")] == ["Developers"]
        policies = await store.effective_policies("admin")
        assert [p.name for p in policies] == ["FSReadWriteAll"]
        write = Permission("fs:WriteObject", object_arn("r", "secret/x"))
        assert check(write, "admin", policies, {"SourceIp": "10.1.2.3"}) is Decision.ALLOW
        assert check(write, "admin", policies, {"SourceIp": "172.16.0.1"}) is Decision.DENY
        assert (
            check(Permission("fs:DeleteObject", object_arn("r", "x")), "admin", policies) is Decision.NEUTRAL
        )
    finally:
        await kv.close()

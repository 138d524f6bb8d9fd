"""Users, groups, policies and credentials, and their KV records as lakeFS writes them.

Records are the protobuf messages of lakeFS's ``pkg/auth/model/model.proto``
(:mod:`lakefs_core.format.proto.auth_pb2`), filled field by field as lakeFS's ``ProtoFrom*``
functions fill them, so the same inputs give the same bytes lakeFS writes: a timestamp is always
present (even the zero one), a policy always carries its ACL message (empty for RBAC policies), and
maps are written sorted (protobuf's deterministic mode; lakeFS's policies carry no conditions unless
written with them). Group memberships and policy attachments are lakeFS's ``kv.SecondaryIndex``
(:mod:`lakefs_core.format.proto.kvindex_pb2`) pointing at the primary key.

Times are kept as integer nanoseconds since the epoch (``*_ns``), the precision a lakeFS record holds,
so a record read and written back is unchanged. Decoding a record that is not the message it should
be is :class:`~lakefs_core.errors.CorruptDataError` naming the key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf.message import DecodeError, Message

from lakefs_core.auth.policy import Policy, Statement
from lakefs_core.errors import CorruptDataError
from lakefs_core.format.proto import auth_pb2, kvindex_pb2

__all__ = [
    "Credential",
    "Group",
    "User",
    "decode_credential",
    "decode_group",
    "decode_index",
    "decode_policy",
    "decode_user",
    "encode_credential",
    "encode_group",
    "encode_index",
    "encode_policy",
    "encode_user",
    "from_ns",
    "now_ns",
]

_NS = 1_000_000_000


def now_ns() -> int:
    return time.time_ns()


def from_ns(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // _NS, UTC).replace(microsecond=(ns % _NS) // 1000)


@dataclass(frozen=True)
class User:
    username: str
    created_ns: int
    friendly_name: str = ""
    email: str = ""
    source: str = ""
    external_id: str = ""
    encrypted_password: bytes = b""

    @property
    def created_at(self) -> datetime:
        return from_ns(self.created_ns)


@dataclass(frozen=True)
class Group:
    name: str
    created_ns: int
    description: str = ""

    @property
    def created_at(self) -> datetime:
        return from_ns(self.created_ns)


@dataclass(frozen=True)
class Credential:
    """An access key of ``username``. ``secret_access_key`` is only filled where the caller asked for
    it decrypted (authentication, creation); ``encrypted`` is the stored value."""

    access_key_id: str
    username: str
    issued_ns: int
    encrypted: bytes
    secret_access_key: str | None = None

    @property
    def issued_at(self) -> datetime:
        return from_ns(self.issued_ns)

    def __repr__(self) -> str:  # never the secret
        return f"Credential(access_key_id={self.access_key_id!r}, username={self.username!r})"


def _set_time(target: Message, ns: int) -> None:
    target.SetInParent()  # present even when zero, as Go's timestamppb.New always is
    target.seconds = ns // _NS  # type: ignore[attr-defined]
    target.nanos = ns % _NS  # type: ignore[attr-defined]


def _time_ns(source: Message) -> int:
    return int(source.seconds) * _NS + int(source.nanos)  # type: ignore[attr-defined]


def _serialize(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


def _parse(message: Message, value: bytes, key: bytes) -> None:
    try:
        message.ParseFromString(value)
    except (DecodeError, ValueError, RecursionError):
        what = key.decode("utf-8", "backslashreplace")
        raise CorruptDataError(
            f"auth record is not a {type(message).__name__}", file=f"kv auth/{what}"
        ) from None


def _text(value: bytes | str, key: bytes, what: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise CorruptDataError(
            f"{what} is not UTF-8", file=f"kv auth/{key.decode('utf-8', 'replace')}"
        ) from None


def encode_user(user: User) -> bytes:
    m = auth_pb2.UserData(
        username=user.username,
        friendly_name=user.friendly_name,
        email=user.email,
        encrypted_password=user.encrypted_password,
        source=user.source,
        external_id=user.external_id,
    )
    _set_time(m.created_at, user.created_ns)
    return _serialize(m)


def decode_user(value: bytes, key: bytes) -> User:
    m = auth_pb2.UserData()
    _parse(m, value, key)
    return User(
        username=m.username,
        created_ns=_time_ns(m.created_at),
        friendly_name=m.friendly_name,
        email=m.email,
        source=m.source,
        external_id=m.external_id,
        encrypted_password=m.encrypted_password,
    )


def encode_group(group: Group) -> bytes:
    m = auth_pb2.GroupData(display_name=group.name, description=group.description)
    _set_time(m.created_at, group.created_ns)
    return _serialize(m)


def decode_group(value: bytes, key: bytes) -> Group:
    m = auth_pb2.GroupData()
    _parse(m, value, key)
    return Group(name=m.display_name, created_ns=_time_ns(m.created_at), description=m.description)


def encode_policy(policy: Policy, created_ns: int) -> bytes:
    m = auth_pb2.PolicyData(display_name=policy.name)
    _set_time(m.created_at, created_ns)
    for stmt in policy.statements:
        s = m.statements.add(effect=stmt.effect, action=list(stmt.actions), resource=stmt.resource)
        for op, fields in stmt.condition.items():
            cond = s.condition[op]
            cond.SetInParent()
            for name, values in fields.items():
                cond.fields[name].values.extend(values)
    m.acl.SetInParent()  # lakeFS's ProtoFromPolicy always writes the ACL message
    m.acl.permission = policy.acl_permission
    return _serialize(m)


def decode_policy(value: bytes, key: bytes) -> tuple[Policy, int]:
    """The policy and its creation time (ns)."""
    m = auth_pb2.PolicyData()
    _parse(m, value, key)
    statements = tuple(
        Statement(
            effect=s.effect,
            actions=tuple(s.action),
            resource=s.resource,
            condition={
                op: {name: tuple(lst.values) for name, lst in cond.fields.items()}
                for op, cond in s.condition.items()
            },
        )
        for s in m.statements
    )
    created = _time_ns(m.created_at)
    policy = Policy(
        m.display_name, statements, from_ns(created), m.acl.permission if m.HasField("acl") else ""
    )
    return policy, created


def encode_credential(credential: Credential) -> bytes:
    m = auth_pb2.CredentialData(
        access_key_id=credential.access_key_id,
        secret_access_key_encrypted_bytes=credential.encrypted,
        user_id=credential.username.encode(),
    )
    _set_time(m.issued_date, credential.issued_ns)
    return _serialize(m)


def decode_credential(value: bytes, key: bytes) -> Credential:
    m = auth_pb2.CredentialData()
    _parse(m, value, key)
    return Credential(
        access_key_id=m.access_key_id,
        username=_text(m.user_id, key, "user_id"),
        issued_ns=_time_ns(m.issued_date),
        encrypted=m.secret_access_key_encrypted_bytes,
    )


def encode_index(primary_key: bytes) -> bytes:
    return _serialize(kvindex_pb2.SecondaryIndex(primary_key=primary_key))


def decode_index(value: bytes, key: bytes) -> bytes:
    m = kvindex_pb2.SecondaryIndex()
    _parse(m, value, key)
    return m.primary_key

"""The checked-in protobuf code: field numbers per the spec, wire bytes, and no drift from .proto."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from lakefs_core.format.proto import auth_pb2, catalog_pb2, committed_pb2, graveler_pb2, kvindex_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO_ROOT / "lakefs_core" / "format" / "proto"
GENERATED = [
    f"{name}{suffix}"
    for name in ("catalog_pb2", "committed_pb2", "graveler_pb2", "auth_pb2", "kvindex_pb2")
    for suffix in (".py", ".pyi")
]

F = FieldDescriptor
# (message, {field name: (number, type, repeated)})
EXPECTED: list[tuple[type[Message], dict[str, tuple[int, int, bool]]]] = [
    (
        catalog_pb2.Entry,
        {
            "address": (1, F.TYPE_STRING, False),
            "last_modified": (2, F.TYPE_MESSAGE, False),
            "size": (3, F.TYPE_INT64, False),
            "e_tag": (4, F.TYPE_STRING, False),
            "metadata": (5, F.TYPE_MESSAGE, True),
            "address_type": (6, F.TYPE_ENUM, False),
            "content_type": (7, F.TYPE_STRING, False),
        },
    ),
    (
        committed_pb2.RangeData,
        {
            "min_key": (1, F.TYPE_BYTES, False),
            "max_key": (2, F.TYPE_BYTES, False),
            "estimated_size": (3, F.TYPE_UINT64, False),
            "count": (4, F.TYPE_INT64, False),
        },
    ),
    (
        graveler_pb2.RepositoryData,
        {
            "id": (1, F.TYPE_STRING, False),
            "storage_namespace": (2, F.TYPE_STRING, False),
            "default_branch_id": (3, F.TYPE_STRING, False),
            "creation_date": (4, F.TYPE_MESSAGE, False),
            "state": (5, F.TYPE_ENUM, False),
            "instance_uid": (6, F.TYPE_STRING, False),
            "read_only": (7, F.TYPE_BOOL, False),
            "storage_id": (8, F.TYPE_STRING, False),
        },
    ),
    (
        graveler_pb2.BranchData,
        {
            "id": (1, F.TYPE_STRING, False),
            "commit_id": (2, F.TYPE_STRING, False),
            "staging_token": (3, F.TYPE_STRING, False),
            "sealed_tokens": (4, F.TYPE_STRING, True),
            "hidden": (5, F.TYPE_BOOL, False),
        },
    ),
    (
        graveler_pb2.CommitData,
        {
            "id": (1, F.TYPE_STRING, False),
            "committer": (2, F.TYPE_STRING, False),
            "message": (3, F.TYPE_STRING, False),
            "creation_date": (4, F.TYPE_MESSAGE, False),
            "meta_range_id": (5, F.TYPE_STRING, False),
            "metadata": (6, F.TYPE_MESSAGE, True),
            "parents": (7, F.TYPE_STRING, True),
            "version": (8, F.TYPE_INT32, False),
            "generation": (9, F.TYPE_INT32, False),
        },
    ),
    (
        graveler_pb2.TagData,
        {"id": (1, F.TYPE_STRING, False), "commit_id": (2, F.TYPE_STRING, False)},
    ),
    (
        graveler_pb2.StagedEntryData,
        {
            "key": (1, F.TYPE_BYTES, False),
            "identity": (2, F.TYPE_BYTES, False),
            "data": (3, F.TYPE_BYTES, False),
        },
    ),
    (
        auth_pb2.UserData,
        {
            "created_at": (1, F.TYPE_MESSAGE, False),
            "username": (2, F.TYPE_STRING, False),
            "friendly_name": (3, F.TYPE_STRING, False),
            "email": (4, F.TYPE_STRING, False),
            "encrypted_password": (5, F.TYPE_BYTES, False),
            "source": (6, F.TYPE_STRING, False),
            "external_id": (7, F.TYPE_STRING, False),
        },
    ),
    (
        auth_pb2.GroupData,
        {
            "created_at": (1, F.TYPE_MESSAGE, False),
            "display_name": (2, F.TYPE_STRING, False),
            "description": (3, F.TYPE_STRING, False),
        },
    ),
    (
        auth_pb2.PolicyData,
        {
            "created_at": (1, F.TYPE_MESSAGE, False),
            "display_name": (2, F.TYPE_STRING, False),
            "statements": (3, F.TYPE_MESSAGE, True),
            "acl": (4, F.TYPE_MESSAGE, False),
        },
    ),
    (
        auth_pb2.StatementData,
        {
            "effect": (1, F.TYPE_STRING, False),
            "action": (2, F.TYPE_STRING, True),
            "resource": (3, F.TYPE_STRING, False),
            "condition": (4, F.TYPE_MESSAGE, True),
        },
    ),
    (
        auth_pb2.CredentialData,
        {
            "access_key_id": (1, F.TYPE_STRING, False),
            "secret_access_key_encrypted_bytes": (2, F.TYPE_BYTES, False),
            "issued_date": (3, F.TYPE_MESSAGE, False),
            "user_id": (4, F.TYPE_BYTES, False),
        },
    ),
    (kvindex_pb2.SecondaryIndex, {"primary_key": (1, F.TYPE_BYTES, False)}),
    (
        graveler_pb2.GarbageCollectionRules,
        {
            "default_retention_days": (1, F.TYPE_INT32, False),
            "branch_retention_days": (2, F.TYPE_MESSAGE, True),
        },
    ),
]


@pytest.mark.parametrize(("message", "fields"), EXPECTED, ids=[m.DESCRIPTOR.full_name for m, _ in EXPECTED])
def test_field_numbers(message: type[Message], fields: dict[str, tuple[int, int, bool]]) -> None:
    actual = {f.name: (f.number, f.type, f.is_repeated) for f in message.DESCRIPTOR.fields}
    assert actual == fields


@pytest.mark.parametrize("name", ["catalog", "committed", "graveler", "auth", "kvindex"])
def test_sources_are_proto3(name: str) -> None:
    assert 'syntax = "proto3";' in (PROTO_DIR / f"{name}.proto").read_text()


def test_packages_and_enums() -> None:
    assert catalog_pb2.Entry.DESCRIPTOR.full_name == "catalog.Entry"
    assert committed_pb2.RangeData.DESCRIPTOR.full_name == "io.treeverse.lakefs.graveler.committed.RangeData"
    assert graveler_pb2.CommitData.DESCRIPTOR.full_name == "io.treeverse.lakefs.graveler.CommitData"
    at = catalog_pb2.Entry.AddressType
    assert (at.BY_PREFIX_DEPRECATED, at.RELATIVE, at.FULL) == (0, 1, 2)
    assert (graveler_pb2.RepositoryState.ACTIVE, graveler_pb2.RepositoryState.IN_DELETION) == (0, 1)
    maps = {
        "Entry.metadata": catalog_pb2.Entry.DESCRIPTOR.fields_by_name["metadata"],
        "CommitData.metadata": graveler_pb2.CommitData.DESCRIPTOR.fields_by_name["metadata"],
    }
    for name, field in maps.items():
        assert field.message_type is not None
        assert field.message_type.GetOptions().map_entry, name
    retention = graveler_pb2.GarbageCollectionRules.DESCRIPTOR.fields_by_name["branch_retention_days"]
    assert retention.message_type is not None
    assert retention.message_type.fields_by_name["value"].type == F.TYPE_INT32


def test_wire_bytes() -> None:
    assert catalog_pb2.Entry(address="a", size=11).SerializeToString() == b"\x0a\x01a\x18\x0b"
    assert graveler_pb2.BranchData(id="main", sealed_tokens=["t1", "t2"]).SerializeToString() == (
        b"\x0a\x04main\x22\x02t1\x22\x02t2"
    )
    assert (
        graveler_pb2.RepositoryData(
            state=graveler_pb2.RepositoryState.IN_DELETION, read_only=True
        ).SerializeToString()
        == b"\x28\x01\x38\x01"
    )


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools (dev extra) absent")
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is needed to run scripts/gen_proto.sh")
def test_generated_code_matches_proto_sources(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    out = tmp_path / "lakefs_core" / "format" / "proto"
    for name in GENERATED:
        fresh = (out / name).read_bytes()
        assert fresh == (PROTO_DIR / name).read_bytes(), f"{name} is stale: run scripts/gen_proto.sh"

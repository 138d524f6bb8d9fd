"""lakeFS's request bodies (pydantic, unknown fields ignored as lakeFS's generated server does) and
the answers' JSON shapes, built from the core's records."""

from __future__ import annotations

from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from lakefs_core.refs.model import Commit, Repository
from lakefs_core.repos.objects import ObjectStat
from lakefs_core.service.http.body import json_object, parse_model
from lakefs_server.rest.wire import unix

M = TypeVar("M", bound=BaseModel)


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="ignore")


class LoginInformation(RequestBody):
    access_key_id: str = Field(max_length=1024)
    secret_access_key: str = Field(max_length=1024)


class RepositoryCreation(RequestBody):
    name: str = Field(max_length=1024)
    storage_namespace: str = Field(max_length=4096)
    default_branch: str = Field(default="main", max_length=1024)
    sample_data: bool = False
    read_only: bool = False
    storage_id: str = ""


class BranchCreation(RequestBody):
    name: str = Field(max_length=1024)
    source: str = Field(max_length=1024)
    force: bool = False
    hidden: bool = False


class TagCreation(RequestBody):
    id: str = Field(max_length=1024)
    ref: str = Field(max_length=1024)
    force: bool = False


# lakeFS's commit ``date`` (unix seconds) is stored as a protobuf Timestamp: years 1 to 9999.
MIN_COMMIT_DATE, MAX_COMMIT_DATE = -62_135_596_800, 253_402_300_799


class CommitCreation(RequestBody):
    message: str = Field(max_length=1 << 20)
    metadata: dict[str, str] = Field(default_factory=dict)
    date: int | None = Field(default=None, ge=MIN_COMMIT_DATE, le=MAX_COMMIT_DATE, strict=True)
    allow_empty: bool = False
    force: bool = False


class MergeBody(RequestBody):
    message: str | None = Field(default=None, max_length=1 << 20)
    metadata: dict[str, str] = Field(default_factory=dict)
    strategy: str | None = None
    force: bool = False
    allow_empty: bool = False
    squash_merge: bool = False


class ResetCreation(RequestBody):
    type: str
    path: str = Field(default="", max_length=4096)
    force: bool = False


class CommitOverrides(RequestBody):
    """lakeFS's ``commit_overrides`` of a revert or cherry-pick: a non-empty message replaces the
    commit's, metadata (when present) replaces its metadata."""

    message: str | None = Field(default=None, max_length=1 << 20)
    metadata: dict[str, str] | None = None


class RevertCreation(RequestBody):
    ref: str = Field(max_length=1024)
    parent_number: int = 0
    force: bool = False
    allow_empty: bool = False
    commit_overrides: CommitOverrides = Field(default_factory=CommitOverrides)


class CherryPickCreation(RequestBody):
    ref: str = Field(max_length=1024)
    parent_number: int | None = None
    force: bool = False
    commit_overrides: CommitOverrides = Field(default_factory=CommitOverrides)


class PathList(RequestBody):
    paths: list[str] = Field(max_length=1000)


class UserMetadataUpdate(RequestBody):
    set: dict[str, str] = Field(max_length=1000)


class ObjectCopyCreation(RequestBody):
    src_path: str = Field(max_length=4096)
    src_ref: str | None = Field(default=None, max_length=1024)
    force: bool = False
    shallow: bool = False


class BranchProtectionRule(RequestBody):
    pattern: str = Field(min_length=1, max_length=1024)


class ImportLocation(RequestBody):
    type: str
    path: str = Field(max_length=4096)
    destination: str = Field(max_length=4096)


class ImportCreation(RequestBody):
    paths: list[ImportLocation] = Field(max_length=10_000)
    commit: CommitCreation
    force: bool = False


async def body(request: web.Request, model: type[M]) -> M:
    return parse_model(model, await json_object(request))


def repository_json(repo: Repository) -> dict[str, Any]:
    return {
        "id": repo.id,
        "creation_date": unix(repo.creation_date),
        "default_branch": repo.default_branch,
        "storage_namespace": repo.storage_namespace,
        "storage_id": "",
        "read_only": repo.read_only,
    }


def commit_json(commit: Commit) -> dict[str, Any]:
    return {
        "id": commit.id,
        "parents": list(commit.parents),
        "committer": commit.committer,
        "message": commit.message,
        "creation_date": unix(commit.creation_date),
        "meta_range_id": commit.metarange_id,
        "metadata": dict(commit.metadata),
        "generation": commit.generation,
        "version": commit.version,
    }


def ref_json(ref_id: str, commit_id: str) -> dict[str, Any]:
    return {"id": ref_id, "commit_id": commit_id}


def checksum_of(stat: ObjectStat) -> str:
    """lakeFS's checksum: the ETag without quotes (hex MD5 for a single-part upload)."""
    return stat.etag.strip('"')


def physical_address(namespace: str, stat: ObjectStat) -> str:
    if stat.address_type == "FULL":
        return stat.physical_address
    return namespace.rstrip("/") + "/" + stat.physical_address


def object_json(namespace: str, stat: ObjectStat, *, user_metadata: bool = True) -> dict[str, Any]:
    return {
        "path": stat.path,
        "path_type": "object",
        "physical_address": physical_address(namespace, stat),
        "checksum": checksum_of(stat),
        "size_bytes": stat.size,
        "mtime": unix(stat.last_modified),
        "metadata": dict(stat.metadata) if user_metadata else {},
        "content_type": stat.content_type or "application/octet-stream",
    }


def prefix_json(prefix: str) -> dict[str, Any]:
    return {"path": prefix, "path_type": "common_prefix", "physical_address": "", "checksum": "", "mtime": 0}

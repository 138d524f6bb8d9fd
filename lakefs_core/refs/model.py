"""Ref records and their lakeFS protobuf encodings, plus id validation.

Each record type converts to and from the KV value bytes of spec section 6
(``io.treeverse.lakefs.graveler``). A :class:`Commit` read from KV keeps the bytes it was read
from (``raw``), so a mirror can copy a commit record verbatim and ids keep matching. Undecodable
bytes raise :class:`~lakefs_core.errors.CorruptDataError` naming the KV key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from google.protobuf.message import DecodeError

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.ids import commit_id as compute_commit_id
from lakefs_core.format.proto import graveler_pb2
from lakefs_core.format.records import timestamp_datetime
from lakefs_core.refs import kvkeys

COMMIT_VERSION = 1  # lakeFS CommitVersionParentSwitch: merge parents are [destination, source]

_M = TypeVar(
    "_M", graveler_pb2.RepositoryData, graveler_pb2.BranchData, graveler_pb2.CommitData, graveler_pb2.TagData
)


def _parse(message: _M, raw: bytes, where: str) -> _M:
    try:
        message.ParseFromString(raw)
    except DecodeError as e:
        raise CorruptDataError(f"undecodable {type(message).__name__} record: {e}", file=where) from e
    return message


def _when(msg: graveler_pb2.RepositoryData | graveler_pb2.CommitData, where: str) -> datetime:
    """``creation_date`` as an aware datetime; records from another region or writer are hostile, so a
    timestamp ``datetime`` cannot hold is corrupt data showing the raw value, never a traceback."""
    return timestamp_datetime(msg.creation_date, f"{type(msg).__name__} creation_date", file=where)


def _ts(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise BadInputError("must be timezone-aware", field="creation_date")
    return when.astimezone(UTC)


@dataclass(frozen=True)
class Repository:
    id: str
    storage_namespace: str
    default_branch: str
    creation_date: datetime
    instance_uid: str
    read_only: bool = False
    in_deletion: bool = False
    storage_id: str = ""

    @property
    def partition(self) -> bytes:
        return kvkeys.repo_partition(self.id, self.instance_uid)

    def to_bytes(self) -> bytes:
        msg = graveler_pb2.RepositoryData(
            id=self.id,
            storage_namespace=self.storage_namespace,
            default_branch_id=self.default_branch,
            state=graveler_pb2.IN_DELETION if self.in_deletion else graveler_pb2.ACTIVE,
            instance_uid=self.instance_uid,
            read_only=self.read_only,
            storage_id=self.storage_id,
        )
        msg.creation_date.FromDatetime(_ts(self.creation_date))
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Repository:
        msg = _parse(graveler_pb2.RepositoryData(), raw, where)
        return cls(
            id=msg.id,
            storage_namespace=msg.storage_namespace,
            default_branch=msg.default_branch_id,
            creation_date=_when(msg, where),
            instance_uid=msg.instance_uid,
            read_only=msg.read_only,
            in_deletion=msg.state == graveler_pb2.IN_DELETION,
            storage_id=msg.storage_id,
        )


@dataclass(frozen=True)
class Branch:
    id: str
    commit_id: str
    staging_token: str
    sealed_tokens: tuple[str, ...] = ()
    hidden: bool = False

    def to_bytes(self) -> bytes:
        return graveler_pb2.BranchData(
            id=self.id,
            commit_id=self.commit_id,
            staging_token=self.staging_token,
            sealed_tokens=list(self.sealed_tokens),
            hidden=self.hidden,
        ).SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Branch:
        msg = _parse(graveler_pb2.BranchData(), raw, where)
        return cls(msg.id, msg.commit_id, msg.staging_token, tuple(msg.sealed_tokens), msg.hidden)


@dataclass(frozen=True, slots=True)
class CommitNode:
    """A commit reduced to what graph walks need: no message, committer or metadata."""

    id: str
    parents: tuple[str, ...]
    main_parent: str | None
    creation_us: int  # microseconds since the Unix epoch (UTC)
    metarange_id: str
    version: int


@dataclass(frozen=True)
class Commit:
    id: str
    committer: str
    message: str
    creation_date: datetime
    metarange_id: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    parents: tuple[str, ...] = ()
    version: int = COMMIT_VERSION
    generation: int = 1
    raw: bytes | None = field(default=None, compare=False, repr=False)

    @classmethod
    def create(
        cls,
        *,
        committer: str,
        message: str,
        metarange_id: str,
        creation_date: datetime,
        metadata: Mapping[str, str] | None = None,
        parents: tuple[str, ...] = (),
        generation: int = 1,
    ) -> Commit:
        """A new commit; its id is computed from its content (spec section 4)."""
        when = _ts(creation_date).replace(microsecond=0)
        meta = dict(metadata or {})
        cid = compute_commit_id(
            committer=committer,
            message=message,
            metarange_id=metarange_id,
            creation_date=when,
            metadata=meta,
            parents=parents,
        )
        return cls(cid, committer, message, when, metarange_id, meta, parents, COMMIT_VERSION, generation)

    @property
    def main_parent(self) -> str | None:
        """The first-parent link lakeFS's log and retention walk follow.

        Version-0 commits (``CommitVersionInitial``) stored the merge source first and the branch's own
        parent last; from version 1 (``CommitVersionParentSwitch``) the branch's parent is first.
        """
        if not self.parents:
            return None
        return self.parents[-1] if self.version == 0 else self.parents[0]

    def node(self) -> CommitNode:
        """The slim view of this commit that graph walks (retention, lag) keep in memory or on disk."""
        return CommitNode(
            id=self.id,
            parents=self.parents,
            main_parent=self.main_parent,
            # Integer arithmetic, like Go's UnixMicro: float timestamp() rounds far from 1970 and
            # int() truncates towards zero before it.
            creation_us=(self.creation_date - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1),
            metarange_id=self.metarange_id,
            version=self.version,
        )

    def computed_id(self) -> str:
        return compute_commit_id(
            committer=self.committer,
            message=self.message,
            metarange_id=self.metarange_id,
            creation_date=self.creation_date,
            metadata=self.metadata,
            parents=self.parents,
        )

    def to_bytes(self) -> bytes:
        if self.raw is not None:
            return self.raw
        msg = graveler_pb2.CommitData(
            id=self.id,
            committer=self.committer,
            message=self.message,
            meta_range_id=self.metarange_id,
            metadata=dict(self.metadata),
            parents=list(self.parents),
            version=self.version,
            generation=self.generation,
        )
        msg.creation_date.FromDatetime(_ts(self.creation_date))
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Commit:
        msg = _parse(graveler_pb2.CommitData(), raw, where)
        return cls(
            id=msg.id,
            committer=msg.committer,
            message=msg.message,
            creation_date=_when(msg, where),
            metarange_id=msg.meta_range_id,
            metadata=dict(msg.metadata),
            parents=tuple(msg.parents),
            version=msg.version,
            generation=msg.generation,
            raw=bytes(raw),
        )


@dataclass(frozen=True)
class Tag:
    id: str
    commit_id: str

    def to_bytes(self) -> bytes:
        msg = graveler_pb2.TagData(id=self.id, commit_id=self.commit_id)
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Tag:
        msg = _parse(graveler_pb2.TagData(), raw, where)
        return cls(msg.id, msg.commit_id)

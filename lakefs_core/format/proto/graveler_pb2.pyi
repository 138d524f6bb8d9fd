import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RepositoryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTIVE: _ClassVar[RepositoryState]
    IN_DELETION: _ClassVar[RepositoryState]

class BranchProtectionBlockedAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGING_WRITE: _ClassVar[BranchProtectionBlockedAction]
    COMMIT: _ClassVar[BranchProtectionBlockedAction]
ACTIVE: RepositoryState
IN_DELETION: RepositoryState
STAGING_WRITE: BranchProtectionBlockedAction
COMMIT: BranchProtectionBlockedAction

class RepositoryData(_message.Message):
    __slots__ = ("id", "storage_namespace", "default_branch_id", "creation_date", "state", "instance_uid", "read_only", "storage_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORAGE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_BRANCH_ID_FIELD_NUMBER: _ClassVar[int]
    CREATION_DATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_UID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    STORAGE_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    storage_namespace: str
    default_branch_id: str
    creation_date: _timestamp_pb2.Timestamp
    state: RepositoryState
    instance_uid: str
    read_only: bool
    storage_id: str
    def __init__(self, id: _Optional[str] = ..., storage_namespace: _Optional[str] = ..., default_branch_id: _Optional[str] = ..., creation_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[RepositoryState, str]] = ..., instance_uid: _Optional[str] = ..., read_only: _Optional[bool] = ..., storage_id: _Optional[str] = ...) -> None: ...

class BranchData(_message.Message):
    __slots__ = ("id", "commit_id", "staging_token", "sealed_tokens", "hidden")
    ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    STAGING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SEALED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    id: str
    commit_id: str
    staging_token: str
    sealed_tokens: _containers.RepeatedScalarFieldContainer[str]
    hidden: bool
    def __init__(self, id: _Optional[str] = ..., commit_id: _Optional[str] = ..., staging_token: _Optional[str] = ..., sealed_tokens: _Optional[_Iterable[str]] = ..., hidden: _Optional[bool] = ...) -> None: ...

class CommitData(_message.Message):
    __slots__ = ("id", "committer", "message", "creation_date", "meta_range_id", "metadata", "parents", "version", "generation")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    COMMITTER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATION_DATE_FIELD_NUMBER: _ClassVar[int]
    META_RANGE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    committer: str
    message: str
    creation_date: _timestamp_pb2.Timestamp
    meta_range_id: str
    metadata: _containers.ScalarMap[str, str]
    parents: _containers.RepeatedScalarFieldContainer[str]
    version: int
    generation: int
    def __init__(self, id: _Optional[str] = ..., committer: _Optional[str] = ..., message: _Optional[str] = ..., creation_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., meta_range_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., parents: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class TagData(_message.Message):
    __slots__ = ("id", "commit_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    commit_id: str
    def __init__(self, id: _Optional[str] = ..., commit_id: _Optional[str] = ...) -> None: ...

class StagedEntryData(_message.Message):
    __slots__ = ("key", "identity", "data")
    KEY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    identity: bytes
    data: bytes
    def __init__(self, key: _Optional[bytes] = ..., identity: _Optional[bytes] = ..., data: _Optional[bytes] = ...) -> None: ...

class GarbageCollectionRules(_message.Message):
    __slots__ = ("default_retention_days", "branch_retention_days")
    class BranchRetentionDaysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DEFAULT_RETENTION_DAYS_FIELD_NUMBER: _ClassVar[int]
    BRANCH_RETENTION_DAYS_FIELD_NUMBER: _ClassVar[int]
    default_retention_days: int
    branch_retention_days: _containers.ScalarMap[str, int]
    def __init__(self, default_retention_days: _Optional[int] = ..., branch_retention_days: _Optional[_Mapping[str, int]] = ...) -> None: ...

class BranchProtectionBlockedActions(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: _containers.RepeatedScalarFieldContainer[BranchProtectionBlockedAction]
    def __init__(self, value: _Optional[_Iterable[_Union[BranchProtectionBlockedAction, str]]] = ...) -> None: ...

class BranchProtectionRules(_message.Message):
    __slots__ = ("branch_pattern_to_blocked_actions",)
    class BranchPatternToBlockedActionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BranchProtectionBlockedActions
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BranchProtectionBlockedActions, _Mapping]] = ...) -> None: ...
    BRANCH_PATTERN_TO_BLOCKED_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    branch_pattern_to_blocked_actions: _containers.MessageMap[str, BranchProtectionBlockedActions]
    def __init__(self, branch_pattern_to_blocked_actions: _Optional[_Mapping[str, BranchProtectionBlockedActions]] = ...) -> None: ...

class ImportStatusData(_message.Message):
    __slots__ = ("id", "completed", "updated_at", "progress", "metarange_id", "commit", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    METARANGE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    completed: bool
    updated_at: _timestamp_pb2.Timestamp
    progress: int
    metarange_id: str
    commit: CommitData
    error: str
    def __init__(self, id: _Optional[str] = ..., completed: _Optional[bool] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., progress: _Optional[int] = ..., metarange_id: _Optional[str] = ..., commit: _Optional[_Union[CommitData, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

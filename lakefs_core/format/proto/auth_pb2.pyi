import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UserData(_message.Message):
    __slots__ = ("created_at", "username", "friendly_name", "email", "encrypted_password", "source", "external_id")
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    FRIENDLY_NAME_FIELD_NUMBER: _ClassVar[int]
    EMAIL_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    username: str
    friendly_name: str
    email: str
    encrypted_password: bytes
    source: str
    external_id: str
    def __init__(self, created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., username: _Optional[str] = ..., friendly_name: _Optional[str] = ..., email: _Optional[str] = ..., encrypted_password: _Optional[bytes] = ..., source: _Optional[str] = ..., external_id: _Optional[str] = ...) -> None: ...

class GroupData(_message.Message):
    __slots__ = ("created_at", "display_name", "description")
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    display_name: str
    description: str
    def __init__(self, created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class ACLData(_message.Message):
    __slots__ = ("permission", "all_repositories", "repositories")
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    ALL_REPOSITORIES_FIELD_NUMBER: _ClassVar[int]
    REPOSITORIES_FIELD_NUMBER: _ClassVar[int]
    permission: str
    all_repositories: bool
    repositories: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, permission: _Optional[str] = ..., all_repositories: _Optional[bool] = ..., repositories: _Optional[_Iterable[str]] = ...) -> None: ...

class PolicyData(_message.Message):
    __slots__ = ("created_at", "display_name", "statements", "acl")
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    STATEMENTS_FIELD_NUMBER: _ClassVar[int]
    ACL_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    display_name: str
    statements: _containers.RepeatedCompositeFieldContainer[StatementData]
    acl: ACLData
    def __init__(self, created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., display_name: _Optional[str] = ..., statements: _Optional[_Iterable[_Union[StatementData, _Mapping]]] = ..., acl: _Optional[_Union[ACLData, _Mapping]] = ...) -> None: ...

class CredentialData(_message.Message):
    __slots__ = ("access_key_id", "secret_access_key_encrypted_bytes", "issued_date", "user_id")
    ACCESS_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SECRET_ACCESS_KEY_ENCRYPTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ISSUED_DATE_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    access_key_id: str
    secret_access_key_encrypted_bytes: bytes
    issued_date: _timestamp_pb2.Timestamp
    user_id: bytes
    def __init__(self, access_key_id: _Optional[str] = ..., secret_access_key_encrypted_bytes: _Optional[bytes] = ..., issued_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., user_id: _Optional[bytes] = ...) -> None: ...

class StatementData(_message.Message):
    __slots__ = ("effect", "action", "resource", "condition")
    class ConditionEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ConditionOperator
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ConditionOperator, _Mapping]] = ...) -> None: ...
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    effect: str
    action: _containers.RepeatedScalarFieldContainer[str]
    resource: str
    condition: _containers.MessageMap[str, ConditionOperator]
    def __init__(self, effect: _Optional[str] = ..., action: _Optional[_Iterable[str]] = ..., resource: _Optional[str] = ..., condition: _Optional[_Mapping[str, ConditionOperator]] = ...) -> None: ...

class ConditionOperator(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StringList
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StringList, _Mapping]] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.MessageMap[str, StringList]
    def __init__(self, fields: _Optional[_Mapping[str, StringList]] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenData(_message.Message):
    __slots__ = ("token_id", "expired_at")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_AT_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    expired_at: _timestamp_pb2.Timestamp
    def __init__(self, token_id: _Optional[str] = ..., expired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

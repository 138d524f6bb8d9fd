import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Entry(_message.Message):
    __slots__ = ("address", "last_modified", "size", "e_tag", "metadata", "address_type", "content_type")
    class AddressType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BY_PREFIX_DEPRECATED: _ClassVar[Entry.AddressType]
        RELATIVE: _ClassVar[Entry.AddressType]
        FULL: _ClassVar[Entry.AddressType]
    BY_PREFIX_DEPRECATED: Entry.AddressType
    RELATIVE: Entry.AddressType
    FULL: Entry.AddressType
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAST_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    E_TAG_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    address: str
    last_modified: _timestamp_pb2.Timestamp
    size: int
    e_tag: str
    metadata: _containers.ScalarMap[str, str]
    address_type: Entry.AddressType
    content_type: str
    def __init__(self, address: _Optional[str] = ..., last_modified: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., size: _Optional[int] = ..., e_tag: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., address_type: _Optional[_Union[Entry.AddressType, str]] = ..., content_type: _Optional[str] = ...) -> None: ...

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SecondaryIndex(_message.Message):
    __slots__ = ("primary_key",)
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    primary_key: bytes
    def __init__(self, primary_key: _Optional[bytes] = ...) -> None: ...

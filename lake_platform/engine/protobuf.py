"""Partial views of Lance's protobuf messages (``table.proto``, ``transaction.proto``), built on
first use in a private descriptor pool (no protoc step, no generated code): only the fields a
reader here needs, each declared repeated, so a sub-message, a map entry or a oneof member parses
as one ``bytes`` entry unchanged and every other field is skipped by protobuf's C parser."""

from __future__ import annotations

from typing import Any

#: The field types a view may declare, by the name used here.
_TYPES = {"bytes": "TYPE_BYTES", "string": "TYPE_STRING", "uint64": "TYPE_UINT64"}


def message_class(name: str, fields: dict[int, tuple[str, str]]) -> Any:
    """A message class named ``name`` of only ``fields``: number -> (field name, type name)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    kinds = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name=f"lake_platform/{name}.proto", package="lake_platform.engine", syntax="proto3"
    )
    msg = fdp.message_type.add(name=name)
    for number, (field_name, kind) in fields.items():
        msg.field.add(
            name=field_name, number=number, type=getattr(kinds, _TYPES[kind]), label=kinds.LABEL_REPEATED
        )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{name}"))


def parse(cls: Any, raw: bytes, failure: str) -> Any:
    """``raw`` parsed as ``cls``; ValueError starting with ``failure`` if it is not that message."""
    from google.protobuf.message import DecodeError

    message = cls()
    try:
        message.ParseFromString(raw)
    except DecodeError as exc:
        raise ValueError(f"{failure}: {exc}") from None
    return message

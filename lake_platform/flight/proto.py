"""Flight SQL protobuf messages, built at import in a private descriptor pool (no protoc step).

Field numbers follow ``FlightSql.proto`` and ``Flight.proto``. Only the messages this server
reads or writes are declared; write-path commands are recognised by their Any type URL alone.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

SQL_PACKAGE = "arrow.flight.protocol.sql"
FLIGHT_PACKAGE = "arrow.flight.protocol"
TYPE_URL_PREFIX = "type.googleapis.com/"

_STRING, _BYTES, _BOOL, _INT32, _UINT32, _ENUM_AS_INT32, _DOUBLE = 9, 12, 8, 5, 13, 5, 1
_OPTIONAL, _REPEATED = 1, 3

# name -> [(field name, number, type, repeated, proto3 optional)]
_SQL_MESSAGES: dict[str, list[tuple[str, int, int, bool, bool]]] = {
    "CommandGetSqlInfo": [("info", 1, _UINT32, True, False)],
    "CommandGetXdbcTypeInfo": [("data_type", 1, _INT32, False, True)],
    "CommandGetCatalogs": [],
    "CommandGetDbSchemas": [
        ("catalog", 1, _STRING, False, True),
        ("db_schema_filter_pattern", 2, _STRING, False, True),
    ],
    "CommandGetTables": [
        ("catalog", 1, _STRING, False, True),
        ("db_schema_filter_pattern", 2, _STRING, False, True),
        ("table_name_filter_pattern", 3, _STRING, False, True),
        ("table_types", 4, _STRING, True, False),
        ("include_schema", 5, _BOOL, False, False),
    ],
    "CommandGetTableTypes": [],
    "CommandGetPrimaryKeys": [
        ("catalog", 1, _STRING, False, True),
        ("db_schema", 2, _STRING, False, True),
        ("table", 3, _STRING, False, False),
    ],
    "CommandGetExportedKeys": [
        ("catalog", 1, _STRING, False, True),
        ("db_schema", 2, _STRING, False, True),
        ("table", 3, _STRING, False, False),
    ],
    "CommandGetImportedKeys": [
        ("catalog", 1, _STRING, False, True),
        ("db_schema", 2, _STRING, False, True),
        ("table", 3, _STRING, False, False),
    ],
    "CommandGetCrossReference": [
        ("pk_catalog", 1, _STRING, False, True),
        ("pk_db_schema", 2, _STRING, False, True),
        ("pk_table", 3, _STRING, False, False),
        ("fk_catalog", 4, _STRING, False, True),
        ("fk_db_schema", 5, _STRING, False, True),
        ("fk_table", 6, _STRING, False, False),
    ],
    "CommandStatementQuery": [
        ("query", 1, _STRING, False, False),
        ("transaction_id", 2, _BYTES, False, True),
    ],
    "TicketStatementQuery": [("statement_handle", 1, _BYTES, False, False)],
    "CommandPreparedStatementQuery": [("prepared_statement_handle", 1, _BYTES, False, False)],
    "ActionCreatePreparedStatementRequest": [
        ("query", 1, _STRING, False, False),
        ("transaction_id", 2, _BYTES, False, True),
    ],
    "ActionCreatePreparedStatementResult": [
        ("prepared_statement_handle", 1, _BYTES, False, False),
        ("dataset_schema", 2, _BYTES, False, False),
        ("parameter_schema", 3, _BYTES, False, False),
        ("is_update", 4, _BOOL, False, True),
    ],
    "ActionClosePreparedStatementRequest": [("prepared_statement_handle", 1, _BYTES, False, False)],
    "DoPutPreparedStatementResult": [("prepared_statement_handle", 1, _BYTES, False, True)],
    "CommandStatementUpdate": [
        ("query", 1, _STRING, False, False),
        ("transaction_id", 2, _BYTES, False, True),
    ],
    "CommandPreparedStatementUpdate": [("prepared_statement_handle", 1, _BYTES, False, False)],
    "ActionCancelQueryRequest": [("info", 1, _BYTES, False, False)],
    "ActionCancelQueryResult": [("result", 1, _ENUM_AS_INT32, False, False)],
}

# Flight-level messages: those carried raw in actions, and the transport's. Embedded messages are
# declared as bytes (the same wire encoding) and enums as int32 (also the same), so no further
# types are needed.
_FLIGHT_MESSAGES: dict[str, list[tuple[str, int, int, bool, bool]]] = {
    "CancelFlightInfoRequest": [("info", 1, _BYTES, False, False)],
    "CancelFlightInfoResult": [("status", 1, _ENUM_AS_INT32, False, False)],
    "CloseSessionRequest": [],
    "CloseSessionResult": [("status", 1, _ENUM_AS_INT32, False, False)],
    # The transport's own messages (DoPut's stream and replies, ListActions).
    "FlightData": [
        ("flight_descriptor", 1, _BYTES, False, False),
        ("data_header", 2, _BYTES, False, False),
        ("app_metadata", 3, _BYTES, False, False),
        ("data_body", 1000, _BYTES, False, False),
    ],
    "PutResult": [("app_metadata", 1, _BYTES, False, False)],
    # PollFlightInfo's answer: a FlightInfo, a FlightDescriptor and a google.protobuf.Timestamp.
    "PollInfo": [
        ("info", 1, _BYTES, False, True),
        ("flight_descriptor", 2, _BYTES, False, True),
        ("progress", 3, _DOUBLE, False, True),
        ("expiration_time", 4, _BYTES, False, True),
    ],
    "ActionType": [("type", 1, _STRING, False, False), ("description", 2, _STRING, False, False)],
}

#: CancelStatus values (Flight.proto)
CANCEL_STATUS_CANCELLED = 1
CANCEL_STATUS_NOT_CANCELLABLE = 3
#: CloseSessionResult.Status
CLOSE_SESSION_CLOSED = 1


def _file(name: str, package: str, messages: dict[str, list[tuple[str, int, int, bool, bool]]]) -> bytes:
    fdp = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    for msg_name, fields in messages.items():
        msg = fdp.message_type.add(name=msg_name)
        for fname, number, ftype, repeated, optional in fields:
            f = msg.field.add(
                name=fname, number=number, type=ftype, label=_REPEATED if repeated else _OPTIONAL
            )
            if optional:
                f.proto3_optional = True
                f.oneof_index = len(msg.oneof_decl)
                msg.oneof_decl.add(name=f"_{fname}")
    return fdp.SerializeToString()


_pool = descriptor_pool.DescriptorPool()
_pool.AddSerializedFile(_file("lake_platform/flight_sql.proto", SQL_PACKAGE, _SQL_MESSAGES))
_pool.AddSerializedFile(_file("lake_platform/flight.proto", FLIGHT_PACKAGE, _FLIGHT_MESSAGES))


def _cls(full_name: str) -> Any:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(full_name))


CommandGetSqlInfo = _cls(f"{SQL_PACKAGE}.CommandGetSqlInfo")
CommandGetXdbcTypeInfo = _cls(f"{SQL_PACKAGE}.CommandGetXdbcTypeInfo")
CommandGetCatalogs = _cls(f"{SQL_PACKAGE}.CommandGetCatalogs")
CommandGetDbSchemas = _cls(f"{SQL_PACKAGE}.CommandGetDbSchemas")
CommandGetTables = _cls(f"{SQL_PACKAGE}.CommandGetTables")
CommandGetTableTypes = _cls(f"{SQL_PACKAGE}.CommandGetTableTypes")
CommandGetPrimaryKeys = _cls(f"{SQL_PACKAGE}.CommandGetPrimaryKeys")
CommandGetExportedKeys = _cls(f"{SQL_PACKAGE}.CommandGetExportedKeys")
CommandGetImportedKeys = _cls(f"{SQL_PACKAGE}.CommandGetImportedKeys")
CommandGetCrossReference = _cls(f"{SQL_PACKAGE}.CommandGetCrossReference")
CommandStatementQuery = _cls(f"{SQL_PACKAGE}.CommandStatementQuery")
TicketStatementQuery = _cls(f"{SQL_PACKAGE}.TicketStatementQuery")
CommandPreparedStatementQuery = _cls(f"{SQL_PACKAGE}.CommandPreparedStatementQuery")
ActionCreatePreparedStatementRequest = _cls(f"{SQL_PACKAGE}.ActionCreatePreparedStatementRequest")
ActionCreatePreparedStatementResult = _cls(f"{SQL_PACKAGE}.ActionCreatePreparedStatementResult")
ActionClosePreparedStatementRequest = _cls(f"{SQL_PACKAGE}.ActionClosePreparedStatementRequest")
DoPutPreparedStatementResult = _cls(f"{SQL_PACKAGE}.DoPutPreparedStatementResult")
CommandStatementUpdate = _cls(f"{SQL_PACKAGE}.CommandStatementUpdate")
CommandPreparedStatementUpdate = _cls(f"{SQL_PACKAGE}.CommandPreparedStatementUpdate")
ActionCancelQueryRequest = _cls(f"{SQL_PACKAGE}.ActionCancelQueryRequest")
ActionCancelQueryResult = _cls(f"{SQL_PACKAGE}.ActionCancelQueryResult")
CancelFlightInfoRequest = _cls(f"{FLIGHT_PACKAGE}.CancelFlightInfoRequest")
CancelFlightInfoResult = _cls(f"{FLIGHT_PACKAGE}.CancelFlightInfoResult")
CloseSessionRequest = _cls(f"{FLIGHT_PACKAGE}.CloseSessionRequest")
CloseSessionResult = _cls(f"{FLIGHT_PACKAGE}.CloseSessionResult")
FlightData = _cls(f"{FLIGHT_PACKAGE}.FlightData")
PutResult = _cls(f"{FLIGHT_PACKAGE}.PutResult")
PollInfo = _cls(f"{FLIGHT_PACKAGE}.PollInfo")
ActionType = _cls(f"{FLIGHT_PACKAGE}.ActionType")

#: Commands of the write path and of features this read-only server does not offer, each with
#: the message its refusal carries.
_READ_ONLY = "not supported: this endpoint is read-only"
_NO_SUBSTRAIT = "Substrait plans are not supported: send SQL (CommandStatementQuery, CreatePreparedStatement)"
UNSUPPORTED_COMMANDS = {
    "CommandStatementUpdate": f"updates are {_READ_ONLY}",
    "CommandPreparedStatementUpdate": f"updates are {_READ_ONLY}",
    "CommandStatementIngest": f"bulk ingestion is {_READ_ONLY}",
    "CommandStatementSubstraitPlan": _NO_SUBSTRAIT,
    "ActionCreatePreparedSubstraitPlanRequest": _NO_SUBSTRAIT,
    "ActionBeginTransactionRequest": f"transactions are {_READ_ONLY}",
    "ActionEndTransactionRequest": f"transactions are {_READ_ONLY}",
    "ActionBeginSavepointRequest": f"savepoints are {_READ_ONLY}",
    "ActionEndSavepointRequest": f"savepoints are {_READ_ONLY}",
}


def pack(message: Any) -> bytes:
    """Serialize ``message`` inside an Any (how Flight SQL carries commands and results)."""
    wrapper = any_pb2.Any()
    wrapper.Pack(message)
    return wrapper.SerializeToString()


def unpack_any(data: bytes) -> tuple[str, bytes]:
    """Return (message name without package, payload) of an Any; raise ValueError if it is not one."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(data)
    url = wrapper.type_url
    if not url.startswith(TYPE_URL_PREFIX):
        raise ValueError("not a Flight SQL command")
    full = url[len(TYPE_URL_PREFIX) :]
    package, _, name = full.rpartition(".")
    if package != SQL_PACKAGE:
        raise ValueError(f"unknown command type {full!r}")
    return name, wrapper.value


def parse(cls: Any, payload: bytes) -> Any:
    """Parse ``payload`` as ``cls``; InvalidInput if it is not one."""
    msg = cls()
    try:
        msg.ParseFromString(payload)
    except Exception:  # noqa: BLE001 - DecodeError and friends
        from lake_platform.errors import InvalidInput

        raise InvalidInput(f"malformed {cls.DESCRIPTOR.name}") from None
    return msg


def canonical(message: Any, data: bytes) -> bool:
    """Whether ``data`` is exactly the canonical encoding of ``message``, which was parsed from it.

    Protobuf's parser accepts more than one encoding of a message: it skips unknown fields,
    keeps the last of a repeated field, and takes fields in any order. Re-encoding without the
    unknown fields (deterministically) and comparing refuses all of those, so anything appended,
    inserted or reordered shows."""
    copy = type(message)()
    copy.CopyFrom(message)
    copy.DiscardUnknownFields()
    return copy.SerializeToString(deterministic=True) == data


def unpack_sealed(data: bytes, cls: Any, field: str, what: str) -> bytes:
    """The sealed blob in ``field`` of the ``cls`` Any-packed in ``data``, decoded strictly.

    Both wrappers must be byte for byte their canonical encoding (see :func:`canonical`): a
    sealed ticket or handle is refused on any change, even one that leaves the sealed blob
    intact. Unauthenticated ``invalid <what>`` otherwise, the answer to a tampered blob."""
    from lake_platform.errors import Unauthenticated

    invalid = Unauthenticated(f"invalid {what}")
    wrapper = any_pb2.Any()
    message = cls()
    try:
        wrapper.ParseFromString(data)
        message.ParseFromString(wrapper.value)
    except Exception:  # noqa: BLE001 - DecodeError and friends
        raise invalid from None
    if (
        wrapper.type_url != TYPE_URL_PREFIX + cls.DESCRIPTOR.full_name
        or not canonical(wrapper, data)
        or not canonical(message, wrapper.value)
    ):
        raise invalid
    return bytes(getattr(message, field))


#: What a prepared statement's handle is called in errors.
PREPARED = "prepared statement handle"


def unpack_command(data: bytes) -> tuple[str, bytes]:
    """:func:`unpack_any` of a command or ticket a client sent; InvalidInput if it is not one."""
    try:
        return unpack_any(data)
    except Exception:  # noqa: BLE001 - DecodeError, ValueError
        from lake_platform.errors import InvalidInput

        raise InvalidInput("malformed Flight SQL command") from None


def statement_handle(ticket: bytes) -> bytes:
    """The sealed handle of a statement ticket; any byte changed, added or removed in its
    wrappers is refused like a tampered handle."""
    return unpack_sealed(ticket, TicketStatementQuery, "statement_handle", "ticket")


def prepared_handle(command: bytes) -> bytes:
    """The sealed handle of an Any-packed CommandPreparedStatementQuery, decoded as strictly.

    The client builds this wrapper, but every Flight SQL client encodes it canonically (one
    type_url, one handle, in field order: protobuf's own serializers in Go, Java and C++)."""
    return unpack_sealed(command, CommandPreparedStatementQuery, "prepared_statement_handle", PREPARED)


def opt(msg: Any, name: str) -> Any:
    """The value of a proto3 optional field, or None when it is absent."""
    return getattr(msg, name) if msg.HasField(name) else None

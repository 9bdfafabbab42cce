"""The Arrow Flight SQL messages the server reads and writes, as protobuf classes.

Flight SQL is Arrow Flight with protobuf commands in `FlightDescriptor.cmd`, tickets, action
bodies and `PutResult` metadata, each packed in a `google.protobuf.Any` named
`type.googleapis.com/arrow.flight.protocol.sql.<Message>`. pyarrow serves Flight but ships no
Flight SQL bindings, and no maintained Python package does; so the classes are made here by
`protobuf` from a descriptor of the messages this server uses, with the names, field numbers
and types of Arrow's `format/FlightSql.proto` (and, for cancelling, `format/Flight.proto`).
The descriptor is proto2 so that every field has presence (`HasField`): the wire format of
the fields is the same, and repeated numbers are read packed or not.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message, message_factory

SQL_PACKAGE = "arrow.flight.protocol.sql"
FLIGHT_PACKAGE = "arrow.flight.protocol"
TYPE_URL_PREFIX = "type.googleapis.com/"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BYTES, _BOOL, _INT64, _INT32, _UINT32 = (
    _F.TYPE_STRING,
    _F.TYPE_BYTES,
    _F.TYPE_BOOL,
    _F.TYPE_INT64,
    _F.TYPE_INT32,
    _F.TYPE_UINT32,
)
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# message name -> its fields: (name, number, type, label)
_SQL_MESSAGES: dict[str, list[tuple[str, int, int, int]]] = {
    "CommandGetSqlInfo": [("info", 1, _UINT32, _MANY)],
    "CommandGetCatalogs": [],
    "CommandGetDbSchemas": [("catalog", 1, _STRING, _ONE), ("db_schema_filter_pattern", 2, _STRING, _ONE)],
    "CommandGetTables": [
        ("catalog", 1, _STRING, _ONE),
        ("db_schema_filter_pattern", 2, _STRING, _ONE),
        ("table_name_filter_pattern", 3, _STRING, _ONE),
        ("table_types", 4, _STRING, _MANY),
        ("include_schema", 5, _BOOL, _ONE),
    ],
    "CommandGetTableTypes": [],
    "CommandStatementQuery": [("query", 1, _STRING, _ONE), ("transaction_id", 2, _BYTES, _ONE)],
    "CommandStatementUpdate": [("query", 1, _STRING, _ONE), ("transaction_id", 2, _BYTES, _ONE)],
    "TicketStatementQuery": [("statement_handle", 1, _BYTES, _ONE)],
    "CommandPreparedStatementQuery": [("prepared_statement_handle", 1, _BYTES, _ONE)],
    "CommandPreparedStatementUpdate": [("prepared_statement_handle", 1, _BYTES, _ONE)],
    "DoPutUpdateResult": [("record_count", 1, _INT64, _ONE)],
    "ActionCreatePreparedStatementRequest": [
        ("query", 1, _STRING, _ONE),
        ("transaction_id", 2, _BYTES, _ONE),
    ],
    "ActionCreatePreparedStatementResult": [
        ("prepared_statement_handle", 1, _BYTES, _ONE),
        ("dataset_schema", 2, _BYTES, _ONE),
        ("parameter_schema", 3, _BYTES, _ONE),
    ],
    "ActionClosePreparedStatementRequest": [("prepared_statement_handle", 1, _BYTES, _ONE)],
    "ActionCancelQueryRequest": [("info", 1, _BYTES, _ONE)],  # a serialised FlightInfo
    "ActionCancelQueryResult": [("result", 1, _INT32, _ONE)],  # CancelResult
}
# Flight's own cancel action (its FlightInfo is a message there; its bytes are the same)
_FLIGHT_MESSAGES: dict[str, list[tuple[str, int, int, int]]] = {
    "CancelFlightInfoRequest": [("info", 1, _BYTES, _ONE)],
    "CancelFlightInfoResult": [("status", 1, _INT32, _ONE)],  # CancelStatus
}

CANCELLED = 1  # CancelStatus.CANCEL_STATUS_CANCELLED and CancelResult.CANCEL_RESULT_CANCELLED
NOT_CANCELLABLE = 3  # ... _NOT_CANCELLABLE: nothing of that query is running any more


def _classes(package: str, messages: dict[str, list[tuple[str, int, int, int]]]) -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"datafusion_distributed/{package}.proto", package=package, syntax="proto2"
    )
    for name, fields in messages.items():
        kind = proto.message_type.add(name=name)
        for field_name, number, field_type, label in fields:
            kind.field.add(name=field_name, number=number, type=field_type, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in messages
    }


SQL = _classes(SQL_PACKAGE, _SQL_MESSAGES)
FLIGHT = _classes(FLIGHT_PACKAGE, _FLIGHT_MESSAGES)


def pack(msg: message.Message) -> bytes:
    """`msg` packed in a `google.protobuf.Any`, serialised."""
    return any_pb2.Any(
        type_url=TYPE_URL_PREFIX + msg.DESCRIPTOR.full_name, value=msg.SerializeToString()
    ).SerializeToString()


def unpack(raw: bytes) -> message.Message:
    """The Flight SQL message packed in the `Any` `raw`.

    Raises:
        ValueError: `raw` is not an `Any`, or holds a message this server does not know.
    """
    packed = any_pb2.Any()
    try:
        packed.ParseFromString(raw)
    except message.DecodeError as exc:
        raise ValueError(f"not a Flight SQL command: {exc}") from exc
    full_name = packed.type_url.rpartition("/")[2]
    package, _, name = full_name.rpartition(".")
    if package != SQL_PACKAGE or name not in SQL:
        raise ValueError(f"unsupported Flight SQL command {full_name or '(none)'}")
    found = SQL[name]()
    try:
        found.ParseFromString(packed.value)
    except message.DecodeError as exc:
        raise ValueError(f"a {name} that does not parse: {exc}") from exc
    return found


def name_of(msg: message.Message) -> str:
    """The message's short name (e.g. "CommandStatementQuery")."""
    return str(msg.DESCRIPTOR.name)

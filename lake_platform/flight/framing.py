"""``FlightData`` framing by hand: replies carry the IPC message pyarrow serializes, wrapped in
the few protobuf bytes of a ``FlightData`` (a record batch is copied into the reply once and
never passes through protobuf objects); DoPut's messages are unwrapped back into an IPC stream.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.errors import InvalidInput
from lake_platform.flight import proto
from lake_platform.flight.last import Last
from lake_platform.query.batches import transient_pool

# FlightData field keys (field number << 3 | wire type 2): descriptor 1, data_header 2,
# app_metadata 3, data_body 1000.
_HEADER_KEY = b"\x12"
_BODY_KEY = b"\xc2\x3e"
_IPC_CONTINUATION = b"\xff\xff\xff\xff"
_IPC_EOS = _IPC_CONTINUATION + b"\x00\x00\x00\x00"
_BYTES = [bytes((n,)) for n in range(0x80)]


def parse_message(cls: Any, data: bytes) -> Any:
    """A Flight message (FlightDescriptor, Ticket, Action...) from its wire form; InvalidInput if
    it is not one."""
    try:
        return cls.deserialize(data)
    except Exception:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError on garbage
        raise InvalidInput(f"malformed {cls.__name__}") from None


def varint(n: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    if n < 0x80:
        return _BYTES[n]
    if n < 0x4000:  # a ticket's length: two bytes
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def endpoint(ticket: bytes, expires: int, locations: Sequence[str] = ()) -> fl.FlightEndpoint:
    """A FlightEndpoint for ``ticket`` that expires at ``expires`` (epoch seconds: the ticket's
    expiry rounded down, so a client never thinks a ticket lives longer than it does), to be
    redeemed at any of ``locations`` (URIs, in the order to try; none: this connection).

    Parsed from its wire form: pyarrow's constructor converts expiration_time through a
    compute cast on every call, the larger share of what pinning adds to GetFlightInfo."""
    return fl.FlightEndpoint.deserialize(endpoint_bytes(ticket, expires, locations))


def endpoint_bytes(ticket: bytes, expires: int, locations: Sequence[str] = ()) -> bytes:
    """The wire form of :func:`endpoint`'s FlightEndpoint (for :func:`flight_info`)."""
    inner = b"\x0a" + varint(len(ticket)) + ticket  # Ticket{ticket = 1}
    stamp = b"\x08" + varint(expires)  # google.protobuf.Timestamp{seconds = 1}
    where = b""
    for uri in locations:
        loc = b"\x0a" + varint(len(uri.encode())) + uri.encode()  # Location{uri = 1}
        where += b"\x12" + varint(len(loc)) + loc  # FlightEndpoint.location = 2
    return b"\x0a" + varint(len(inner)) + inner + where + b"\x1a" + varint(len(stamp)) + stamp


#: FlightInfo's total_records = 4 and total_bytes = 5, both -1 (unknown; int64 as a varint).
_UNKNOWN_TOTALS = b"\x20" + varint((1 << 64) - 1) + b"\x28" + varint((1 << 64) - 1)


def flight_info(schema: bytes, descriptor: bytes, endpoints: Sequence[bytes], ordered: bool) -> fl.FlightInfo:
    """``FlightInfo(schema, descriptor, endpoints, -1, -1, ordered)`` from wire forms: the
    schema's IPC message (``pa.Schema.serialize``, worked out once per plan), the descriptor's
    and the endpoints' (:func:`endpoint_bytes`). One parse instead of building each part."""
    parts = [b"\x0a", varint(len(schema)), schema, b"\x12", varint(len(descriptor)), descriptor]
    for wire in endpoints:
        parts += [b"\x1a", varint(len(wire)), wire]
    parts.append(_UNKNOWN_TOTALS)
    if ordered:
        parts.append(b"\x30\x01")
    return fl.FlightInfo.deserialize(b"".join(parts))


#: An Any's type_url (field 1) of a TicketStatementQuery, as protobuf serializes it.
_TICKET_URL = f"{proto.TYPE_URL_PREFIX}{proto.SQL_PACKAGE}.TicketStatementQuery".encode()
_TICKET_URL_FIELD = b"\x0a" + varint(len(_TICKET_URL)) + _TICKET_URL


def statement_ticket(handle: bytes) -> bytes:
    """``proto.pack(TicketStatementQuery(statement_handle=handle))``, byte for byte (DoGet
    refuses any other encoding), without building two protobuf messages per ticket."""
    if not handle:  # protobuf leaves empty fields out
        return _TICKET_URL_FIELD
    value = b"\x0a" + varint(len(handle)) + handle  # TicketStatementQuery{statement_handle = 1}
    return _TICKET_URL_FIELD + b"\x12" + varint(len(value)) + value  # Any{value = 2}


def statement_endpoint(handle: bytes, expires: int, locations: Sequence[str] = ()) -> bytes:
    """``endpoint_bytes(statement_ticket(handle), expires, locations)``: every byte before the
    handle depends on its length only (a kept plan's tickets all have the same), and the
    expiry changes once a second, so both are looked up rather than encoded each time."""
    if not handle or locations:
        return endpoint_bytes(statement_ticket(handle), expires, locations)
    return b"".join((_handle_prefix(len(handle)), handle, _expiry(expires)))


@functools.lru_cache(maxsize=256)
def _handle_prefix(size: int) -> bytes:
    """FlightEndpoint{ticket = 1: Ticket{ticket = 1: Any{type_url, value: TicketStatementQuery{
    statement_handle = 1: (size bytes)}}}} up to the handle."""
    value = 1 + len(varint(size)) + size
    ticket = len(_TICKET_URL_FIELD) + 1 + len(varint(value)) + value
    inner = 1 + len(varint(ticket)) + ticket
    return (
        b"\x0a" + varint(inner) + b"\x0a" + varint(ticket)
        + _TICKET_URL_FIELD + b"\x12" + varint(value) + b"\x0a" + varint(size)
    )  # fmt: skip


@functools.lru_cache(maxsize=16)
def _expiry(expires: int) -> bytes:
    """FlightEndpoint.expiration_time = 3: Timestamp{seconds = 1}."""
    stamp = b"\x08" + varint(expires)
    return b"\x1a" + varint(len(stamp)) + stamp


def flight_data(header: pa.Buffer | bytes, body: pa.Buffer | bytes | None = None) -> bytes:
    """A serialized ``FlightData`` carrying one IPC message (flatbuffer header and body)."""
    parts: list[Any] = [_HEADER_KEY, varint(len(header)), header]
    if body is not None and len(body):
        parts += [_BODY_KEY, varint(len(body)), body]
    return b"".join(parts)


def encode_stream(
    schema: pa.Schema, batches: Iterable[pa.RecordBatch | Last[pa.RecordBatch]]
) -> Iterator[bytes | Last[bytes]]:
    """``FlightData`` messages for an IPC stream: the schema, then one message per batch; a
    ``Last`` batch's message as ``Last`` (with dictionaries, where a batch may need several
    messages, the mark is dropped)."""
    if _has_dictionary(schema):
        yield from _encode_with_writer(schema, (_unmarked(b) for b in batches))
        return
    yield flight_data(pa.ipc.read_message(schema.serialize()).metadata)
    for batch in batches:
        plain = _unmarked(batch)
        message = pa.ipc.read_message(plain.serialize(memory_pool=transient_pool()))
        data = flight_data(message.metadata, message.body)
        yield Last(data) if isinstance(batch, Last) else data


def _unmarked(batch: pa.RecordBatch | Last[pa.RecordBatch]) -> pa.RecordBatch:
    return batch.item if isinstance(batch, Last) else batch


def _has_dictionary(schema: pa.Schema) -> bool:
    def walk(t: pa.DataType) -> bool:
        return pa.types.is_dictionary(t) or any(walk(t.field(i).type) for i in range(t.num_fields))

    return any(walk(f.type) for f in schema)


class _Collector:
    """A write-only file for pyarrow's IPC writer that hands back what was written."""

    closed = False

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


def _encode_with_writer(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """The general path: pyarrow's stream writer emits the dictionary batches (and deltas) a
    dictionary-encoded column needs; each IPC message it writes becomes one ``FlightData``."""
    sink = _Collector()
    writer = pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), schema)

    def drain() -> Iterator[bytes]:
        reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(sink.take()))
        while True:
            try:
                message = reader.read_next_message()
            except StopIteration:
                return
            yield flight_data(message.metadata, message.body)

    yield from drain()
    for batch in batches:
        writer.write_batch(batch)
        yield from drain()


def decode_put(
    requests: Iterator[bytes], max_bytes: int
) -> tuple[fl.FlightDescriptor, Iterator[pa.RecordBatch]]:
    """The descriptor of a DoPut and its record batches. At most ``max_bytes`` of IPC is read:
    DoPut only binds parameters here, so anything larger is refused, not buffered."""
    descriptor: fl.FlightDescriptor | None = None
    stream: list[bytes] = []
    size = 0
    for raw in requests:
        try:
            data = proto.FlightData.FromString(raw)
        except Exception:  # noqa: BLE001
            raise InvalidInput("malformed FlightData") from None
        if descriptor is None:
            if not data.flight_descriptor:
                raise InvalidInput("the first DoPut message must carry the FlightDescriptor")
            descriptor = parse_message(fl.FlightDescriptor, data.flight_descriptor)
        if not data.data_header:
            continue
        size += len(data.data_header) + len(data.data_body)
        if size > max_bytes:
            raise InvalidInput(
                f"the bound parameters are larger than LAKE_FLIGHT_MAX_PARAM_BYTES={max_bytes}"
            )
        pad = -len(data.data_header) % 8
        stream.append(
            _IPC_CONTINUATION
            + struct.pack("<i", len(data.data_header) + pad)
            + data.data_header
            + b"\0" * pad
            + data.data_body
        )
    if descriptor is None:
        raise InvalidInput("DoPut without a FlightDescriptor")
    if not stream:
        return descriptor, iter(())
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(b"".join(stream) + _IPC_EOS))
        batches = list(reader)
    except Exception:  # noqa: BLE001 - ArrowInvalid and friends: the client's bytes are wrong
        raise InvalidInput("malformed Arrow IPC in DoPut") from None
    return descriptor, iter(batches)


__all__ = ["decode_put", "encode_stream", "endpoint", "flight_data", "parse_message", "varint"]

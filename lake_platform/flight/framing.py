"""Flight's messages around Arrow IPC: a result stream's ``FlightData`` messages, DoPut's
messages unwrapped back into record batches, and a FlightEndpoint for a ticket.

Each ``FlightData`` carries one IPC message pyarrow serializes (its flatbuffer header and its
body). It is framed here, by hand: two fields, each a key and a length before the bytes, which
copies a batch once. Protobuf's ``proto.FlightData`` writes the same bytes (``test_transport``
checks it) but copies a batch three times, into a message that is freed at once: a 5M-row
``SELECT *`` through ``bench/flight.py --scan-only`` took 7 % longer in the median round and
7-10 % more server CPU, and one 1 MiB message (the size a fast stream's batches are merged to)
cost 0.07-2.4 ms instead of 0.02, as glibc gave the freed memory back and faulted it in again.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.errors import InvalidInput
from lake_platform.flight import proto
from lake_platform.query.batches import transient_pool

# FlightData's field keys (field number << 3 | wire type 2): data_header = 2, data_body = 1000.
_HEADER_KEY = b"\x12"
_BODY_KEY = b"\xc2\x3e"
# Arrow IPC's encapsulation of a message in a stream (continuation marker, then the header's
# length): pyarrow reads a stream only in that form and writes no message from its parts.
_IPC_CONTINUATION = b"\xff\xff\xff\xff"
_IPC_EOS = _IPC_CONTINUATION + b"\x00\x00\x00\x00"
#: An expiry's type: epoch seconds (FlightEndpoint.expiration_time is a Timestamp).
_EXPIRY = pa.timestamp("s", tz="UTC")


def parse_message(cls: Any, data: bytes) -> Any:
    """A Flight message (FlightDescriptor, Ticket, Action...) from its wire form; InvalidInput if
    it is not one."""
    try:
        return cls.deserialize(data)
    except Exception:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError on garbage
        raise InvalidInput(f"malformed {cls.__name__}") from None


def endpoint(ticket: bytes, expires: int, locations: Sequence[str] = ()) -> fl.FlightEndpoint:
    """A FlightEndpoint for ``ticket`` that expires at ``expires`` (epoch seconds: the ticket's
    expiry rounded down, so a client never thinks a ticket lives longer than it does), to be
    redeemed at any of ``locations`` (URIs, in the order to try; none: this connection)."""
    # From a datetime: pyarrow makes a timestamp scalar of an int through a compute cast, which
    # took ~0.07 ms of a GetFlightInfo in a running server (2.5 us from a datetime).
    when = datetime.fromtimestamp(expires, tz=timezone.utc)
    return fl.FlightEndpoint(ticket, list(locations), expiration_time=pa.scalar(when, _EXPIRY))


def flight_data(header: pa.Buffer | bytes, body: pa.Buffer | bytes | None = None) -> bytes:
    """A serialized ``FlightData`` carrying one IPC message (flatbuffer header and body)."""
    parts: list[Any] = [_HEADER_KEY, _varint(len(header)), header]
    if body is not None and len(body):
        parts += [_BODY_KEY, _varint(len(body)), body]
    return b"".join(parts)


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of a length."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_stream(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    """``FlightData`` messages for an IPC stream: the schema, then one message per batch."""
    if _has_dictionary(schema):
        yield from _encode_with_writer(schema, batches)
        return
    yield flight_data(pa.ipc.read_message(schema.serialize()).metadata)
    for batch in batches:
        message = pa.ipc.read_message(batch.serialize(memory_pool=transient_pool()))
        yield flight_data(message.metadata, message.body)


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
    """The descriptor of a DoPut, read from its first message alone, and its record batches,
    read when iterated: a command the server refuses is refused before the rest arrives (a
    client may wait for the answer before it ends its stream). At most ``max_bytes`` of IPC is
    read: DoPut only binds parameters here, so anything larger is refused, not buffered."""
    requests = iter(requests)
    first = next(requests, None)
    if first is None:
        raise InvalidInput("DoPut without a FlightDescriptor")
    data = _flight_data(first)
    if not data.flight_descriptor:
        raise InvalidInput("the first DoPut message must carry the FlightDescriptor")
    return parse_message(fl.FlightDescriptor, data.flight_descriptor), _put_batches(data, requests, max_bytes)


def _flight_data(raw: bytes) -> Any:
    try:
        return proto.FlightData.FromString(raw)
    except Exception:  # noqa: BLE001
        raise InvalidInput("malformed FlightData") from None


def _put_batches(first: Any, requests: Iterator[bytes], max_bytes: int) -> Iterator[pa.RecordBatch]:
    """The record batches of a DoPut whose first message is ``first``, the rest ``requests``."""
    stream: list[bytes] = []
    size = 0
    for data in itertools.chain([first], (_flight_data(raw) for raw in requests)):
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
    if not stream:
        return
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(b"".join(stream) + _IPC_EOS))
        batches = list(reader)
    except Exception:  # noqa: BLE001 - ArrowInvalid and friends: the client's bytes are wrong
        raise InvalidInput("malformed Arrow IPC in DoPut") from None
    yield from batches


__all__ = ["decode_put", "encode_stream", "endpoint", "flight_data", "parse_message"]

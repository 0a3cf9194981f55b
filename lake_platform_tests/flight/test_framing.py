"""FlightData framing (flight/framing.py) on its own: encoded then decoded losslessly (dictionaries
included), framed by hand exactly as protobuf writes it, and a DoPut stream that is not a
descriptor and Arrow IPC within the size limit refused."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform import errors
from lake_platform.flight import proto
from lake_platform.flight.framing import decode_put, encode_stream, flight_data
from lake_platform_tests.flight.scripted import DICTS


def test_encode_then_decode_is_lossless() -> None:
    descriptor = fl.FlightDescriptor.for_command(b"cmd")
    messages = list(encode_stream(DICTS.schema, DICTS.to_batches(max_chunksize=2)))
    first = proto.FlightData.FromString(messages[0])
    first.flight_descriptor = descriptor.serialize()
    got_descriptor, batches = decode_put(iter([first.SerializeToString(), *messages[1:]]), 1 << 20)
    assert got_descriptor.command == b"cmd"
    assert pa.Table.from_batches(list(batches), DICTS.schema).equals(DICTS)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 1 << 20, (1 << 21) + 3])
def test_flight_data_framed_by_hand_is_what_protobuf_writes(size: int) -> None:
    header, body = bytes(i % 251 for i in range(size % 1000 + 8)), bytes(i % 253 for i in range(size))
    wrote = proto.FlightData(data_header=header, data_body=body).SerializeToString()
    assert flight_data(header, body) == flight_data(pa.py_buffer(header), pa.py_buffer(body)) == wrote


def test_decode_put_refuses_bad_streams() -> None:
    descriptor = fl.FlightDescriptor.for_command(b"cmd").serialize()
    with pytest.raises(errors.InvalidInput, match="FlightDescriptor"):
        decode_put(iter([flight_data(b"")]), 1 << 20)
    with pytest.raises(errors.InvalidInput, match="malformed FlightData"):
        decode_put(iter([b"\xff\xff\xff"]), 1 << 20)
    garbage = proto.FlightData(
        flight_descriptor=descriptor, data_header=b"not a flatbuffer"
    ).SerializeToString()
    with pytest.raises(errors.InvalidInput, match="malformed Arrow IPC"):
        list(decode_put(iter([garbage]), 1 << 20)[1])  # the batches' faults: when read
    big = list(encode_stream(DICTS.schema, DICTS.to_batches()))
    first = proto.FlightData.FromString(big[0])
    first.flight_descriptor = descriptor
    with pytest.raises(errors.InvalidInput, match="LAKE_FLIGHT_MAX_PARAM_BYTES=100"):
        list(decode_put(iter([first.SerializeToString(), *big[1:]]), 100)[1])


def test_decode_put_reads_the_descriptor_from_the_first_message_alone() -> None:
    """A command to refuse is known before the client ends its stream (it may wait for the
    answer first, as flightsql-dbapi's execute_update does)."""
    first = proto.FlightData(flight_descriptor=fl.FlightDescriptor.for_command(b"cmd").serialize())

    def stream() -> Iterator[bytes]:
        yield first.SerializeToString()
        raise AssertionError("read past the first message")

    descriptor, _ = decode_put(stream(), 1 << 20)
    assert descriptor.command == b"cmd"

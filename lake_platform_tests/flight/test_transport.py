"""The grpcio Flight transport on its own: a real server on a free loopback port with a scripted
handler, real pyarrow and grpcio clients. Exact status codes, the shared-port health service,
FlightData framing (dictionaries included) and the calls this endpoint does not offer."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lake_platform import errors
from lake_platform.auth.service import AuthService, Throttle
from lake_platform.auth.tokens import Identity, Sealer
from lake_platform.errors import LakeError
from lake_platform.flight import proto
from lake_platform.flight.errors import status_of
from lake_platform.flight.framing import decode_put, encode_stream, flight_data
from lake_platform.flight.transport import SERVICE, Call, FlightTransport
from lake_platform_tests.doubles import StaticAuthenticator
from lake_platform_tests.engine.helpers import lance_panic

ALICE = Identity("alice", "user", "p", "reader")
DICTS = pa.table(
    {
        "tag": pa.array(["a", "b", "a", None, "c"]).dictionary_encode(),
        "nested": pa.array(
            [{"k": v} for v in ["x", "y", "x", "z", "y"]],
            pa.struct([pa.field("k", pa.dictionary(pa.int32(), pa.string()))]),
        ),
        "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
    }
)


class Scripted:
    """A FlightHandler whose answers the test sets: ``fail`` raises from every call."""

    def __init__(self) -> None:
        self.fail: BaseException | None = None
        self.table = DICTS
        self.results = [b"one", b"two"]
        self.calls: list[Call] = []

    def _maybe_fail(self, call: Call) -> None:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail

    def get_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        self._maybe_fail(call)
        return fl.FlightInfo(self.table.schema, descriptor, [fl.FlightEndpoint(b"t", [])], -1, -1)

    def get_schema(self, call: Call, descriptor: fl.FlightDescriptor) -> pa.Schema:
        self._maybe_fail(call)
        return self.table.schema

    def do_get(self, call: Call, ticket: fl.Ticket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        self._maybe_fail(call)
        return self.table.schema, iter(self.table.to_batches(max_chunksize=2))

    def do_put(self, call: Call, descriptor: fl.FlightDescriptor, batches: Iterator[pa.RecordBatch]) -> bytes:
        self._maybe_fail(call)
        return str(sum(b.num_rows for b in batches)).encode()

    def do_action(self, call: Call, action: fl.Action) -> list[bytes]:
        self._maybe_fail(call)
        return list(self.results)

    def list_actions(self) -> list[tuple[str, str]]:
        return [("health", "report health")]


def alice_auth(sealer: Sealer) -> AuthService:
    """Authentication with one user, alice (password "pw"), over ``sealer``."""
    return AuthService(
        StaticAuthenticator(users={"alice": ("pw", ALICE)}),
        sealer,
        token_ttl=60,
        service_token_cache=5,
        throttle=Throttle(100, 1),
    )


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FlightTransport, Scripted]]:
    handler = Scripted()
    transport = FlightTransport(
        handler,
        alice_auth(Sealer(None)),
        host="127.0.0.1",
        port=0,
        tls=None,
        worker_threads=8,
        max_receive_bytes=1 << 20,
        max_put_bytes=64 << 10,
    )
    transport.start()
    transport.set_serving(True)
    try:
        yield transport, handler
    finally:
        transport.stop(grace=0)


@pytest.fixture
def client(
    served: tuple[FlightTransport, Scripted],
) -> Iterator[tuple[fl.FlightClient, fl.FlightCallOptions]]:
    transport, handler = served
    handler.fail = None
    handler.table = DICTS
    handler.results = [b"one", b"two"]
    c = fl.connect(f"grpc://127.0.0.1:{transport.port}")
    yield c, fl.FlightCallOptions(headers=[c.authenticate_basic_token("alice", "pw")])
    c.close()


def bearer(transport: FlightTransport) -> list[tuple[str, str]]:
    key, value = fl.connect(f"grpc://127.0.0.1:{transport.port}").authenticate_basic_token("alice", "pw")
    return [(key.decode().lower(), value.decode())]


def lake_errors() -> list[type[LakeError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, LakeError) and cls is not LakeError
    ]


@pytest.mark.parametrize("cls", lake_errors(), ids=lambda c: c.__name__)
def test_every_platform_error_reaches_a_grpc_client_with_its_exact_code(
    served: tuple[FlightTransport, Scripted], cls: type[LakeError]
) -> None:
    transport, handler = served
    handler.fail = cls("what went wrong")
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
        call = channel.unary_unary(f"/{SERVICE}/GetFlightInfo")
        with pytest.raises(grpc.RpcError) as err:
            call(fl.FlightDescriptor.for_command(b"x").serialize(), metadata=bearer(transport))
    assert err.value.code() == grpc.StatusCode[cls.grpc_status]
    assert err.value.details() == f"what went wrong [{cls.__name__}, code {int(cls.code)}]"


def test_a_bug_answers_internal_without_a_traceback(
    served: tuple[FlightTransport, Scripted], client: Any
) -> None:
    _, handler = served
    handler.fail = ZeroDivisionError("secret detail at /srv/lake/x.py")
    c, options = client
    with pytest.raises(fl.FlightInternalError) as err:
        c.get_flight_info(fl.FlightDescriptor.for_command(b"x"), options)
    assert "internal error; see the server log" in str(err.value)
    assert "secret" not in str(err.value) and "Traceback" not in str(err.value)
    assert status_of(ZeroDivisionError())[0] == grpc.StatusCode.INTERNAL


def test_errors_raised_while_streaming_keep_their_code(served: tuple[FlightTransport, Scripted]) -> None:
    transport, handler = served

    def failing() -> Iterator[pa.RecordBatch]:
        yield DICTS.to_batches()[0]
        raise errors.InvalidTableState("stopped midway")

    handler.fail = None
    original = handler.do_get
    handler.do_get = lambda call, ticket: (DICTS.schema, failing())  # type: ignore[method-assign]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
            stream = channel.unary_stream(f"/{SERVICE}/DoGet")(
                fl.Ticket(b"t").serialize(), metadata=bearer(transport)
            )
            received: list[bytes] = []
            with pytest.raises(grpc.RpcError) as err:
                received.extend(stream)
        assert len(received) >= 2  # the schema and the first batch arrived before the failure
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "stopped midway [InvalidTableState, code 19]" == err.value.details()
    finally:
        handler.do_get = original  # type: ignore[method-assign]


def test_a_lance_panic_answers_internal_and_ends_the_call(
    served: tuple[FlightTransport, Scripted], tmp_path: Path
) -> None:
    """A panic is a BaseException, which grpcio's worker does not handle: the call was never
    ended and the client waited for ever (the timeouts below bound the test, not the server)."""
    transport, handler = served
    panic = lance_panic(tmp_path)

    def panicking() -> Iterator[pa.RecordBatch]:
        yield DICTS.to_batches()[0]
        raise panic

    original = handler.do_get
    handler.do_get = lambda call, ticket: (DICTS.schema, panicking())  # type: ignore[method-assign]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
            stream = channel.unary_stream(f"/{SERVICE}/DoGet")(
                fl.Ticket(b"t").serialize(), metadata=bearer(transport), timeout=60
            )
            received: list[bytes] = []
            with pytest.raises(grpc.RpcError) as err:
                received.extend(stream)
            assert len(received) >= 2 and err.value.code() == grpc.StatusCode.INTERNAL
            handler.fail = panic
            info = channel.unary_unary(f"/{SERVICE}/GetFlightInfo")
            with pytest.raises(grpc.RpcError) as err:
                info(
                    fl.FlightDescriptor.for_command(b"x").serialize(), metadata=bearer(transport), timeout=60
                )
            assert err.value.code() == grpc.StatusCode.INTERNAL
            assert err.value.details() == "internal error; see the server log [Internal, code 18]"
    finally:
        handler.do_get = original  # type: ignore[method-assign]
        handler.fail = None


def test_dictionary_columns_stream_intact(client: Any) -> None:
    c, options = client
    got = c.do_get(fl.Ticket(b"t"), options).read_all()
    assert got.schema.equals(DICTS.schema)
    assert got.to_pylist() == DICTS.to_pylist()


def test_plain_columns_stream_intact_batch_by_batch(
    served: tuple[FlightTransport, Scripted], client: Any
) -> None:
    _, handler = served
    handler.table = pa.table(
        {
            "id": pa.array(range(10), pa.int64()),
            "s": [f"r{i}" for i in range(10)],
            "l": pa.array([[i] * i for i in range(10)], pa.list_(pa.int32())),
        }
    )
    c, options = client
    reader = c.do_get(fl.Ticket(b"t"), options)
    chunks = [chunk.data.num_rows for chunk in reader]
    assert chunks == [2, 2, 2, 2, 2]
    assert c.do_get(fl.Ticket(b"t"), options).read_all().equals(handler.table)


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
        decode_put(iter([garbage]), 1 << 20)
    big = list(encode_stream(DICTS.schema, DICTS.to_batches()))
    first = proto.FlightData.FromString(big[0])
    first.flight_descriptor = descriptor
    with pytest.raises(errors.InvalidInput, match="LAKE_FLIGHT_MAX_PARAM_BYTES=100"):
        decode_put(iter([first.SerializeToString(), *big[1:]]), 100)


def test_do_put_and_actions_round_trip(client: Any) -> None:
    c, options = client
    writer, reader = c.do_put(fl.FlightDescriptor.for_command(b"bind"), DICTS.schema, options)
    writer.write_table(DICTS)
    writer.done_writing()
    assert reader.read().to_pybytes() == b"5"
    writer.close()
    assert [r.body.to_pybytes() for r in c.do_action(fl.Action("anything", b""), options)] == [b"one", b"two"]
    assert [(a.type, a.description) for a in c.list_actions(options)] == [("health", "report health")]


def test_every_call_needs_credentials(served: tuple[FlightTransport, Scripted]) -> None:
    transport, handler = served
    before = len(handler.calls)
    c = fl.connect(f"grpc://127.0.0.1:{transport.port}")
    descriptor = fl.FlightDescriptor.for_command(b"x")
    calls = [
        lambda: c.get_flight_info(descriptor),
        lambda: c.get_schema(descriptor),
        lambda: c.do_get(fl.Ticket(b"t")).read_all(),
        lambda: list(c.do_action(fl.Action("x", b""))),
        lambda: list(c.list_actions()),
        lambda: list(c.list_flights()),
    ]
    for attempt in calls:
        # (pyarrow's client raises a bare OSError for GetSchema's statuses; the code is the same.)
        with pytest.raises(
            (fl.FlightUnauthenticatedError, OSError), match="unauthenticated error.*authenticate first"
        ):
            attempt()
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid credentials"):
        c.authenticate_basic_token("alice", "wrong")
    assert len(handler.calls) == before  # the handler never ran


def test_calls_this_endpoint_does_not_offer_answer_unimplemented(
    served: tuple[FlightTransport, Scripted], client: Any
) -> None:
    transport, _ = served
    c, options = client
    with pytest.raises(
        pa.ArrowNotImplementedError, match="ListFlights is not part of this Flight SQL endpoint"
    ):
        list(c.list_flights(options=options))
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
        for method in ("PollFlightInfo", "DoExchange"):
            rpc = (channel.unary_unary if method == "PollFlightInfo" else channel.stream_stream)(
                f"/{SERVICE}/{method}"
            )
            arg = b"" if method == "PollFlightInfo" else iter([b""])
            with pytest.raises(grpc.RpcError) as raw:
                result = rpc(arg, metadata=bearer(transport))
                if method == "DoExchange":
                    list(result)
            assert raw.value.code() == grpc.StatusCode.UNIMPLEMENTED and method in raw.value.details()


def test_malformed_requests_answer_invalid_argument(served: tuple[FlightTransport, Scripted]) -> None:
    transport, _ = served
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
        for method in ("GetFlightInfo", "GetSchema"):
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary(f"/{SERVICE}/{method}")(b"\xff\xff\xff\xff", metadata=bearer(transport))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed FlightDescriptor" in err.value.details()


def test_a_message_beyond_the_receive_cap_is_refused_before_it_is_buffered(
    served: tuple[FlightTransport, Scripted],
) -> None:
    transport, handler = served
    before = len(handler.calls)
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
        huge = fl.FlightDescriptor.for_command(b"x" * (2 << 20)).serialize()
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(f"/{SERVICE}/GetFlightInfo")(huge, metadata=bearer(transport))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(handler.calls) == before


def test_standard_health_service_shares_the_port(served: tuple[FlightTransport, Scripted]) -> None:
    transport, _ = served
    with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        transport.set_serving(False)  # draining
        try:
            assert (
                stub.Check(health_pb2.HealthCheckRequest()).status
                == health_pb2.HealthCheckResponse.NOT_SERVING
            )
        finally:
            transport.set_serving(True)
        transport.health.ready = lambda: False  # e.g. the catalog snapshot is not loaded
        try:
            assert (
                stub.Check(health_pb2.HealthCheckRequest(service=SERVICE)).status
                == health_pb2.HealthCheckResponse.NOT_SERVING
            )
        finally:
            transport.health.ready = lambda: True
        assert stub.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_busy_port_is_a_typed_error(served: tuple[FlightTransport, Scripted]) -> None:
    transport, handler = served
    auth = alice_auth(Sealer(None))
    with pytest.raises(errors.ServiceUnavailable, match=f"cannot listen on 127.0.0.1:{transport.port}"):
        FlightTransport(
            handler,
            auth,
            host="127.0.0.1",
            port=transport.port,
            tls=None,
            worker_threads=4,
            max_receive_bytes=1 << 20,
            max_put_bytes=1 << 10,
        )
    with pytest.raises(errors.ServiceUnavailable, match="cannot listen on 203.0.113.7:0"):
        FlightTransport(
            handler,
            auth,
            host="203.0.113.7",
            port=0,
            tls=None,
            worker_threads=4,
            max_receive_bytes=1 << 20,
            max_put_bytes=1 << 10,
        )


def test_rpcs_beyond_the_worker_threads_are_refused_not_queued() -> None:
    """Two threads, two streams held open by the handler: the third call is RESOURCE_EXHAUSTED at
    once, and calls are served again once the streams end."""
    import threading

    from lake_platform_tests.flight.conftest import wait_until

    release = threading.Event()
    started = threading.Semaphore(0)

    class Holding(Scripted):
        def do_get(self, call: Call, ticket: fl.Ticket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
            def held() -> Iterator[pa.RecordBatch]:
                yield DICTS.to_batches()[0]
                started.release()
                release.wait(30)

            return DICTS.schema, held()

    sealer = Sealer(None)
    small = FlightTransport(
        Holding(),
        alice_auth(sealer),
        host="127.0.0.1",
        port=0,
        tls=None,
        worker_threads=2,
        max_receive_bytes=1 << 20,
        max_put_bytes=1 << 10,
    )
    small.start()
    try:
        headers = [(b"authorization", f"Bearer {sealer.bearer(ALICE, 60)}".encode())]
        options = fl.FlightCallOptions(headers=headers)
        client = fl.connect(f"grpc://127.0.0.1:{small.port}")
        streams = [client.do_get(fl.Ticket(b"t"), options) for _ in range(2)]
        for stream in streams:
            stream.read_chunk()
        assert started.acquire(timeout=10) and started.acquire(timeout=10)
        with grpc.insecure_channel(f"127.0.0.1:{small.port}") as channel:
            get_info = channel.unary_unary(f"/{SERVICE}/GetFlightInfo")
            request = fl.FlightDescriptor.for_command(b"x").serialize()
            metadata = [(k.decode(), v.decode()) for k, v in headers]
            with pytest.raises(grpc.RpcError) as err:
                get_info(request, metadata=metadata, timeout=10)  # queued instead: DEADLINE_EXCEEDED
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            release.set()
            for stream in streams:
                stream.read_all()

            def served_again() -> bool:
                # (gRPC frees a slot just after the client has read the end of a stream.)
                return fl.FlightInfo.deserialize(get_info(request, metadata=metadata)).schema.equals(
                    DICTS.schema
                )

            assert wait_until(served_again)
    finally:
        release.set()
        small.stop(grace=0)

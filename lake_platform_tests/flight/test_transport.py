"""The grpcio Flight transport on its own: a real server on a free loopback port with a scripted
handler, real pyarrow and grpcio clients. Credentials on every call, the shared-port health
service, dictionary columns streamed intact, limits on messages and worker threads, and the calls
this endpoint does not offer. Exact status codes: test_transport_errors.py; FlightData framing on
its own: test_framing.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lake_platform import errors
from lake_platform.auth.tokens import Sealer
from lake_platform.flight.transport import SERVICE, Call, FlightTransport
from lake_platform_tests.flight.scripted import (
    ALICE,
    DICTS,
    Scripted,
    alice_auth,
    bearer,
    loopback_transport,
    scripted_client,
    scripted_transport,
)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FlightTransport, Scripted]]:
    with scripted_transport() as served:
        yield served


@pytest.fixture
def client(
    served: tuple[FlightTransport, Scripted],
) -> Iterator[tuple[fl.FlightClient, fl.FlightCallOptions]]:
    with scripted_client(*served) as client:
        yield client


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
        loopback_transport(
            handler, auth, host="127.0.0.1", port=transport.port, worker_threads=4, max_put_bytes=1 << 10
        )
    with pytest.raises(errors.ServiceUnavailable, match="cannot listen on 203.0.113.7:0"):
        loopback_transport(handler, auth, host="203.0.113.7", port=0, worker_threads=4, max_put_bytes=1 << 10)


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
    small = loopback_transport(Holding(), alice_auth(sealer), worker_threads=2, max_put_bytes=1 << 10)
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

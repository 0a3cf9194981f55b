"""The grpcio Flight transport's errors: every platform error reaches a gRPC client with its exact
status code and message, also raised mid-stream; a bug or a Lance panic answers INTERNAL without
a traceback and ends the call."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform import errors
from lake_platform.errors import LakeError
from lake_platform.flight import proto
from lake_platform.flight.errors import status_of
from lake_platform.flight.transport import SERVICE, FlightTransport
from lake_platform_tests.engine.helpers import lance_panic
from lake_platform_tests.flight.scripted import DICTS, Scripted, bearer, scripted_client, scripted_transport


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FlightTransport, Scripted]]:
    with scripted_transport() as served:
        yield served


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


def test_a_bug_answers_internal_without_a_traceback(served: tuple[FlightTransport, Scripted]) -> None:
    _, handler = served
    with scripted_client(*served) as (c, options):
        handler.fail = ZeroDivisionError("secret detail at /srv/lake/x.py")
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


def test_a_client_that_cancels_its_doput_midway_is_no_server_error(
    served: tuple[FlightTransport, Scripted],
) -> None:
    """Reading the rest of a DoPut whose client cancelled raises grpcio's RpcError (raised here
    by the handler, as grpcio's request iterator does then): a cancellation, not a bug to log
    with its traceback as an unexpected error."""
    transport, handler = served
    records: list[logging.LogRecord] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    def reading(call: Any, descriptor: fl.FlightDescriptor, batches: Iterator[pa.RecordBatch]) -> bytes:
        raise grpc.RpcError()

    first = proto.FlightData(flight_descriptor=fl.FlightDescriptor.for_command(b"x").serialize())
    recorder = Recorder(logging.INFO)
    watched = [logging.getLogger(f"lake_platform.flight.{name}") for name in ("errors", "transport")]
    levels = [logger.level for logger in watched]
    original, handler.do_put = handler.do_put, reading  # type: ignore[method-assign]
    for logger in watched:
        logger.addHandler(recorder)
        logger.setLevel(logging.INFO)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{transport.port}") as channel:
            responses = channel.stream_stream(f"/{SERVICE}/DoPut")(
                iter([first.SerializeToString()]), metadata=bearer(transport), timeout=60
            )
            with pytest.raises(grpc.RpcError) as err:
                list(responses)
    finally:
        handler.do_put = original  # type: ignore[method-assign]
        for logger, level in zip(watched, levels, strict=True):
            logger.removeHandler(recorder)
            logger.setLevel(level)
    assert err.value.code() == grpc.StatusCode.CANCELLED
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in records] == [
        (logging.INFO, "DoPut: the client cancelled the call before its stream ended", None)
    ]

"""``grpc_status.end_with_status`` against the installed grpcio: the guard for the one piece of
grpcio's private API the endpoint uses. If a grpcio upgrade moves or changes it, this fails
(the time limit would answer CANCELLED instead of DEADLINE_EXCEEDED)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from lake_platform.flight.grpc_status import end_with_status

METHOD = "/test.Stalled/Stream"


class Stalled:
    """A streaming handler that sends one message, then blocks where no exception reaches it
    (as a DoGet blocked in a send to a client that stopped reading) until its call ends."""

    def __init__(self) -> None:
        self.context: grpc.ServicerContext | None = None
        self.sent_first = threading.Event()
        self.finished = threading.Event()

    def __call__(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self.context = context
        yield b"first"
        self.sent_first.set()
        done = threading.Event()
        context.add_callback(done.set)
        done.wait(60)
        self.finished.set()


@pytest.fixture
def stalled() -> Iterator[tuple[Stalled, str]]:
    handler = Stalled()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rpc = grpc.unary_stream_rpc_method_handler(handler)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Stalled", {"Stream": rpc}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield handler, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED], ids=lambda c: c.name
)
def test_another_thread_ends_a_running_call_with_the_exact_status(
    stalled: tuple[Stalled, str], code: grpc.StatusCode
) -> None:
    handler, address = stalled
    with grpc.insecure_channel(address) as channel:
        replies: Any = channel.unary_stream(METHOD)(b"", timeout=60)
        assert next(replies) == b"first"
        assert handler.sent_first.wait(30) and handler.context is not None
        threading.Thread(
            target=end_with_status, args=(handler.context, code, "stopped by the server")
        ).start()
        with pytest.raises(grpc.RpcError) as err:
            next(replies)
    assert err.value.code() == code  # not CANCELLED, what grpcio's public cancel() answers
    assert err.value.details() == "stopped by the server"
    assert handler.finished.wait(30)  # the call ended on the server too: its callbacks ran

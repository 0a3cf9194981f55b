"""A Flight gRPC proxy on loopback that passes every call through unchanged but drops the
``set-cookie`` header of chosen SetSessionOptions answers: what ADBC's cookie middleware
(arrow-go) does on its own, now and then, under load. It delivers a streaming call's headers only
when it sees the stream end first; when the cancellation of the stream's context, which gRPC
signals as the stream ends, wins that race, the headers are never read, the cookie is lost, and
the session defaults it carried with it (4 of 1,500 connects on a loaded 2-core machine).

The proxy forwards raw bytes (no serializers), so it knows nothing of Flight but the method
names: which are streams, and DoAction bodies carrying a SetSessionOptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc

_SERVICE = "/arrow.flight.protocol.FlightService/"
#: Flight's RPCs by whether the client and the server stream.
_KINDS = {
    "Handshake": (True, True),
    "ListFlights": (False, True),
    "GetFlightInfo": (False, False),
    "PollFlightInfo": (False, False),
    "GetSchema": (False, False),
    "DoGet": (False, True),
    "DoPut": (True, True),
    "DoExchange": (True, True),
    "DoAction": (False, True),
    "ListActions": (False, True),
}


class CookieDroppingProxy(grpc.GenericRpcHandler):
    """Drops ``set-cookie`` from the SetSessionOptions answers whose ordinals (1-based, counted
    over the proxy's life) are in ``drop``; everything else goes through as it came."""

    def __init__(self, upstream: grpc.Channel, drop: set[int]) -> None:
        self.upstream = upstream
        self.drop = drop
        self.session_sets = 0
        self.dropped = 0

    def service(self, details: Any) -> grpc.RpcMethodHandler | None:
        method = details.method
        if not method.startswith(_SERVICE) or method[len(_SERVICE) :] not in _KINDS:
            return None
        client_streams, server_streams = _KINDS[method[len(_SERVICE) :]]
        forward = {
            (False, False): self.upstream.unary_unary,
            (False, True): self.upstream.unary_stream,
            (True, True): self.upstream.stream_stream,
        }[(client_streams, server_streams)](method)

        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":")]
            if not server_streams:
                response, call = forward.with_call(request, metadata=metadata)
                context.send_initial_metadata(call.initial_metadata())
                context.set_trailing_metadata(call.trailing_metadata())
                return response
            return self._stream(forward(request, metadata=metadata), request, method, context)

        if client_streams:
            return grpc.stream_stream_rpc_method_handler(handle)
        if server_streams:
            return grpc.unary_stream_rpc_method_handler(handle)
        return grpc.unary_unary_rpc_method_handler(handle)

    def _stream(self, call: Any, request: Any, method: str, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            headers = list(call.initial_metadata())
            if method.endswith("/DoAction") and b"SetSessionOptions" in bytes(request)[:64]:
                self.session_sets += 1
                if self.session_sets in self.drop:
                    self.dropped += 1
                    headers = [(k, v) for k, v in headers if k != "set-cookie"]
            context.send_initial_metadata(headers)
            yield from call
            context.set_trailing_metadata(call.trailing_metadata())
        except grpc.RpcError as error:
            context.abort(error.code(), error.details())


@contextmanager
def cookie_dropping_proxy(port: int, drop: set[int]) -> Iterator[tuple[int, CookieDroppingProxy]]:
    """A proxy in front of the Flight endpoint on ``port``: its own port and the proxy."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    proxy = CookieDroppingProxy(channel, drop)
    server = grpc.server(futures.ThreadPoolExecutor(4), handlers=[proxy])
    own = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield own, proxy
    finally:
        server.stop(grace=None)
        channel.close()

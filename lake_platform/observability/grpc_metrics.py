"""A gRPC server interceptor observing every Flight RPC: request id and identity for log lines
(``context``), count and errors by RPC and status code, latency (streams: until their last
message), and one access-log line per RPC. The health service is not observed (probes would
drown the figures)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from lake_platform.observability import context
from lake_platform.observability.logs import log_request
from lake_platform.observability.metrics import observe_request

_FLIGHT = "/arrow.flight.protocol.FlightService/"


class ObservingInterceptor(grpc.ServerInterceptor):
    def __init__(self, surface: str = "flight") -> None:
        self.surface = surface

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or not details.method.startswith(_FLIGHT):
            return handler
        method = details.method[len(_FLIGHT) :]
        # Rebuilt with grpcio's public constructors, keeping the handler's (de)serializers.
        codec = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary, method), **codec)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, method), **codec
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(handler.stream_stream, method), **codec
            )
        return handler  # stream_unary: Flight has none

    def _finish(self, info: context.RequestInfo, code: str, started: float) -> None:
        seconds = time.perf_counter() - started
        observe_request(self.surface, info.method, code, seconds)
        log_request(info, code, seconds)

    def _unary(self, behavior: Callable[[Any, Any], Any], method: str) -> Callable[[Any, Any], Any]:
        def wrapped(request: Any, ctx: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            info, token = context.begin(self.surface, method)
            code = "OK"
            try:
                return behavior(request, ctx)
            except BaseException:
                code = _code(ctx, "UNKNOWN")
                raise
            finally:
                context.end(token)
                self._finish(info, code, started)

        return wrapped

    def _streaming(self, behavior: Callable[[Any, Any], Any], method: str) -> Callable[[Any, Any], Any]:
        def wrapped(request: Any, ctx: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            info, token = context.begin(self.surface, method)
            try:
                replies = behavior(request, ctx)
            except BaseException:
                context.end(token)
                self._finish(info, _code(ctx, "UNKNOWN"), started)
                raise
            context.end(token)
            return self._watch(replies, ctx, info, started)

        return wrapped

    def _watch(
        self, replies: Iterator[Any], ctx: Any, info: context.RequestInfo, started: float
    ) -> Iterator[Any]:
        code = "OK"
        try:
            yield from replies
        except GeneratorExit:
            # gRPC closed the stream: the client went away, or the server ended the call.
            code = _code(ctx, "CANCELLED")
            raise
        except BaseException:
            code = _code(ctx, "UNKNOWN")
            raise
        finally:
            self._finish(info, code, started)


def _code(ctx: Any, default: str) -> str:
    try:
        code = ctx.code()
    except Exception:  # noqa: BLE001 - an older grpcio without ServicerContext.code()
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    return default

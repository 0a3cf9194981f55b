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
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(handler.unary_unary, method))
        for kind in ("unary_stream", "stream_stream"):
            behavior = getattr(handler, kind)
            if behavior is None:
                continue
            if getattr(behavior, "experimental_non_blocking", False):
                return handler._replace(**{kind: self._sending(behavior, method)})
            return handler._replace(**{kind: self._streaming(behavior, method)})
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

    def _sending(self, behavior: Callable[..., bool | None], method: str) -> _ObservedSending:
        return _ObservedSending(self, behavior, method)

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


class _ObservedSending:
    """An observed behavior that sends its own replies (``transport.StreamSender``): the RPC is
    done when it returns, its last reply and status on their way, or False when the client went
    away first (a status sent, then the client closing its end, is still OK)."""

    experimental_non_blocking = True

    def __init__(
        self, interceptor: ObservingInterceptor, behavior: Callable[..., bool | None], method: str
    ) -> None:
        self.interceptor, self.behavior, self.method = interceptor, behavior, method

    def __call__(self, request: Any, ctx: grpc.ServicerContext, send: Callable[[Any], None]) -> bool | None:
        started = time.perf_counter()
        info, token = context.begin(self.interceptor.surface, self.method)
        code = "OK"
        try:
            finished = self.behavior(request, ctx, send)
            if finished is False:  # gone before the status was sent
                code = _code(ctx, "CANCELLED")
            return finished
        except BaseException:
            code = _code(ctx, "UNKNOWN")
            raise
        finally:
            context.end(token)
            self.interceptor._finish(info, code, started)  # noqa: SLF001 - its own helper


def _code(ctx: Any, default: str) -> str:
    try:
        code = ctx.code()
    except Exception:  # noqa: BLE001 - an older grpcio without ServicerContext.code()
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    return default

"""Flight's gRPC service served by grpcio: the wire layer of the endpoint.

Why not pyarrow's ``FlightServerBase``: its server can only answer the statuses its exception
classes name, so FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ABORTED and ALREADY_EXISTS cannot
reach a client, and nothing else can listen on its port. Serving ``arrow.flight.protocol
.FlightService`` through grpcio answers every error with the exact code its
:class:`~lake_platform.errors.LakeError` names, and shares the port with the standard
``grpc.health.v1.Health`` service that load balancers and Kubernetes probe.

Messages stay in their wire form: requests are parsed with pyarrow's own ``deserialize``
(FlightDescriptor, Ticket, Action), replies built with its ``serialize``; a result's record
batches become ``FlightData`` messages in ``framing``. Only grpcio's public API is used, save
one piece it lacks, kept in ``grpc_status``: ending a call from another thread with an exact
status (the time limit's DEADLINE_EXCEEDED).

This module knows nothing of SQL: it authenticates each call (:func:`authenticate_call`), hands
the decoded request and a :class:`Call` to the :class:`FlightHandler`, and turns replies and
errors into gRPC.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import grpc
import pyarrow as pa
import pyarrow.flight as fl
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lake_platform.auth.service import AuthService, authenticate_call
from lake_platform.auth.tokens import Identity
from lake_platform.engine.panics import is_error
from lake_platform.errors import ServiceUnavailable, Unsupported
from lake_platform.flight import proto
from lake_platform.flight.errors import status_of
from lake_platform.flight.framing import decode_put, encode_stream, parse_message
from lake_platform.flight.grpc_status import end_with_status
from lake_platform.observability import context as request_context
from lake_platform.query.errors import QueryCancelled

log = logging.getLogger(__name__)

SERVICE = "arrow.flight.protocol.FlightService"


@dataclass(frozen=True)
class Call:
    """What the endpoint's logic sees of one RPC: who called, and whether the call is still alive."""

    identity: Identity
    _context: Any = None

    def is_cancelled(self) -> bool:
        """The client cancelled, its deadline passed, or the connection dropped."""
        return self._context is not None and not self._context.is_active()

    def end(self, exc: BaseException) -> None:
        """End the RPC now with ``exc``'s status, from any thread.

        For limits the server keeps on its own clock: a result stream must end even while the
        handler's thread is blocked in gRPC's send to a client that stopped reading, where no
        exception can reach it (``grpc_status``: the client sees the status given)."""
        if self._context is None:
            return
        code, message = status_of(exc)
        end_with_status(self._context, code, message)

    def header(self, name: str) -> str | None:
        """The value of a call header (the first one of that name), if the client sent it."""
        if self._context is None:
            return None
        for key, value in self._context.invocation_metadata() or ():
            if key == name:
                return value if isinstance(value, str) else None
        return None

    def send_header(self, name: str, value: str) -> None:
        """Send a response header (gRPC initial metadata), before the call's first message:
        once per call (a session's ``set-cookie``)."""
        if self._context is not None:
            self._context.send_initial_metadata(((name, value),))

    def on_done(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` when the RPC ends, however it ends: once its status is sent, on
        gRPC's own thread (so it must be quick). False: it will not be run (no RPC, or the RPC
        has ended already)."""
        return self._context is not None and bool(self._context.add_callback(callback))


class FlightHandler(Protocol):
    """The endpoint's logic, one method per Flight RPC (see ``server.FlightSqlServer``)."""

    def get_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> fl.FlightInfo: ...

    def get_schema(self, call: Call, descriptor: fl.FlightDescriptor) -> pa.Schema: ...

    def poll_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> bytes: ...

    def do_get(self, call: Call, ticket: fl.Ticket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]: ...

    def do_put(
        self, call: Call, descriptor: fl.FlightDescriptor, batches: Iterator[pa.RecordBatch]
    ) -> bytes: ...

    def do_action(self, call: Call, action: fl.Action) -> list[bytes]: ...

    def list_actions(self) -> list[tuple[str, str]]: ...


class FlightTransport:
    """One grpcio server: the Flight service and the standard health service on one port."""

    def __init__(
        self,
        handler: FlightHandler,
        auth: AuthService,
        *,
        host: str,
        port: int,
        tls: tuple[bytes, bytes] | None,
        worker_threads: int,
        max_receive_bytes: int,
        max_put_bytes: int,
        ready: Callable[[], bool] = lambda: True,
        interceptors: tuple[grpc.ServerInterceptor, ...] = (),
    ) -> None:
        """``tls``: (certificate chain, private key) in PEM. ``worker_threads`` bounds the RPCs in
        flight: grpcio refuses the next one with RESOURCE_EXHAUSTED instead of queueing it.
        ``ready``: whether calls can be served now (the health service's SERVING)."""
        self.handler = handler
        self.auth = auth
        self.max_put_bytes = max_put_bytes
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=worker_threads, thread_name_prefix="lake-flight"),
            maximum_concurrent_rpcs=worker_threads,
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_receive_bytes),
                ("grpc.max_send_message_length", -1),
                # Without this a second server on a busy port binds too and shares its traffic.
                ("grpc.so_reuseport", 0),
            ],
        )
        self._server.add_generic_rpc_handlers((self._flight_handlers(),))
        self.health = _Health(ready)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if tls is not None:
                cert, key = tls
                self.port = self._server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
            else:
                self.port = self._server.add_insecure_port(address)
        except RuntimeError:  # grpcio's "Failed to bind": in use, or not an address of this host
            self._server.stop(None)
            raise ServiceUnavailable(
                f"cannot listen on {address}: the port is in use or the address is not "
                "this machine's (LAKE_FLIGHT_HOST, LAKE_FLIGHT_PORT)"
            ) from None

    def start(self) -> None:
        self._server.start()

    def set_serving(self, serving: bool) -> None:
        """Announce (to health watchers) that the server takes calls, or is draining."""
        self.health.serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", SERVICE):
            self.health.set(service, status)

    def stop(self, grace: float | None) -> None:
        """Refuse new RPCs; cancel those still running after ``grace`` seconds."""
        self._server.stop(grace).wait()

    # == dispatch ===============================================================================

    def _flight_handlers(self) -> grpc.GenericRpcHandler:
        # No (de)serializers: handlers see and return the raw message bytes.
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Handshake": grpc.stream_stream_rpc_method_handler(self._handshake),
                "ListFlights": grpc.unary_stream_rpc_method_handler(self._unimplemented("ListFlights")),
                "GetFlightInfo": grpc.unary_unary_rpc_method_handler(self._get_flight_info),
                "PollFlightInfo": grpc.unary_unary_rpc_method_handler(self._poll_flight_info),
                "GetSchema": grpc.unary_unary_rpc_method_handler(self._get_schema),
                "DoGet": grpc.unary_stream_rpc_method_handler(self._do_get),
                "DoPut": grpc.stream_stream_rpc_method_handler(self._do_put),
                "DoExchange": grpc.stream_stream_rpc_method_handler(self._unimplemented("DoExchange")),
                "DoAction": grpc.unary_stream_rpc_method_handler(self._do_action),
                "ListActions": grpc.unary_stream_rpc_method_handler(self._list_actions),
            },
        )

    def _call(self, context: grpc.ServicerContext) -> Call:
        identity, _ = authenticate_call(self.auth, context.invocation_metadata(), handshake=False)
        request_context.identify(identity.name, identity.project)
        return Call(identity, context)

    def _handshake(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            identity, token = authenticate_call(self.auth, context.invocation_metadata(), handshake=True)
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        request_context.identify(identity.name, identity.project)
        # The Bearer travels in the response headers; the Handshake payload carries nothing.
        context.send_initial_metadata((("authorization", f"Bearer {token}"),))
        return iter(())

    def _get_flight_info(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            call = self._call(context)
            descriptor = parse_message(fl.FlightDescriptor, request)
            return self.handler.get_flight_info(call, descriptor).serialize()
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)

    def _poll_flight_info(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            call = self._call(context)
            poll = getattr(self.handler, "poll_flight_info", None)
            if poll is None:
                raise Unsupported("PollFlightInfo is not part of this Flight SQL endpoint")
            return poll(call, parse_message(fl.FlightDescriptor, request))
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)

    def _get_schema(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            call = self._call(context)
            descriptor = parse_message(fl.FlightDescriptor, request)
            return fl.SchemaResult(self.handler.get_schema(call, descriptor)).serialize()
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)

    def _do_get(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            call = self._call(context)
            schema, batches = self.handler.do_get(call, parse_message(fl.Ticket, request))
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return self._stream(context, schema, batches)

    def _stream(
        self, context: grpc.ServicerContext, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> Iterator[bytes]:
        # Each message is produced on the handler's thread, then sent. Reading ahead on a
        # thread of its own (as the data plane does) gained no wall time on a 5M-row SELECT *
        # here and cost 17 % more server CPU (bench/flight.py --scan-only).
        try:
            yield from encode_stream(schema, batches)
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:  # here, where it ran, also when gRPC drops the stream early
                close()

    def _do_put(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            call = self._call(context)
            descriptor, batches = decode_put(requests, self.max_put_bytes)
            metadata = self.handler.do_put(call, descriptor, batches)
        except grpc.RpcError:
            # Reading the client's stream after it cancelled: nobody waits for an answer, and
            # nothing went wrong here (not an unexpected error with its traceback).
            log.info("DoPut: the client cancelled the call before its stream ended")
            _abort(context, QueryCancelled("the client cancelled the call"))
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return iter((proto.PutResult(app_metadata=metadata).SerializeToString(),))

    def _do_action(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            call = self._call(context)
            results = self.handler.do_action(call, parse_message(fl.Action, request))
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return iter([fl.Result(pa.py_buffer(body)).serialize() for body in results])

    def _list_actions(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            self._call(context)
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return iter(
            [
                proto.ActionType(type=kind, description=text).SerializeToString()
                for kind, text in self.handler.list_actions()
            ]
        )

    def _unimplemented(self, method: str) -> Callable[..., Any]:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                self._call(context)
                raise Unsupported(f"{method} is not part of this Flight SQL endpoint")
            except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
                _abort(context, exc)

        return handler


class _Health(health.HealthServicer):
    """``grpc.health.v1.Health`` for the whole server ("") and the Flight service: SERVING while
    the server takes calls and ``ready()`` holds (the catalog snapshot is loaded and fresh
    enough), so a probe's answer matches what a query would get."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__()
        self.ready = ready
        self.serving = False

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service in ("", SERVICE):
            ok = self.serving and self.ready()
            return health_pb2.HealthCheckResponse(
                status=health_pb2.HealthCheckResponse.SERVING
                if ok
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
        return super().Check(request, context)


def _abort(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    """End the call with ``exc``'s status. A Lance panic (pyo3's PanicException, a BaseException)
    is answered as any bug is, INTERNAL: grpcio's worker handles only ``Exception``, and a call a
    BaseException leaves is never ended (the client waits for ever). Any other BaseException
    (GeneratorExit, an interrupt) goes on as it came."""
    if not is_error(exc):
        raise exc
    code, message = status_of(exc)
    context.abort(code, message)
    raise AssertionError("grpc's abort returned")  # it raises; this keeps the type honest


__all__ = ["Call", "FlightHandler", "FlightTransport"]

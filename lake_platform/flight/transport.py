"""Flight's gRPC service served by grpcio: the wire layer of the endpoint.

Why not pyarrow's ``FlightServerBase``: its server can only answer the statuses its exception
classes name, so FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ABORTED and ALREADY_EXISTS cannot
reach a client, and nothing else can listen on its port. Serving ``arrow.flight.protocol
.FlightService`` through grpcio answers every error with the exact code its
:class:`~lake_platform.errors.LakeError` names, and shares the port with the standard
``grpc.health.v1.Health`` service that load balancers and Kubernetes probe.

Messages stay in their wire form: requests are parsed with pyarrow's own ``deserialize``
(FlightDescriptor, Ticket, Action), replies built with its ``serialize``, and the data plane
(``FlightData``) is framed by hand around the IPC message pyarrow serializes (``framing``), so a
record batch is copied into the reply once and never passes through protobuf objects.

This module knows nothing of SQL: it authenticates each call (:func:`authenticate_call`), hands
the decoded request and a :class:`Call` to the :class:`FlightHandler`, and turns replies and
errors into gRPC.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
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
from lake_platform.flight.last import Last
from lake_platform.flight.threads import DaemonPool
from lake_platform.observability import context as request_context

log = logging.getLogger(__name__)

SERVICE = "arrow.flight.protocol.FlightService"

#: Encoded messages a result stream prepares ahead of gRPC's send (each at most
#: LAKE_FLIGHT_MAX_MESSAGE_BYTES; typically one Lance batch of 8192 rows).
READ_AHEAD = 2
#: Messages a result stream sends before it starts reading ahead on a thread of its own: the
#: schema and two batches, so a point query's whole stream (schema, batch, end) needs none.
SYNC_MESSAGES = 3


@dataclass(frozen=True)
class Call:
    """What the endpoint's logic sees of one RPC: who called, and whether the call is still alive."""

    identity: Identity
    _context: Any = None

    #: A result stream's ``last.Last`` item is sent with the status (``StreamSender``).
    takes_last = True

    def is_cancelled(self) -> bool:
        """The client cancelled, its deadline passed, or the connection dropped."""
        return self._context is not None and not self._context.is_active()

    def end(self, exc: BaseException) -> None:
        """End the RPC now with ``exc``'s status, from any thread.

        For limits the server keeps on its own clock: a result stream must end even while the
        handler's thread is blocked in gRPC's send to a client that stopped reading, where no
        exception can reach it. grpcio's public ``cancel()`` would answer CANCELLED; the call
        below it sends the status given (and the client sees it, not a reset stream)."""
        if self._context is None:
            return
        code, message = status_of(exc)
        try:
            self._context._rpc_event.call.cancel(code.value[0], message)  # noqa: SLF001 - see above
        except Exception:  # noqa: BLE001 - another grpcio: cancelled is still ended
            self._context.cancel()

    def header(self, name: str) -> str | None:
        """The value of a call header (the first one of that name), if the client sent it."""
        if self._context is None:
            return None
        for key, value in self._context.invocation_metadata() or ():
            if key == name:
                return value if isinstance(value, str) else None
        return None

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
        # No (de)serializers: handlers see and return the raw message bytes. Replies known in
        # full go out through ``ReplySender`` (the last one with the status).
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Handshake": grpc.stream_stream_rpc_method_handler(ReplySender(self._handshake)),
                "ListFlights": grpc.unary_stream_rpc_method_handler(self._unimplemented("ListFlights")),
                "GetFlightInfo": grpc.unary_unary_rpc_method_handler(self._get_flight_info),
                "PollFlightInfo": grpc.unary_unary_rpc_method_handler(self._poll_flight_info),
                "GetSchema": grpc.unary_unary_rpc_method_handler(self._get_schema),
                "DoGet": grpc.unary_stream_rpc_method_handler(StreamSender(self._do_get)),
                "DoPut": grpc.stream_stream_rpc_method_handler(ReplySender(self._do_put)),
                "DoExchange": grpc.stream_stream_rpc_method_handler(self._unimplemented("DoExchange")),
                "DoAction": grpc.unary_stream_rpc_method_handler(ReplySender(self._do_action)),
                "ListActions": grpc.unary_stream_rpc_method_handler(ReplySender(self._list_actions)),
            },
        )

    def _call(self, context: grpc.ServicerContext) -> Call:
        identity, _ = authenticate_call(self.auth, context.invocation_metadata(), handshake=False)
        request_context.identify(identity.name, identity.project)
        return Call(identity, context)

    def _handshake(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Sequence[bytes]:
        try:
            identity, token = authenticate_call(self.auth, context.invocation_metadata(), handshake=True)
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        request_context.identify(identity.name, identity.project)
        # The Bearer travels in the response headers; the Handshake payload carries nothing.
        context.send_initial_metadata((("authorization", f"Bearer {token}"),))
        return ()

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

    def _do_get(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes | Last[bytes]]:
        try:
            call = self._call(context)
            schema, batches = self.handler.do_get(call, parse_message(fl.Ticket, request))
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return self._stream(context, schema, batches)

    def _stream(
        self, context: grpc.ServicerContext, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> Iterator[bytes | Last[bytes]]:
        try:
            yield from read_ahead(
                encode_stream(schema, batches), READ_AHEAD, also_close=batches, first=SYNC_MESSAGES
            )
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)

    def _do_put(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Sequence[bytes]:
        try:
            call = self._call(context)
            descriptor, batches = decode_put(requests, self.max_put_bytes)
            metadata = self.handler.do_put(call, descriptor, batches)
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return (proto.PutResult(app_metadata=metadata).SerializeToString(),)

    def _do_action(self, request: bytes, context: grpc.ServicerContext) -> Sequence[bytes]:
        try:
            call = self._call(context)
            results = self.handler.do_action(call, parse_message(fl.Action, request))
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return [fl.Result(pa.py_buffer(body)).serialize() for body in results]

    def _list_actions(self, request: bytes, context: grpc.ServicerContext) -> Sequence[bytes]:
        try:
            self._call(context)
        except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
            _abort(context, exc)
        return [
            proto.ActionType(type=kind, description=text).SerializeToString()
            for kind, text in self.handler.list_actions()
        ]

    def _unimplemented(self, method: str) -> Callable[..., Any]:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                self._call(context)
                raise Unsupported(f"{method} is not part of this Flight SQL endpoint")
            except BaseException as exc:  # noqa: BLE001 - a panic too; _abort raises the rest again
                _abort(context, exc)

        return handler


def _status_with_message() -> Callable[[Any, Any, bytes], None] | None:
    """grpcio's own "send this message and the status in one batch", what it does for a unary
    reply (see ``StreamSender``): ``_status(rpc_event, state, serialized_response)``. None in a
    grpcio without it, or where it takes other arguments: the last reply then goes out as the
    others do, and ``test_transport``'s counts of waited sends show the saving lost."""
    try:
        from grpc._server import _status  # noqa: PLC2701 - private: checked below
    except ImportError:
        return None
    try:
        names = list(inspect.signature(_status).parameters)
    except (TypeError, ValueError):
        return None
    return _status if names == ["rpc_event", "state", "serialized_response"] else None


_STATUS_WITH_MESSAGE = _status_with_message()


class StreamSender:
    """DoGet's behavior (and ``ReplySender``'s): sends the stream's messages as grpcio's own
    path does, each waited for, except a message marked ``last.Last``: that one goes out in one
    batch with the status, without waiting (``ReplySender`` says why that wait costs).

    A DoGet stream cannot hold every batch back until it knows the next one: rows a client could
    already have would wait behind a slow batch. So only a producer that knows its last batch
    without asking for the next one marks it (an early start that looked one batch ahead:
    ``Streams._look_past``). Before sending it, the sender still asks for the next item, which
    ends the stream at once: every layer finishes (the time limit's and cancellation's checks,
    the slot's release, the query audit) while the client still waits, as on grpcio's path. If
    that raises, the marked message goes out on its own and the error's status after it, as
    before; if it yields another item after all, the sender carries on as grpcio's path would.

    grpcio calls a behavior with ``experimental_non_blocking`` as ``(request, context, send)``
    and leaves the sending, and the status, to it (it ignores what the behavior returns):
    ``send(message)`` is its blocking send with flow control, ``send(None)`` ends the call with
    its status. An error raised by ``produce`` reaches grpcio as from any behavior (an ``_abort``
    has set the status)."""

    experimental_non_blocking = True

    def __init__(self, produce: Callable[[Any, grpc.ServicerContext], Iterator[bytes | Last[bytes]]]) -> None:
        self.produce = produce

    def __call__(self, request: Any, context: grpc.ServicerContext, send: Callable[[Any], None]) -> bool:
        """False: the client went away (or the call was ended) before the status was sent."""
        replies = self.produce(request, context)
        try:
            pending = next(replies, _END)
            while pending is not _END:
                if isinstance(pending, Last):
                    message = pending.item
                    try:
                        pending = next(replies, _END)
                    except BaseException:
                        send(message)
                        raise
                    if pending is _END and _sent_with_status(context, message):
                        return True
                else:
                    message, pending = pending, None
                send(message)
                if not context.is_active():
                    return False
                if pending is None:
                    pending = next(replies, _END)
            send(None)
            return True
        finally:
            _close(replies)  # where it ran: a query releases its slot here


class ReplySender(StreamSender):
    """A streaming RPC's behavior for replies known in full when the handler returns (DoAction,
    DoPut, ListActions, Handshake): ``StreamSender`` over them with the last one marked, so it
    goes out in one batch with the status.

    grpcio sends each streamed message in a batch of its own and waits for its completion, which
    the thread polling the completion queue reports: two thread hand-offs per message, measured
    at 0.16 ms median a message here (docs/benchmarks.md, "twenty-first round"). The last one
    needs no wait: grpcio's unary path sends a message and the status in one batch (``_status``),
    and on the wire a stream's last message followed by its status is the same either way. So a
    CreatePreparedStatement's or a DoPut's one reply does not wait."""

    def __init__(self, produce: Callable[[Any, grpc.ServicerContext], Sequence[bytes]]) -> None:
        super().__init__(lambda request, context: _last_marked(produce(request, context)))


def _last_marked(replies: Sequence[bytes]) -> Iterator[bytes | Last[bytes]]:
    yield from replies[:-1]
    if replies:
        yield Last(replies[-1])


def _sent_with_status(context: grpc.ServicerContext, message: bytes) -> bool:
    """Send ``message`` and the call's status in one batch (grpcio's unary way). False: this
    grpcio has no means to, and nothing was sent (the message then goes out as any other)."""
    event, state = getattr(context, "_rpc_event", None), getattr(context, "_state", None)
    if _STATUS_WITH_MESSAGE is None or event is None or state is None:
        return False
    _STATUS_WITH_MESSAGE(event, state, message)
    return True


class _Health(health.HealthServicer):
    """``grpc.health.v1.Health`` for the whole server ("") and the Flight service: SERVING while
    the server takes calls and ``ready()`` holds (the catalog snapshot is loaded and fresh
    enough), so a probe's answer matches what a query would get."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__(experimental_non_blocking=True)
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


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def read_ahead(items: Iterator[Any], depth: int, *, also_close: Any = None, first: int = 0) -> Iterator[Any]:
    """``items``, produced on a thread of their own up to ``depth`` ahead of the consumer.

    A result stream is a chain of DataFusion (its own threads), Python glue and encoding, then
    gRPC's send and the client's read. Run in one thread, each batch waits for the previous one
    to leave; here producing the next batch overlaps sending this one. An error in the producer
    is raised to the consumer in order; when the consumer stops early (the client went away), the
    producer stops at its next item and closes ``items`` and ``also_close`` on its own thread (a
    generator must be closed where it runs: that is where a query releases its slot).

    ``first``: that many items are produced on the consumer's thread before the producer
    takes over (on a thread reused across streams), so a small result (a point query: the
    schema, one batch, the end) never pays for the hand-offs; a larger one overlaps from then
    on (it loses the overlap of its first items only)."""
    for _ in range(first):
        try:
            item = next(items)
        except StopIteration:
            _close(items, also_close)
            return
        except BaseException:
            _close(items, also_close)
            raise
        try:
            yield item
        except BaseException:  # the consumer stopped (GeneratorExit): close where it ran
            _close(items, also_close)
            raise
    yield from _threaded(items, depth, also_close)


def _close(*its: Any) -> None:
    for it in its:
        close = getattr(it, "close", None)
        if close is not None:
            close()


#: Read-ahead producers run on reused threads: a thread started per stream cost ~1 ms of a
#: 30 ms aggregate's DoGet (its start, and its stack unmapped when it ended).
_PRODUCERS = DaemonPool("lake-flight-read-ahead")


def _threaded(items: Iterator[Any], depth: int, also_close: Any) -> Iterator[Any]:
    buffer: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Failure(exc))
        finally:
            _close(items, also_close)

    _PRODUCERS.submit(produce)
    try:
        while True:
            item = buffer.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        while True:  # unblock a producer waiting for room
            try:
                buffer.get_nowait()
            except queue.Empty:
                break


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

"""The data plane: DoGet of sealed statement tickets on a C++ Flight server, off the GIL per byte.

The endpoint's gRPC service is grpcio (``transport``): it answers every status exactly and
serves ``grpc.health.v1``, but each DoGet message is framed in Python and handed to grpcio under
the GIL, so one process streams at most one core's worth of results whatever the number of
streams. With ``LAKE_FLIGHT_DATA_LISTEN`` set, a pyarrow.flight (C++) server in the same
process, on its own port, serves DoGet of statement and part tickets (and spooled-segment
tickets): Python hands it one record batch at a time (``GeneratorStream``, produced a few
ahead on a thread of its own); IPC encoding and the gRPC send run in C++ without the GIL, so
streams run in parallel and a single stream costs about what a bare pyarrow server costs.
Every other RPC, the health service and exact status codes stay on the grpcio port;
statement FlightInfos name this server's URI in their endpoints' locations (``endpoints``),
so clients (ADBC, JDBC, pyarrow) connect to it for DoGet.

A DoGet here runs the same checks as on the grpcio port, through the same code
(``FlightSqlServer.do_get``): the Bearer authenticated as on every grpcio call (a middleware
reading ``authorization``), the ticket opened (sealed, not expired, the caller's, the caller's
tenant), pinned planning (no fall-forward), admission, the time limit and cancellation between
batches, the audit record; plus the RPC's metrics and access-log line (surface
``flight-data``).

What the C++ server cannot do, and what it does instead:

- it answers only the statuses pyarrow's exception classes name (UNAUTHENTICATED,
  PERMISSION_DENIED, UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, INTERNAL, UNKNOWN); any other
  Python exception would send its traceback to the client. :func:`flight_error` maps every
  status to the nearest of those (``_NEAREST``); the message keeps the exact status name and
  the platform's error name and code, e.g. ``NOT_FOUND: ... [TableVersionNotFound, code 11]``;
- a stream cannot be ended from outside while it is blocked in the send to a client that stopped
  reading: the time limit ends it at its next batch, and shutdown gives up waiting for such a
  stream after its grace period (the process exit then drops it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.auth.service import AuthService, authenticate_call
from lake_platform.auth.tokens import Identity
from lake_platform.engine.panics import is_error
from lake_platform.errors import InvalidInput, ServiceUnavailable, Unsupported
from lake_platform.flight import proto
from lake_platform.flight.errors import status_of
from lake_platform.flight.read_ahead import read_ahead
from lake_platform.flight.transport import FlightHandler
from lake_platform.observability import context as request_context
from lake_platform.observability.logs import log_request
from lake_platform.observability.metrics import observe_request

log = logging.getLogger(__name__)

#: The metrics and access-log surface of DoGet served here.
SURFACE = "flight-data"
_MIDDLEWARE = "lake-auth"
#: Batches produced ahead of the C++ writer, on a thread of their own, while it sends the one
#: before (0: the writer's thread produces each batch when it wants it). Measured with a
#: pyarrow client on a 5M-row scan: 0.36-0.55 s against 0.50-0.80 s without, paired runs under
#: load; ADBC's client, the slower reader, gains less.
READ_AHEAD = 2

#: gRPC status -> the pyarrow exception answering it (the C++ server's own statuses).
_NATIVE: dict[str, type[fl.FlightError]] = {
    "UNAUTHENTICATED": fl.FlightUnauthenticatedError,
    "PERMISSION_DENIED": fl.FlightUnauthorizedError,
    "UNAVAILABLE": fl.FlightUnavailableError,
    "DEADLINE_EXCEEDED": fl.FlightTimedOutError,
    "CANCELLED": fl.FlightCancelledError,
    "INTERNAL": fl.FlightInternalError,
}
#: Statuses the C++ server cannot send, answered with the nearest it can: a client retries
#: UNAVAILABLE (too many queries now, a conflict), so retryable ones map there; the rest are
#: UNKNOWN with the exact status name first in the message.
_NEAREST: dict[str, type[fl.FlightError]] = {
    "RESOURCE_EXHAUSTED": fl.FlightUnavailableError,
    "ABORTED": fl.FlightUnavailableError,
}


def flight_error(exc: BaseException) -> fl.FlightError:
    """The pyarrow exception answering ``exc`` on the data plane (see the module's notes)."""
    return _answer(exc)[1]


def _answer(exc: BaseException) -> tuple[str, fl.FlightError]:
    """(the exact gRPC status name, the pyarrow exception to raise) for ``exc``."""
    code, message = status_of(exc)
    name = code.name
    kind = _NATIVE.get(name)
    if kind is not None:
        return name, kind(message)
    return name, _NEAREST.get(name, fl.FlightServerError)(f"{name}: {message}")


class DataCall:
    """What ``FlightSqlServer.do_get`` and ``Streams`` see of a data-plane DoGet (the grpcio
    ``transport.Call``'s interface)."""

    #: Batches go out as DataFusion makes them: C++ frames each one for little, and merging
    #: them would copy every byte under the GIL (``query.stream``).
    coalesce = False

    def __init__(
        self, identity: Identity, context: fl.ServerCallContext, headers: dict[str, list[str]]
    ) -> None:
        self.identity = identity
        self._context = context
        self._headers = headers
        self._ended = threading.Event()
        self._done: list[Callable[[], None]] = []

    def is_cancelled(self) -> bool:
        """The client cancelled or went away, or the server ended the call (:meth:`end`)."""
        return self._ended.is_set() or self._context.is_cancelled()

    def end(self, exc: BaseException) -> None:
        """End the call at its next batch (the C++ server has no way to end it sooner); the
        stream's owner raises the reason (``Streams``: the time limit)."""
        self._ended.set()

    def header(self, name: str) -> str | None:
        values = self._headers.get(name)
        return values[0] if values and isinstance(values[0], str) else None

    def on_done(self, callback: Callable[[], None]) -> bool:
        self._done.append(callback)
        return True

    def finished(self) -> None:
        for callback in self._done:
            try:
                callback()
            except Exception:  # noqa: BLE001 - one failing callback must not skip the others
                log.exception("a data-plane call's done callback failed")


class _Caller(fl.ServerMiddleware):
    def __init__(self, identity: Identity, headers: dict[str, list[str]]) -> None:
        self.identity = identity
        self.headers = headers


class _Authenticate(fl.ServerMiddlewareFactory):
    """Every call: DoGet only, with a Bearer the grpcio port would accept (same code)."""

    def __init__(self, auth: AuthService) -> None:
        self.auth = auth

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> _Caller:
        try:
            if info.method != fl.FlightMethod.DO_GET:
                raise Unsupported(
                    "this is the data plane: it serves DoGet of statement tickets only; send other calls "
                    "to the Flight SQL endpoint"
                )
            pairs = [(key, value) for key, values in headers.items() for value in values]
            identity, _ = authenticate_call(self.auth, pairs, handshake=False)
        except Exception as exc:  # noqa: BLE001 - answered with its status
            raise flight_error(exc) from None
        text = {
            k: [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in vs]
            for k, vs in headers.items()
        }
        return _Caller(identity, text)


class _Server(fl.FlightServerBase):
    def __init__(self, location: str, plane: DataPlane, tls: tuple[bytes, bytes] | None) -> None:
        certificates = [fl.CertKeyPair(cert=tls[0], key=tls[1])] if tls is not None else []
        super().__init__(
            location,
            tls_certificates=certificates,
            middleware={_MIDDLEWARE: _Authenticate(plane.auth)},
        )
        self._plane = plane

    def do_get(self, context: fl.ServerCallContext, ticket: fl.Ticket) -> fl.FlightDataStream:
        return self._plane.do_get(context, ticket)


class DataPlane:
    """The C++ Flight server serving DoGet for ``handler``. Bound at construction; answers
    UNAVAILABLE until :meth:`start` and after :meth:`stop` begins."""

    def __init__(
        self,
        handler: FlightHandler,
        auth: AuthService,
        *,
        host: str,
        port: int,
        tls: tuple[bytes, bytes] | None,
    ) -> None:
        self.handler = handler
        self.auth = auth
        self._serving = threading.Event()
        scheme = "grpc+tls" if tls is not None else "grpc"
        address = f"{scheme}://{host}:{port}"
        try:
            self._server = _Server(address, self, tls)
        except (pa.ArrowException, OSError) as exc:
            # pyarrow says only "Server did not start properly" (gRPC logs the bind error).
            raise ServiceUnavailable(
                f"cannot start the data plane on {host}:{port}: the port is in use, the address is not this "
                f"machine's, or the TLS files are not a certificate and its key (LAKE_FLIGHT_DATA_LISTEN; "
                f"{type(exc).__name__})"
            ) from None
        self.port = self._server.port

    def start(self) -> None:
        self._serving.set()

    def stop(self, grace: float) -> None:
        """Refuse new calls, then shut the server down (pyarrow's shutdown ends the calls still
        running); waits at most ``grace`` seconds for it, so a stop never hangs on a call."""
        self._serving.clear()
        done = threading.Thread(target=self._server.shutdown, name="lake-flight-data-stop", daemon=True)
        done.start()
        done.join(grace)
        if done.is_alive():
            log.warning("the data plane's shutdown has not finished after %gs; leaving it to the exit", grace)

    # == DoGet ==================================================================================

    def do_get(self, context: fl.ServerCallContext, ticket: fl.Ticket) -> fl.FlightDataStream:
        started = time.perf_counter()
        info, token = request_context.begin(SURFACE, "DoGet")
        call: DataCall | None = None
        try:
            caller = context.get_middleware(_MIDDLEWARE)
            if caller is None:  # the middleware refuses unauthenticated calls: cannot happen
                raise ServiceUnavailable("the data plane is not ready")
            request_context.identify(caller.identity.name, caller.identity.project)
            if not self._serving.is_set():
                raise ServiceUnavailable("the data plane is not serving (starting or stopping); retry")
            name, _ = proto.unpack_command(ticket.ticket)
            if name != "TicketStatementQuery":
                raise InvalidInput(
                    "the data plane serves statement tickets only; send this one to the endpoint"
                )
            call = DataCall(caller.identity, context, caller.headers)
            schema, batches = self.handler.do_get(call, ticket)
        except BaseException as exc:  # noqa: BLE001 - answered with its status, a Lance panic too
            if not is_error(exc):
                raise
            code, failure = _answer(exc)
            _finish(info, code, started)
            if call is not None:
                call.finished()
            raise failure from None
        finally:
            request_context.end(token)
        stream = watched_stream(batches, call, info, started)
        if READ_AHEAD:
            stream = read_ahead(stream, READ_AHEAD, first=1)
        return fl.GeneratorStream(schema, stream)


def watched_stream(
    batches: Iterator[pa.RecordBatch], call: DataCall, info: request_context.RequestInfo, started: float
) -> Iterator[pa.RecordBatch]:
    """``batches`` with errors answered by their nearest status, and the RPC's metrics and
    access-log line when the stream ends, however it ends."""
    code = "OK"
    try:
        yield from batches
    except GeneratorExit:
        code = "CANCELLED"  # the client went away (pyarrow closes the generator)
        raise
    except BaseException as exc:  # noqa: BLE001 - answered with its status, a Lance panic too
        if not is_error(exc):
            raise
        code, failure = _answer(exc)
        raise failure from None
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        call.finished()
        _finish(info, code, started)


def _finish(info: request_context.RequestInfo, code: str, started: float) -> None:
    seconds = time.perf_counter() - started
    observe_request(SURFACE, info.method, code, seconds)
    log_request(info, code, seconds)


__all__ = ["SURFACE", "DataCall", "DataPlane", "flight_error", "watched_stream"]

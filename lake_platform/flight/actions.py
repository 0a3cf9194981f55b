"""DoAction: the Flight SQL actions this read-only server answers (prepared statements,
cancellation, session options, health) and the ones it refuses, with why.

Each handler takes the server, the authenticated caller and the action body, and returns the
results' bodies. Prepared-statement handles and sessions are sealed envelopes (no server state):
closing a handle only checks it, and a session lives in the client's cookie (``session``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.auth.tokens import Identity
from lake_platform.errors import InvalidInput, Unsupported
from lake_platform.flight import proto, session
from lake_platform.flight.spool import POLL_PREFIX, SEGMENT_PREFIX
from lake_platform.flight.transport import Call
from lake_platform.query.defaults import with_defaults

if TYPE_CHECKING:
    from lake_platform.flight.streams import Streams
    from lake_platform.flight.tickets import Tickets
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.snapshot import ProjectView


class ActionHost(Protocol):
    """What the actions need of the server (``FlightSqlServer`` is one), so this module does not
    import the server that imports it."""

    engine: QueryEngine
    tickets: Tickets
    streams: Streams
    sessions: session.Sessions

    def _view(self, identity: Identity) -> ProjectView: ...

    def health(self, identity: Identity | None = None) -> dict[str, Any]: ...


NO_TRANSACTIONS = "transactions are not supported by this read-only server"


def create_prepared(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    name, payload = proto.unpack_command(body)
    if name != "ActionCreatePreparedStatementRequest":
        raise InvalidInput("CreatePreparedStatement takes an ActionCreatePreparedStatementRequest")
    req = proto.parse(proto.ActionCreatePreparedStatementRequest, payload)
    if req.HasField("transaction_id"):
        raise Unsupported(NO_TRANSACTIONS)
    identity = call.identity
    # The handle keeps the session's defaults in force now (``query.defaults``).
    sql = with_defaults(req.query, server.sessions.defaults(call))
    planned = server.engine.plan(sql, server._view(identity), None, prepare=True, scope=identity)
    handle = server.tickets.seal_prepared(identity, sql, None)
    params = pa.schema([pa.field(str(i), pa.null()) for i in range(planned.parameters)])
    result = proto.ActionCreatePreparedStatementResult(
        prepared_statement_handle=handle,
        dataset_schema=planned.schema.serialize().to_pybytes(),
        parameter_schema=params.serialize().to_pybytes(),
        is_update=False,
    )
    return [proto.pack(result)]


def close_prepared(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    handle = proto.unpack_sealed(
        body, proto.ActionClosePreparedStatementRequest, "prepared_statement_handle", proto.PREPARED
    )
    try:
        server.tickets.open_prepared(handle, call.identity)
    except InvalidInput:
        pass  # closing an expired handle is fine
    return []


def cancel_flight_info(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    status = cancel(server, call.identity, proto.parse(proto.CancelFlightInfoRequest, body).info)
    return [proto.CancelFlightInfoResult(status=status).SerializeToString()]


def cancel_query(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    status = cancel(
        server, call.identity, proto.parse(proto.ActionCancelQueryRequest, proto.unpack_command(body)[1]).info
    )
    return [proto.pack(proto.ActionCancelQueryResult(result=status))]


def set_session_options(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    """Set the default catalog and schema: a new session cookie when anything changed; errors
    by option name (INVALID_NAME: not ``catalog`` or ``schema``; INVALID_VALUE: not a warehouse
    of the caller's project, or not a namespace of the default catalog)."""
    options = session.parse_request(body)
    current = server.sessions.defaults(call)
    updated, errors = session.apply_options(current, options, server._view(call.identity))
    if updated != current:
        call.send_header("set-cookie", server.sessions.set_cookie(call.identity, updated))
    return [session.errors_result(errors)]


def get_session_options(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    return [session.options_result(server.sessions.defaults(call))]


def close_session(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    """End the session: the client drops its cookie (nothing is kept on any replica)."""
    if session.cookie(call.header("cookie")) is not None:
        call.send_header("set-cookie", session.closed_cookie())
    return [proto.CloseSessionResult(status=proto.CLOSE_SESSION_CLOSED).SerializeToString()]


def health(server: ActionHost, call: Call, body: bytes) -> list[bytes]:
    # The caller's view: a tenant's principal learns nothing of other tenants (flight.health).
    return [json.dumps(server.health(call.identity)).encode()]


def cancel(server: ActionHost, identity: Identity, info_bytes: bytes) -> int:
    try:
        info = fl.FlightInfo.deserialize(info_bytes)
    except Exception:  # noqa: BLE001
        raise InvalidInput("malformed FlightInfo") from None
    cancelled = False
    spooler = getattr(server, "spooler", None)
    jobs: set[tuple[str, str]] = set()
    descriptor = info.descriptor
    if spooler is not None and descriptor is not None and descriptor.descriptor_type == fl.DescriptorType.CMD:
        if descriptor.command.startswith(POLL_PREFIX):  # a spooling job PollFlightInfo reported
            jobs.add((identity.project, spooler.open_poll(descriptor.command, identity)[0]))
    for endpoint in info.endpoints:
        name, _ = proto.unpack_command(endpoint.ticket.ticket)
        if name != "TicketStatementQuery":
            continue
        handle = proto.statement_handle(endpoint.ticket.ticket)
        if handle.startswith(SEGMENT_PREFIX) and spooler is not None:
            try:
                project, job, _ = spooler.open_segment(handle, identity)
            except InvalidInput:
                continue  # expired: reclaim removes it
            jobs.add((project, job))
            continue
        try:
            ticket = server.tickets.open_statement(handle, identity)
        except InvalidInput:
            continue  # expired (or beyond this server's limits): nothing to cancel
        server.streams.cancel(ticket.ticket_id, ticket.expires_at_ms / 1000)
        cancelled = True
    for project, job in jobs:  # stop the work and delete the segments
        spooler.cancel_job(project, job)
        cancelled = True
    return proto.CANCEL_STATUS_CANCELLED if cancelled else proto.CANCEL_STATUS_NOT_CANCELLABLE


@dataclass(frozen=True)
class Action:
    description: str  # what ListActions says
    run: Callable[[ActionHost, Call, bytes], list[bytes]]  # (server, the call, body) -> results


#: DoAction's table, in ListActions' order.
ACTIONS: dict[str, Action] = {
    "CreatePreparedStatement": Action(
        "Prepare a read-only query; returns a self-contained handle", create_prepared
    ),
    "ClosePreparedStatement": Action(
        "Release a prepared statement (handles hold no server state)", close_prepared
    ),
    "CancelFlightInfo": Action("Cancel the query of a FlightInfo", cancel_flight_info),
    "CancelQuery": Action("Cancel the query of a FlightInfo (deprecated form)", cancel_query),
    "SetSessionOptions": Action(
        "Set the session's default catalog (warehouse) and schema (namespace); kept in a sealed cookie",
        set_session_options,
    ),
    "GetSessionOptions": Action("The session's default catalog and schema", get_session_options),
    "CloseSession": Action("End the session (the client drops its cookie)", close_session),
    "health": Action("Report the server's health and the catalog snapshot's age (JSON)", health),
}
#: Flight SQL actions this server refuses, and why (not listed by ListActions).
REFUSED_ACTIONS = {
    **dict.fromkeys(
        ("BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint"), NO_TRANSACTIONS
    ),
    "CreatePreparedSubstraitPlan": "Substrait plans are not supported: prepare SQL (CreatePreparedStatement)",
}

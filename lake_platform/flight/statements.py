"""The statement RPCs of the endpoint: GetFlightInfo and PollFlightInfo of a statement, DoGet of
its tickets (and of spooled segments), DoPut binding a prepared statement's parameters.

Each function takes the server (``StatementHost``: ``FlightSqlServer`` is one, and calls them
from its RPC methods), the authenticated call and the request, so this module does not import
the server that imports it. A statement's GetFlightInfo plans it, spools a heavy result or
answers sealed tickets (``endpoints``), keeps the plan for its DoGet and may start the query
early (``streams``); the DoGet plans against the ticket's pinned snapshots only and streams.

Several endpoints only for a call that asks (``many``): the header ``x-lake-endpoints: many``
(``one`` refuses them on a server set to ``LAKE_FLIGHT_ENDPOINTS=many``) or ``x-lake-spool``.
Any other call gets one endpoint holding the whole answer, split or spooled as it may be.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.auth.tokens import Identity
from lake_platform.errors import InvalidInput, Unsupported
from lake_platform.flight import proto
from lake_platform.flight.actions import NO_TRANSACTIONS
from lake_platform.flight.metadata import unsupported
from lake_platform.flight.spool import POLL_PREFIX, SEGMENT_PREFIX, SPOOL_HEADER, poll_info
from lake_platform.flight.transport import Call
from lake_platform.observability.query import QueryInfo, failed, observed
from lake_platform.query.defaults import with_defaults
from lake_platform.query.split import ordered

if TYPE_CHECKING:
    from lake_platform.flight.endpoints import Endpoints
    from lake_platform.flight.session import Sessions
    from lake_platform.flight.spool import Spooler
    from lake_platform.flight.streams import Streams
    from lake_platform.flight.tickets import Tickets
    from lake_platform.observability.audit import AuditTrail
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.snapshot import ProjectView
    from lake_platform.query.split import PartTables
    from lake_platform.settings.flight import FlightSettings

#: The call header asking for one endpoint per result part or segment (``many``) or one (``one``).
ENDPOINTS_HEADER = "x-lake-endpoints"
#: The commands that run a statement (the rest are catalog commands: ``metadata``).
STATEMENTS = ("CommandStatementQuery", "CommandPreparedStatementQuery")


class StatementHost(Protocol):
    """What the statement RPCs need of the server."""

    settings: FlightSettings
    engine: QueryEngine
    tickets: Tickets
    endpoints: Endpoints
    streams: Streams
    spooler: Spooler | None
    parts: PartTables
    audit: AuditTrail
    sessions: Sessions

    def _view(self, identity: Identity) -> ProjectView: ...

    def _refuse_if_draining(self) -> None: ...

    def _is_dropped(self, incarnation: str) -> bool: ...

    def get_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> fl.FlightInfo: ...


def statement(
    server: StatementHost, call: Call, name: str, payload: bytes, command: bytes
) -> tuple[str, pa.RecordBatch | None]:
    """The SQL and bound parameters of a statement command (a prepared one's handle opened).
    A statement's SQL carries the caller's session defaults (``session``); a prepared one's
    has the defaults it was prepared with."""
    if name == "CommandStatementQuery":
        cmd = proto.parse(proto.CommandStatementQuery, payload)
        if cmd.HasField("transaction_id"):
            raise Unsupported(NO_TRANSACTIONS)
        return with_defaults(cmd.query, server.sessions.defaults(call)), None
    return server.tickets.open_prepared(proto.prepared_handle(command), call.identity)


def flight_info(
    server: StatementHost, call: Call, descriptor: fl.FlightDescriptor, name: str, payload: bytes
) -> fl.FlightInfo:
    """GetFlightInfo of a statement: its endpoints (sealed tickets), or a spooled result's."""
    identity = call.identity
    sql, params = statement(server, call, name, payload, descriptor.command)
    started = time.perf_counter()
    try:
        planned = server.engine.plan(sql, server._view(identity), params, scope=identity)
        if len(planned.refs) > server.settings.max_ticket_tables:
            raise InvalidInput(
                f"the query reads {len(planned.refs)} tables, above this server's "
                f"LAKE_FLIGHT_MAX_TICKET_TABLES={server.settings.max_ticket_tables}"
            )
    except Exception as exc:
        # Audited too: a query refused at planning (say, naming another tenant's table).
        failed(
            QueryInfo.of("flight", identity, sql, params), server.audit, exc, time.perf_counter() - started
        )
        raise
    spooler = server.spooler
    asked = asks_spool(call)
    many = asked or asks_many(call, server.settings.endpoints)
    if spooler is not None and spooler.wanted(planned, asked):
        job = spooler.start(identity, planned, ordered(planned))
        if not many:  # one endpoint, streaming the segments as they are written
            return spooler.whole_info(job, planned, descriptor)
        spooler.wait(job, server.settings.query_timeout_seconds or None)
        return spooler.flight_info(job.id, identity, descriptor)
    if asked:
        raise Unsupported("this server does not spool results (LAKE_FLIGHT_SPOOL=false)")
    answer = server.endpoints.answer(identity, planned, params, many)
    info = answer.info(descriptor)
    # Its DoGet plans the whole query again: keep the plan, unless it reads the clock.
    if answer.ticket_id is not None and planned.deterministic:
        server.engine.remember(identity, planned, params)
        # Kept (with its parameters, if any): the DoGet finds this very plan (``Streams``).
        # The data plane's calls take batches unmerged (``DataCall.coalesce``).
        coalesce = not server.endpoints.unsplit_located
        server.streams.start_early(identity, planned, answer.ticket_id, coalesce=coalesce, after=call.on_done)
    return info


def poll(server: StatementHost, call: Call, descriptor: fl.FlightDescriptor) -> bytes:
    """PollFlightInfo: a spooled result's progress until it is ready; anything else at once."""
    identity = call.identity
    spooler = server.spooler
    if descriptor.descriptor_type == fl.DescriptorType.CMD and descriptor.command.startswith(POLL_PREFIX):
        if spooler is None:
            raise Unsupported("this server does not spool results (LAKE_FLIGHT_SPOOL=false)")
        job_id, is_ordered = spooler.open_poll(descriptor.command, identity)
        return spooler.poll(job_id, identity, descriptor, is_ordered)
    if descriptor.descriptor_type == fl.DescriptorType.CMD and spooler is not None:
        name, payload = proto.unpack_command(descriptor.command)
        if name in STATEMENTS:
            sql, params = statement(server, call, name, payload, descriptor.command)
            planned = server.engine.plan(sql, server._view(identity), params)
            if spooler.wanted(planned, asks_spool(call)):
                job = spooler.start(identity, planned, ordered(planned))
                return spooler.poll(job.id, identity, spooler.poll_descriptor(job), job.ordered)
    return poll_info(server.get_flight_info(call, descriptor), None, 1.0, None)


def stream(
    server: StatementHost, call: Call, ticket: fl.Ticket
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """DoGet of a statement ticket (or a spooled segment's): the ticket opened and checked, the
    query planned against its pinned snapshots only, streamed through admission and audited."""
    identity = call.identity
    handle = proto.statement_handle(ticket.ticket)
    spooler = server.spooler
    if handle.startswith(SEGMENT_PREFIX):
        if spooler is None:
            raise Unsupported("this server does not serve spooled results (LAKE_FLIGHT_SPOOL=false)")
        server._refuse_if_draining()
        return spooler.read(*spooler.open_segment(handle, identity))
    opened = server.tickets.open_statement(handle, identity)
    query = QueryInfo.of("flight", identity, opened.sql, opened.params, opened.snapshots)
    started = time.perf_counter()
    try:
        server._refuse_if_draining()
        server.streams.refuse_cancelled(opened.ticket_id)
        planned = server.engine.plan_pinned(
            opened.sql,
            opened.snapshots,
            opened.params,
            is_dropped=server._is_dropped,
            open_table=None if opened.part is None else server.parts.opener(opened.part),
            scope=identity,
        )
    except Exception as exc:
        failed(query, server.audit, exc, time.perf_counter() - started)
        raise
    batches = server.streams.stream(call, planned, opened.ticket_id, identity)
    return planned.schema, observed(batches, query, server.audit, call.is_cancelled)


def bind(
    server: StatementHost,
    call: Call,
    descriptor: fl.FlightDescriptor,
    name: str,
    batches: Iterator[pa.RecordBatch],
) -> bytes:
    """DoPut: bind parameters to a prepared statement; the reply (PutResult.app_metadata) is
    the updated handle, which carries them (no server state)."""
    if name != "CommandPreparedStatementQuery":
        if name in proto.UNSUPPORTED_COMMANDS:
            raise unsupported(name)
        raise InvalidInput(f"DoPut does not take {name}")
    identity = call.identity
    sql, _ = server.tickets.open_prepared(proto.prepared_handle(descriptor.command), identity)
    params = _one_row(batches, server.settings.max_param_bytes)
    handle = server.tickets.seal_prepared(identity, sql, params)
    return proto.DoPutPreparedStatementResult(prepared_statement_handle=handle).SerializeToString()  # type: ignore[no-any-return]


def _one_row(batches: Iterator[pa.RecordBatch], limit: int) -> pa.RecordBatch | None:
    """The one row of parameters in ``batches`` (None: none bound); at most ``limit`` bytes."""
    rows: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        size += batch.nbytes
        if size > limit:
            raise InvalidInput(f"the bound parameters are larger than LAKE_FLIGHT_MAX_PARAM_BYTES={limit}")
        rows.append(batch)
    if not rows:
        return None
    table = pa.Table.from_batches(rows)
    if table.num_rows != 1:
        raise InvalidInput(f"bind exactly one row of parameters (got {table.num_rows})")
    return table.combine_chunks().to_batches()[0]


def asks_spool(call: Call) -> bool:
    """Whether the call asks for its result to be spooled (the ``x-lake-spool`` header)."""
    return (call.header(SPOOL_HEADER) or "").strip().lower() in ("1", "true", "yes")


def asks_many(call: Call, default: str) -> bool:
    """Whether the call takes several endpoints: its ``x-lake-endpoints`` header (``many`` or
    ``one``), else the server's ``LAKE_FLIGHT_ENDPOINTS`` (``default``)."""
    value = (call.header(ENDPOINTS_HEADER) or default).strip().lower()
    if value not in ("one", "many"):
        raise InvalidInput(f"{ENDPOINTS_HEADER} must be 'one' or 'many', not {value[:20]!r}")
    return value == "many"


__all__ = [
    "ENDPOINTS_HEADER",
    "STATEMENTS",
    "StatementHost",
    "asks_many",
    "bind",
    "flight_info",
    "poll",
    "statement",
    "stream",
]

"""The read-only Flight SQL endpoint.

Stateless by construction: prepared-statement handles and statement tickets are sealed
envelopes (see ``tokens`` and ``tickets``) carrying the principal, the SQL, bound parameters
and, for tickets, the exact table snapshots planned against. Any replica sharing the keys can
serve any call; DoGet re-plans against the pinned snapshots only (never the registry's current
pointer, no registry read at all), fails when one is gone, and streams DataFusion's output
straight into the Flight writer.

Discovery and SQL see one tenant: the caller's project. catalog = warehouse, db_schema =
namespace path joined by ".", table = table; another project's table looks exactly like a
missing one. Everything a request needs comes from the cached catalog snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform import __version__
from lake_platform.errors import (
    InvalidInput,
    InvalidTableState,
    LakeError,
    ServiceUnavailable,
    Throttling,
    Unsupported,
)
from lake_platform.flight import proto, schemas
from lake_platform.flight.auth import Authenticator, AuthService, Throttle
from lake_platform.flight.settings import FlightSettings, flight_settings
from lake_platform.flight.sqlinfo import sql_info_table, standard_info
from lake_platform.flight.tickets import TicketLimits, Tickets
from lake_platform.flight.tokens import Identity, Sealer
from lake_platform.flight.transport import Call, FlightTransport, varint
from lake_platform.flight.watchdog import Watchdog
from lake_platform.query.engine import (
    PlannedQuery,
    QueryCancelled,
    QueryEngine,
    QueryLimits,
    QueryTimeout,
    timed_out,
)
from lake_platform.query.snapshot import ProjectView, SnapshotCache
from lake_platform.registry.store import MetaStore
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

TABLE_TYPES = ("TABLE",)
_CATALOG_COMMANDS = frozenset({"CommandGetCatalogs", "CommandGetDbSchemas", "CommandGetTables"})
#: Prepared handles only hold SQL and parameters (the caller is authenticated on every call),
#: so they live long; tickets pin table versions and live the ticket lifetime.
PREPARED_TTL = 7 * 86400.0
#: Cancelled ticket ids remembered (replica-local, advisory; the oldest are forgotten first).
MAX_CANCELLED = 10_000


class FlightSqlServer:
    """Start with :meth:`start`, stop with :meth:`stop` (graceful), or block in :meth:`wait`.

    The port is bound at construction (``port`` says which, when settings asked for 0); calls
    are served from :meth:`start` on. The wire protocol lives in ``transport``; this class is
    the Flight SQL logic behind each RPC.
    """

    def __init__(
        self,
        settings: LakeSettings,
        flight: FlightSettings | None = None,
        *,
        store: MetaStore | None = None,
        authenticator: Authenticator | None = None,
        catalog: Any = None,
        snapshots: SnapshotCache | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: wall-clock seconds for issuing and expiring tokens, tickets and handles."""
        self.lake_settings = settings
        self.settings = flight or flight_settings(settings)
        # Lance reads this when a scan starts; it bounds how far a scan reads ahead of the client
        # (an operator's explicit environment wins).
        os.environ.setdefault("LANCE_DEFAULT_IO_BUFFER_SIZE", str(self.settings.scan_io_buffer_bytes))
        if catalog is None and (store is None or authenticator is None):
            from lake_platform.catalog.catalog import Catalog

            catalog = Catalog(settings, store=store, heartbeat=False)
            self._owned_catalog = catalog
        else:
            self._owned_catalog = None
        self.store = store if store is not None else catalog.store
        self.authenticator = authenticator if authenticator is not None else catalog
        if not hasattr(self.authenticator, "authenticate_password"):
            raise Unsupported("this catalog cannot authenticate users yet: pass an authenticator")
        # Version cleanup keeps a superseded version for the ticket lifetime plus the readers'
        # staleness bound (LakeSettings.reader_max_stale_seconds): never plan on a snapshot older.
        max_stale = self.settings.snapshot_max_stale_seconds
        reader_bound = getattr(settings, "reader_max_stale_seconds", None)
        if reader_bound is not None and max_stale > reader_bound:
            log.warning("LAKE_FLIGHT_SNAPSHOT_MAX_STALE_SECONDS=%g exceeds LAKE_READER_MAX_STALE_SECONDS=%g, which "
                        "version cleanup allows for; using %g", max_stale, reader_bound, reader_bound)
            max_stale = reader_bound
        self.snapshots = snapshots or SnapshotCache.for_store(
            self.store, ttl=self.settings.snapshot_ttl_seconds, max_stale=max_stale)
        self.sealer = Sealer(self.settings.sealing_keys() or None, clock=clock,
                             max_bytes=self.settings.max_ticket_bytes)
        if not self.settings.query_timeout_seconds:
            log.warning("LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=0: queries have no time limit, and queries that never end "
                        "can hold every admission slot")
        if self.sealer.ephemeral:
            log.warning("neither LAKE_FLIGHT_KEYS nor LAKE_FLIGHT_SECRET_KEY is set: tokens and tickets are valid "
                        "in this process only")
        self.ticket_ttl = settings.ticket_lifetime_seconds
        self.tickets = Tickets(self.sealer, TicketLimits(
            max_sql_bytes=self.settings.max_sql_bytes, max_tables=self.settings.max_ticket_tables,
            max_param_bytes=self.settings.max_param_bytes), lifetime=self.ticket_ttl, prepared_lifetime=PREPARED_TTL)
        self.auth = AuthService(
            self.authenticator, self.sealer, token_ttl=self.settings.token_ttl_seconds,
            service_token_cache=self.settings.service_token_cache_seconds,
            throttle=Throttle(self.settings.auth_max_failures, self.settings.auth_lockout_seconds))
        self.engine = QueryEngine(settings, QueryLimits(
            memory_limit_bytes=self.settings.memory_limit_bytes, spill_dir=self.settings.spill_path(settings),
            batch_size=self.settings.batch_size, target_partitions=self.settings.target_partitions,
            max_sql_bytes=self.settings.max_sql_bytes, max_message_bytes=self.settings.max_message_bytes,
            dataset_cache_size=self.settings.dataset_cache_size, max_result_bytes=self.settings.max_result_bytes,
            query_timeout_seconds=self.settings.query_timeout_seconds,
            spill_compression=self.settings.spill_compression))
        self.sql_info = standard_info(max_statement_bytes=self.settings.max_sql_bytes,
                                      statement_timeout_ms=int(PREPARED_TTL * 1000))
        self._slots = threading.BoundedSemaphore(self.settings.max_concurrent_queries)
        self._time_limit = (Watchdog(self.settings.query_timeout_seconds, name="lake-flight-query-timeout")
                            if self.settings.query_timeout_seconds else None)
        self._streams: dict[str, threading.Event] = {}
        self._cancelled: dict[str, float] = {}
        self._streams_lock = threading.Lock()
        self._draining = threading.Event()
        self._aborting = threading.Event()
        self._stopped = threading.Event()
        self.started_at = time.time()
        scheme = "grpc+tls" if self.settings.tls else "grpc"
        tls = None
        if self.settings.tls:
            assert self.settings.tls_cert_file and self.settings.tls_key_file
            tls = (self.settings.tls_cert_file.read_bytes(), self.settings.tls_key_file.read_bytes())
        # A request message holds at most a statement, a ticket or a parameter row (each bounded
        # by its own setting, answered INVALID_ARGUMENT with the setting's name); the transport's
        # cap only stops a message far beyond all of them before it is buffered.
        largest = max(self.settings.max_sql_bytes, self.settings.max_ticket_bytes, self.settings.max_param_bytes)
        try:
            self.transport = FlightTransport(
                self, self.auth, host=self.settings.host, port=self.settings.port, tls=tls,
                worker_threads=self.settings.worker_threads, max_receive_bytes=4 * largest + (4 << 20),
                max_put_bytes=2 * self.settings.max_param_bytes + (64 << 10), ready=self._ready)
        except LakeError:
            if self._owned_catalog is not None:
                self._owned_catalog.close()
            raise
        self.port = self.transport.port
        self.location = f"{scheme}://{self.settings.host}:{self.port}"

    # == lifecycle ==============================================================================

    def start(self) -> FlightSqlServer:
        """Start serving and the catalog snapshot's refresh. Until the first snapshot is loaded,
        calls that need it answer UNAVAILABLE (and the gRPC health service says NOT_SERVING)."""
        self.transport.start()
        self.snapshots.start()
        self.transport.set_serving(True)
        log.info("Flight SQL endpoint listening on %s", self.location)
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Refuse new queries, let running streams finish for ``grace`` seconds, then end them."""
        if self._stopped.is_set():
            return
        self._draining.set()
        self.transport.set_serving(False)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with self._streams_lock:
                if not self._streams:
                    break
            time.sleep(0.05)
        self._aborting.set()
        with self._streams_lock:
            for event in self._streams.values():
                event.set()
        self.transport.stop(grace=1.0)
        if self._time_limit is not None:
            self._time_limit.close()
        self.snapshots.stop()
        if self._owned_catalog is not None:
            self._owned_catalog.close()
        self._stopped.set()

    def wait(self) -> None:
        """Block until :meth:`stop` has finished."""
        while not self._stopped.wait(0.5):
            pass

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # == request helpers ========================================================================

    def _state(self) -> tuple[str, str | None]:
        """"ok", "draining" or "unavailable" (no fresh catalog snapshot), and why if unavailable."""
        try:
            self.snapshots.current()
        except ServiceUnavailable as exc:
            return "unavailable", exc.message
        return ("draining" if self._draining.is_set() else "ok"), None

    def _ready(self) -> bool:
        return self._state()[0] == "ok"

    def _view(self, identity: Identity) -> ProjectView:
        if self._draining.is_set():
            raise ServiceUnavailable("the server is shutting down; retry on another replica")
        return self.snapshots.current().project(identity.project)

    def _command(self, descriptor: fl.FlightDescriptor) -> tuple[str, bytes]:
        if descriptor.descriptor_type != fl.DescriptorType.CMD:
            raise InvalidInput("this server takes Flight SQL commands, not paths")
        return _unpack(descriptor.command)

    # == GetFlightInfo / GetSchema ==============================================================

    def get_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        identity = call.identity
        name, payload = self._command(descriptor)
        if name in ("CommandStatementQuery", "CommandPreparedStatementQuery"):
            sql, params = self._statement(identity, name, payload, descriptor.command)
            planned = self.engine.plan(sql, self._view(identity), params)
            if len(planned.refs) > self.settings.max_ticket_tables:
                raise InvalidInput(f"the query reads {len(planned.refs)} tables, above this server's "
                                   f"LAKE_FLIGHT_MAX_TICKET_TABLES={self.settings.max_ticket_tables}")
            handle, expires = self.tickets.seal_statement(identity, planned.sql, params, planned.refs)
            ticket = proto.pack(proto.TicketStatementQuery(statement_handle=handle))
            endpoint = _endpoint(ticket, int(expires))
            return fl.FlightInfo(planned.schema, descriptor, [endpoint], -1, -1)
        schema = self._metadata_schema(name, payload)
        if name in _CATALOG_COMMANDS:
            self._view(identity)  # fail now (UNAVAILABLE) rather than at DoGet
        return fl.FlightInfo(schema, descriptor, [fl.FlightEndpoint(descriptor.command, [])], -1, -1)

    def get_schema(self, call: Call, descriptor: fl.FlightDescriptor) -> pa.Schema:
        identity = call.identity
        name, payload = self._command(descriptor)
        if name in ("CommandStatementQuery", "CommandPreparedStatementQuery"):
            sql, params = self._statement(identity, name, payload, descriptor.command)
            return self.engine.plan(sql, self._view(identity), params).schema
        return self._metadata_schema(name, payload)

    def _statement(self, identity: Identity, name: str, payload: bytes,
                   command: bytes) -> tuple[str, pa.RecordBatch | None]:
        if name == "CommandStatementQuery":
            cmd = proto.parse(proto.CommandStatementQuery, payload)
            if cmd.HasField("transaction_id"):
                raise Unsupported("transactions are not supported by this read-only server")
            return cmd.query, None
        return self.tickets.open_prepared(_prepared_handle(command), identity)

    def _is_dropped(self, incarnation: str) -> bool:
        """Whether this replica's cached catalog knows the incarnation was dropped (no I/O)."""
        snap = self.snapshots.latest()
        return snap is not None and snap.is_dropped(incarnation)

    # == metadata ===============================================================================

    def _metadata_schema(self, name: str, payload: bytes) -> pa.Schema:
        if name == "CommandGetTables":
            cmd = proto.parse(proto.CommandGetTables, payload)
            return schemas.TABLES_WITH_SCHEMA if cmd.include_schema else schemas.TABLES
        simple = {
            "CommandGetCatalogs": schemas.CATALOGS, "CommandGetDbSchemas": schemas.DB_SCHEMAS,
            "CommandGetTableTypes": schemas.TABLE_TYPES, "CommandGetSqlInfo": schemas.SQL_INFO,
            "CommandGetPrimaryKeys": schemas.PRIMARY_KEYS, "CommandGetExportedKeys": schemas.FOREIGN_KEYS,
            "CommandGetImportedKeys": schemas.FOREIGN_KEYS, "CommandGetCrossReference": schemas.FOREIGN_KEYS,
            "CommandGetXdbcTypeInfo": schemas.XDBC_TYPE_INFO,
        }
        if name in simple:
            cls = getattr(proto, name)
            proto.parse(cls, payload)  # reject a malformed payload now, not at DoGet
            return simple[name]
        if name in proto.UNSUPPORTED_COMMANDS:
            raise Unsupported(f"{proto.UNSUPPORTED_COMMANDS[name]} are not supported: this endpoint is read-only")
        if name in ("TicketStatementQuery",):
            raise InvalidInput("TicketStatementQuery is a ticket for DoGet, not a command")
        raise InvalidInput(f"unknown Flight SQL command {name!r}")

    def _metadata(self, identity: Identity, name: str, payload: bytes) -> pa.Table:
        if name == "CommandGetSqlInfo":
            cmd = proto.parse(proto.CommandGetSqlInfo, payload)
            return sql_info_table(self.sql_info, list(cmd.info))
        if name == "CommandGetTableTypes":
            return pa.Table.from_pylist([{"table_type": t} for t in TABLE_TYPES], schema=schemas.TABLE_TYPES)
        if name in ("CommandGetPrimaryKeys",):
            return schemas.PRIMARY_KEYS.empty_table()
        if name in ("CommandGetExportedKeys", "CommandGetImportedKeys", "CommandGetCrossReference"):
            return schemas.FOREIGN_KEYS.empty_table()
        if name == "CommandGetXdbcTypeInfo":
            return schemas.XDBC_TYPE_INFO.empty_table()
        view = self._view(identity)
        if name == "CommandGetCatalogs":
            return pa.Table.from_pylist([{"catalog_name": w} for w in view.warehouses], schema=schemas.CATALOGS)
        if name == "CommandGetDbSchemas":
            cmd = proto.parse(proto.CommandGetDbSchemas, payload)
            catalog = proto.opt(cmd, "catalog")
            match = _like(proto.opt(cmd, "db_schema_filter_pattern"))
            rows = [{"catalog_name": wh, "db_schema_name": ns} for wh, ns in view.namespaces
                    if (catalog is None or catalog == wh) and match(ns)]
            return pa.Table.from_pylist(rows, schema=schemas.DB_SCHEMAS)
        if name == "CommandGetTables":
            return self._tables(view, proto.parse(proto.CommandGetTables, payload))
        return pa.table({})  # unreachable: _metadata_schema rejected it

    def _tables(self, view: ProjectView, cmd: Any) -> pa.Table:
        catalog = proto.opt(cmd, "catalog")
        match_schema = _like(proto.opt(cmd, "db_schema_filter_pattern"))
        match_table = _like(proto.opt(cmd, "table_name_filter_pattern"))
        types = [t.upper() for t in cmd.table_types]
        schema = schemas.TABLES_WITH_SCHEMA if cmd.include_schema else schemas.TABLES
        if types and not set(types) & set(TABLE_TYPES):
            return schema.empty_table()
        rows = []
        for (wh, ns, table), cached in sorted(view.tables.items()):
            if (catalog is not None and catalog != wh) or not match_schema(ns) or not match_table(table):
                continue
            row: dict[str, Any] = {"catalog_name": wh, "db_schema_name": ns, "table_name": table,
                                   "table_type": "TABLE"}
            if cmd.include_schema:
                if not cached.schema_ipc:
                    raise InvalidTableState(f"table {wh}.{ns}.{table} has no recorded schema; "
                                            "ask an operator to repair its registration")
                row["table_schema"] = cached.schema_ipc
            rows.append(row)
        return pa.Table.from_pylist(rows, schema=schema)

    # == DoGet ==================================================================================

    def do_get(self, call: Call, ticket: fl.Ticket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        identity = call.identity
        name, payload = _unpack(ticket.ticket)
        if name != "TicketStatementQuery":
            self._metadata_schema(name, payload)
            table = self._metadata(identity, name, payload)
            return table.schema, iter(table.to_batches())
        ticket = self.tickets.open_statement(_statement_handle(ticket.ticket), identity)
        if self._draining.is_set():
            raise ServiceUnavailable("the server is shutting down; retry on another replica")
        with self._streams_lock:
            if ticket.ticket_id in self._cancelled:
                raise QueryCancelled("the query was cancelled")
        planned = self.engine.plan_pinned(ticket.sql, ticket.snapshots, ticket.params, is_dropped=self._is_dropped)
        return planned.schema, self._drain(call, planned, ticket.ticket_id)

    def _drain(self, call: Call, planned: PlannedQuery, ticket_id: str) -> Iterator[pa.RecordBatch]:
        # Everything that must be undone happens inside the generator: a generator that is never
        # started (the client went away first) holds no slot.
        if not self._slots.acquire(timeout=self.settings.admission_wait_seconds):
            raise Throttling(
                f"too many queries are running: LAKE_FLIGHT_MAX_CONCURRENT_QUERIES="
                f"{self.settings.max_concurrent_queries} reached and no slot freed within "
                f"LAKE_FLIGHT_ADMISSION_WAIT_SECONDS={self.settings.admission_wait_seconds:g}; retry shortly")
        stop = threading.Event()
        expired = threading.Event()
        key = f"{ticket_id}/{secrets.token_hex(4)}"
        with self._streams_lock:
            self._streams[key] = stop
            if self._aborting.is_set():
                stop.set()
        limit = self._arm_time_limit(call, expired)

        def cancelled() -> bool:
            return stop.is_set() or expired.is_set() or call.is_cancelled()

        try:
            yield from self.engine.stream(planned, cancelled)
            if expired.is_set():
                raise timed_out(self.settings.query_timeout_seconds)
            if stop.is_set():
                raise QueryCancelled("the query was cancelled")
        finally:
            if limit is not None and self._time_limit is not None:
                self._time_limit.disarm(limit)
            with self._streams_lock:
                self._streams.pop(key, None)
            self._slots.release()

    def _arm_time_limit(self, call: Call, expired: threading.Event) -> int | None:
        """End the stream at the query timeout, whatever it is doing.

        The engine checks the time limit between batches, but a client that stops reading
        stalls the stream inside gRPC's send: no batch is asked for, and the query would hold
        its admission slot as long as the client keeps the connection. The watchdog ends the
        call with DEADLINE_EXCEEDED from outside; gRPC then drops the stream, which closes the
        query (and frees its slot) on the thread that runs it."""
        if self._time_limit is None:
            return None
        timeout = self._time_limit.delay

        def expire() -> None:
            expired.set()
            call.end(timed_out(timeout))

        return self._time_limit.arm(expire)

    # == DoPut ==================================================================================

    def do_put(self, call: Call, descriptor: fl.FlightDescriptor, batches: Iterator[pa.RecordBatch]) -> bytes:
        """Bind parameters to a prepared statement; the reply (PutResult.app_metadata) is the
        updated handle, which carries them (no server state)."""
        identity = call.identity
        name, _ = self._command(descriptor)
        if name != "CommandPreparedStatementQuery":
            if name in proto.UNSUPPORTED_COMMANDS:
                raise Unsupported(f"{proto.UNSUPPORTED_COMMANDS[name]} are not supported: this endpoint is read-only")
            raise InvalidInput(f"DoPut does not take {name}")
        sql, _ = self.tickets.open_prepared(_prepared_handle(descriptor.command), identity)
        rows: list[pa.RecordBatch] = []
        size = 0
        limit = self.settings.max_param_bytes
        for batch in batches:
            if batch.num_rows == 0:
                continue
            size += batch.nbytes
            if size > limit:
                raise InvalidInput(f"the bound parameters are larger than LAKE_FLIGHT_MAX_PARAM_BYTES={limit}")
            rows.append(batch)
        params = None
        if rows:
            table = pa.Table.from_batches(rows)
            if table.num_rows != 1:
                raise InvalidInput(f"bind exactly one row of parameters (got {table.num_rows})")
            params = table.combine_chunks().to_batches()[0]
        handle = self.tickets.seal_prepared(identity, sql, params)
        return proto.DoPutPreparedStatementResult(prepared_statement_handle=handle).SerializeToString()

    # == actions ================================================================================

    def list_actions(self) -> list[tuple[str, str]]:
        return [
            ("CreatePreparedStatement", "Prepare a read-only query; returns a self-contained handle"),
            ("ClosePreparedStatement", "Release a prepared statement (handles hold no server state)"),
            ("CancelFlightInfo", "Cancel the query of a FlightInfo"),
            ("CancelQuery", "Cancel the query of a FlightInfo (deprecated form)"),
            ("CloseSession", "End the session (no server state)"),
            ("health", "Report the server's health and the catalog snapshot's age (JSON)"),
        ]

    def do_action(self, call: Call, action: fl.Action) -> list[bytes]:
        """The action's results, each a ``Result.body``."""
        identity = call.identity
        kind = action.type
        body = action.body.to_pybytes() if action.body is not None else b""
        if kind == "CreatePreparedStatement":
            name, payload = _unpack(body)
            if name != "ActionCreatePreparedStatementRequest":
                raise InvalidInput("CreatePreparedStatement takes an ActionCreatePreparedStatementRequest")
            req = proto.parse(proto.ActionCreatePreparedStatementRequest, payload)
            if req.HasField("transaction_id"):
                raise Unsupported("transactions are not supported by this read-only server")
            planned = self.engine.plan(req.query, self._view(identity), None, prepare=True)
            handle = self.tickets.seal_prepared(identity, req.query, None)
            params = pa.schema([pa.field(str(i), pa.null()) for i in range(planned.parameters)])
            result = proto.ActionCreatePreparedStatementResult(
                prepared_statement_handle=handle, dataset_schema=planned.schema.serialize().to_pybytes(),
                parameter_schema=params.serialize().to_pybytes(), is_update=False)
            return [proto.pack(result)]
        if kind == "ClosePreparedStatement":
            handle = proto.unpack_sealed(body, proto.ActionClosePreparedStatementRequest,
                                         "prepared_statement_handle", _PREPARED)
            try:
                self.tickets.open_prepared(handle, identity)
            except InvalidInput:
                pass  # closing an expired handle is fine
            return []
        if kind in ("CancelFlightInfo", "CancelQuery"):
            if kind == "CancelFlightInfo":
                info_bytes = proto.parse(proto.CancelFlightInfoRequest, body).info
            else:
                info_bytes = proto.parse(proto.ActionCancelQueryRequest, _unpack(body)[1]).info
            status = self._cancel(identity, info_bytes)
            if kind == "CancelFlightInfo":
                return [proto.CancelFlightInfoResult(status=status).SerializeToString()]
            return [proto.pack(proto.ActionCancelQueryResult(result=status))]
        if kind == "CloseSession":
            return [proto.CloseSessionResult(status=proto.CLOSE_SESSION_CLOSED).SerializeToString()]
        if kind == "health":
            return [json.dumps(self.health()).encode()]
        if kind in ("BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint"):
            raise Unsupported("transactions are not supported by this read-only server")
        if kind == "CreatePreparedSubstraitPlan":
            raise Unsupported("Substrait plans are not supported")
        raise Unsupported(f"unknown action {kind!r}")

    def _cancel(self, identity: Identity, info_bytes: bytes) -> int:
        try:
            info = fl.FlightInfo.deserialize(info_bytes)
        except Exception:  # noqa: BLE001
            raise InvalidInput("malformed FlightInfo") from None
        cancelled = False
        for endpoint in info.endpoints:
            name, _ = _unpack(endpoint.ticket.ticket)
            if name != "TicketStatementQuery":
                continue
            try:
                ticket = self.tickets.open_statement(_statement_handle(endpoint.ticket.ticket), identity)
            except InvalidInput:
                continue  # expired (or beyond this server's limits): nothing to cancel
            ticket_id = ticket.ticket_id
            with self._streams_lock:
                self._cancelled[ticket_id] = ticket.expires_at_ms / 1000
                now = self.sealer.now()
                for tid in [t for t, exp in self._cancelled.items() if exp < now]:
                    del self._cancelled[tid]
                while len(self._cancelled) > MAX_CANCELLED:
                    del self._cancelled[next(iter(self._cancelled))]
                for key, event in self._streams.items():
                    if key.split("/", 1)[0] == ticket_id:
                        event.set()
            cancelled = True
        return proto.CANCEL_STATUS_CANCELLED if cancelled else proto.CANCEL_STATUS_NOT_CANCELLABLE

    def health(self) -> dict[str, Any]:
        status = self.snapshots.status()
        state, error = self._state()
        if error is not None:
            status["error"] = error
        with self._streams_lock:
            running = len(self._streams)
        return {"status": state, "version": __version__, "snapshot": status, "running_queries": running,
                "uptime_seconds": round(time.time() - self.started_at, 1)}


#: Kept for callers of the previous names.
Cancelled = QueryCancelled
__all__ = ["Cancelled", "FlightSqlServer", "QueryCancelled", "QueryTimeout", "serve"]


def _endpoint(ticket: bytes, expires: int) -> fl.FlightEndpoint:
    """A FlightEndpoint for ``ticket`` that expires at ``expires`` (epoch seconds: the ticket's
    expiry rounded down, so a client never thinks a ticket lives longer than it does).

    Parsed from its wire form: pyarrow's constructor converts expiration_time through a
    compute cast on every call, the larger share of what pinning adds to GetFlightInfo."""
    inner = b"\x0a" + varint(len(ticket)) + ticket  # Ticket{ticket = 1}
    stamp = b"\x08" + varint(expires)  # google.protobuf.Timestamp{seconds = 1}
    return fl.FlightEndpoint.deserialize(b"\x0a" + varint(len(inner)) + inner + b"\x1a" + varint(len(stamp)) + stamp)


_PREPARED = "prepared statement handle"


def _statement_handle(ticket: bytes) -> bytes:
    """The sealed handle of a statement ticket; any byte changed, added or removed in its
    wrappers is refused like a tampered handle."""
    return proto.unpack_sealed(ticket, proto.TicketStatementQuery, "statement_handle", "ticket")


def _prepared_handle(command: bytes) -> bytes:
    """The sealed handle of an Any-packed CommandPreparedStatementQuery, decoded as strictly.

    The client builds this wrapper, but every Flight SQL client encodes it canonically (one
    type_url, one handle, in field order: protobuf's own serializers in Go, Java and C++)."""
    return proto.unpack_sealed(command, proto.CommandPreparedStatementQuery, "prepared_statement_handle", _PREPARED)


def _unpack(data: bytes) -> tuple[str, bytes]:
    try:
        return proto.unpack_any(data)
    except Exception:  # noqa: BLE001 - DecodeError, ValueError
        raise InvalidInput("malformed Flight SQL command") from None


def _like(pattern: str | None) -> Callable[[str], bool]:
    if pattern is None or pattern == "%":
        return lambda _: True
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    rx = re.compile("".join(out), re.DOTALL)
    return lambda s: rx.fullmatch(s) is not None


def serve(settings: LakeSettings | None = None, flight: FlightSettings | None = None, *,
          install_signals: bool = True, **kwargs: Any) -> None:
    """Run the endpoint until SIGINT/SIGTERM (what ``lake serve-flight`` calls)."""
    from lake_platform.settings import load_settings

    settings = settings or load_settings()
    server = FlightSqlServer(settings, flight, **kwargs).start()
    if install_signals:
        def _stop(signum: int, _frame: Any) -> None:
            log.info("signal %s: stopping the Flight SQL endpoint", signum)
            threading.Thread(target=server.stop, name="lake-flight-stop", daemon=True).start()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    server.wait()

"""The read-only Flight SQL endpoint: the composition root and the statement RPCs.

Stateless by construction: prepared-statement handles and statement tickets are sealed
envelopes (see ``tokens`` and ``tickets``) carrying the principal, the SQL, bound parameters
and, for tickets, the exact table snapshots planned against. Any replica sharing the keys can
serve any call; DoGet re-plans against the pinned snapshots only (never the registry's current
pointer, no registry read at all; the replica that planned the statement reuses its plan,
``query.plans``), fails when one is gone, and streams DataFusion's output
straight into the Flight writer (admission and cancellation: ``streams``).

Discovery and SQL see one tenant: the caller's project. catalog = warehouse, db_schema =
namespace path joined by ".", table = table (the catalog commands: ``metadata``); another
project's table looks exactly like a missing one. Listings and name resolution come from the
cached catalog snapshot; planning reads the registry only for what it cannot answer: a branch's
head (``query.branch_refs``, per query) and a name it lacks, read once per name and snapshot
view before NOT_FOUND (``query.snapshot_miss``). DoGet reads no registry.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.auth.keyfile import endpoint_keys
from lake_platform.auth.service import Authenticator, AuthService, Throttle
from lake_platform.auth.tokens import Identity, Sealer
from lake_platform.engine.results import ResultsArea
from lake_platform.errors import InvalidInput, LakeError, ServiceUnavailable, Unsupported
from lake_platform.flight import proto, statements
from lake_platform.flight.actions import ACTIONS, REFUSED_ACTIONS
from lake_platform.flight.dataplane import DataPlane
from lake_platform.flight.endpoints import Endpoints
from lake_platform.flight.health import health_report, readiness, report_for
from lake_platform.flight.metadata import CATALOG_COMMANDS, Metadata
from lake_platform.flight.session import Sessions
from lake_platform.flight.spool import Spooler, SpoolSettings
from lake_platform.flight.sqlinfo import standard_info
from lake_platform.flight.statements import STATEMENTS
from lake_platform.flight.streams import EARLY_FIRST_BATCH, Streams
from lake_platform.flight.tickets import TicketLimits, Tickets
from lake_platform.flight.transport import Call, FlightTransport
from lake_platform.maintenance.results import ResultsSweeper
from lake_platform.observability import exposition, metrics
from lake_platform.observability.audit import open_trail
from lake_platform.observability.grpc_metrics import ObservingInterceptor
from lake_platform.query.branch_refs import BranchRefs
from lake_platform.query.engine import QueryEngine
from lake_platform.query.errors import QueryCancelled, QueryTimeout
from lake_platform.query.limits import limits_from
from lake_platform.query.snapshot import ProjectView
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform.query.snapshot_transactions import manifests_on_storage
from lake_platform.query.split import FragmentSizes, PartTables, Sizing
from lake_platform.registry.store import MetaStore
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import FlightSettings, flight_settings

log = logging.getLogger(__name__)

#: Prepared handles only hold SQL and parameters (the caller is authenticated on every call),
#: so they live long; tickets pin table versions and live the ticket lifetime.
PREPARED_TTL = 7 * 86400.0


class FlightSqlServer:
    """Start with :meth:`start`, stop with :meth:`stop` (graceful), or block in :meth:`wait`.

    The port is bound at construction (``port`` says which, when settings asked for 0); calls
    are served from :meth:`start` on. The wire protocol lives in ``transport``; this class is
    the Flight SQL logic behind each RPC (catalog commands: ``metadata``; result streams:
    ``streams``; actions: ``actions``; readiness and the health report: ``health``).
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
        early_first_batch: float = EARLY_FIRST_BATCH,
    ) -> None:
        """``clock``: wall-clock seconds for issuing and expiring tokens, tickets and handles.
        ``early_first_batch``: how quick to its first batch a kept plan's last run must have
        been for it to start early (``streams``)."""
        self.lake_settings = settings
        self.settings = flight or flight_settings(settings)
        # Before anything is opened: a bad key file stops the endpoint with nothing to clean up.
        keys = endpoint_keys(self.settings.sealing_keys(), settings)
        # Lance reads this when a scan starts; it bounds how far a scan reads ahead of the client
        # (an operator's explicit environment wins).
        os.environ.setdefault("LANCE_DEFAULT_IO_BUFFER_SIZE", str(self.settings.scan_io_buffer_bytes))
        if self.settings.scan_batch_rows:  # read by Lance at every scan (bench/flight.py --endpoints)
            os.environ.setdefault("LANCE_DEFAULT_BATCH_SIZE", str(self.settings.scan_batch_rows))
        if catalog is None and (store is None or authenticator is None):
            from lake_platform.catalog.catalog import Catalog

            catalog = Catalog(settings, store=store, heartbeat=False)
            self._owned_catalog = catalog
        else:
            self._owned_catalog = None
        self.store = store if store is not None else catalog.store
        self.authenticator = authenticator if authenticator is not None else catalog.access
        if not hasattr(self.authenticator, "authenticate_password"):
            raise Unsupported("this catalog cannot authenticate users yet: pass an authenticator")
        # Version cleanup keeps a superseded version for the ticket lifetime plus the readers'
        # staleness bound (LakeSettings.reader_max_stale_seconds): never plan on a snapshot older.
        max_stale = self.settings.snapshot_max_stale_seconds
        reader_bound = getattr(settings, "reader_max_stale_seconds", None)
        if reader_bound is not None and max_stale > reader_bound:
            log.warning(
                "LAKE_FLIGHT_SNAPSHOT_MAX_STALE_SECONDS=%g exceeds LAKE_READER_MAX_STALE_SECONDS=%g, which "
                "version cleanup allows for; using %g",
                max_stale,
                reader_bound,
                reader_bound,
            )
            max_stale = reader_bound
        self.snapshots = snapshots or SnapshotCache.for_store(
            self.store,
            ttl=self.settings.snapshot_ttl_seconds,
            max_stale=max_stale,
            published=manifests_on_storage(self.lake_settings.storage_options),
        )
        self.sealer = Sealer(
            keys,
            clock=clock,
            max_bytes=self.settings.max_ticket_bytes,
        )
        if not self.settings.query_timeout_seconds:
            log.warning(
                "LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=0: queries have no time limit, and queries that never end "
                "can hold every admission slot"
            )
        if self.sealer.ephemeral:
            log.warning(
                "neither LAKE_FLIGHT_KEYS nor LAKE_FLIGHT_SECRET_KEY is set and the registry is not the "
                "embedded one (no key file): tokens and tickets are valid in this process only"
            )
        self.ticket_ttl = settings.ticket_lifetime_seconds
        self.tickets = Tickets(
            self.sealer,
            TicketLimits(
                max_sql_bytes=self.settings.max_sql_bytes,
                max_tables=self.settings.max_ticket_tables,
                max_param_bytes=self.settings.max_param_bytes,
            ),
            lifetime=self.ticket_ttl,
            prepared_lifetime=PREPARED_TTL,
        )
        self.sessions = Sessions(self.sealer, PREPARED_TTL)
        self.auth = AuthService(
            self.authenticator,
            self.sealer,
            token_ttl=self.settings.token_ttl_seconds,
            service_token_cache=self.settings.service_token_cache_seconds,
            throttle=Throttle(self.settings.auth_max_failures, self.settings.auth_lockout_seconds),
            # Only the catalog's principals are in the snapshot (an injected authenticator's are not).
            snapshot=self.snapshots.current
            if catalog is not None and self.authenticator is catalog.access
            else None,
        )
        self.engine = QueryEngine(
            settings, limits_from(self.settings, settings), branches=BranchRefs(self.store)
        )
        metrics.watch_engine(self.engine, self.engine.spill_dir, self.engine.limits.memory_limit_bytes)
        self.audit = open_trail(settings)
        self.metrics_server: exposition.Exposition | None = None
        self.parts = PartTables(self.engine)
        self.fragment_sizes = FragmentSizes(self.engine.dataset)
        try:
            self.spooler = self._spooler(settings) if self.settings.spool else None
        except LakeError:  # a results root that cannot be written: stop with nothing left open
            if self._owned_catalog is not None:
                self._owned_catalog.close()
            raise
        # Expired results are deleted here too, not only by `lake results expire` or Dagster.
        self.results_sweeper = (
            ResultsSweeper(self.spooler.area, settings.results_sweep_seconds, settings.results_ttl_seconds)
            if self.spooler is not None
            else None
        )
        self.endpoints = Endpoints(
            self.tickets,
            self.fragment_sizes,
            Sizing(
                self.settings.endpoint_target_rows,
                self.settings.endpoint_target_bytes,
                self.settings.max_endpoints,
            ),
            self.settings.replicas(),
        )
        info = standard_info(
            max_statement_bytes=self.settings.max_sql_bytes, statement_timeout_ms=int(PREPARED_TTL * 1000)
        )
        self.metadata = Metadata(info, self._view)
        self.streams = Streams(
            self.engine, self.settings, self.sealer.now, early_first_batch=early_first_batch
        )
        self._draining = threading.Event()
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
        largest = max(
            self.settings.max_sql_bytes, self.settings.max_ticket_bytes, self.settings.max_param_bytes
        )
        try:
            self.transport = FlightTransport(
                self,
                self.auth,
                host=self.settings.host,
                port=self.settings.port,
                tls=tls,
                worker_threads=self.settings.worker_threads,
                max_receive_bytes=4 * largest + (4 << 20),
                max_put_bytes=2 * self.settings.max_param_bytes + (64 << 10),
                ready=self._ready,
                interceptors=(ObservingInterceptor("flight"),),
            )
        except LakeError:
            if self._owned_catalog is not None:
                self._owned_catalog.close()
            raise
        self.port = self.transport.port
        self.location = f"{scheme}://{self.settings.host}:{self.port}"
        self.data_plane = self._data_plane(tls)

    def _data_plane(self, tls: tuple[bytes, bytes] | None) -> DataPlane | None:
        """The data plane (``dataplane``), bound, when LAKE_FLIGHT_DATA_LISTEN is set; statement
        endpoints then name it."""
        if not self.settings.data_listen.strip():
            return None
        host, port = self.settings.data_address()
        try:
            plane = DataPlane(self, self.auth, host=host, port=port, tls=tls)
        except LakeError:
            self.transport.stop(None)
            if self._owned_catalog is not None:
                self._owned_catalog.close()
            raise
        self.endpoints.use_data_plane(self.settings.data_replicas(plane.port))
        return plane

    # == lifecycle ==============================================================================

    def start(self) -> FlightSqlServer:
        """Start serving and the catalog snapshot's refresh. Until the first snapshot is loaded,
        calls that need it answer UNAVAILABLE (and the gRPC health service says NOT_SERVING)."""
        self.metrics_server = exposition.start_metrics_server(
            self.lake_settings.metrics_host, self.lake_settings.metrics_port
        )
        metrics.watch_snapshots(self.snapshots)
        self.transport.start()
        self.snapshots.start()
        if self.results_sweeper is not None:
            self.results_sweeper.start()
        self.transport.set_serving(True)
        if self.data_plane is not None:
            self.data_plane.start()
            log.info("Flight SQL data plane listening on %s", self.endpoints.replicas[0])
        log.info("Flight SQL endpoint listening on %s", self.location)
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Refuse new queries, let running streams finish for ``grace`` seconds, then end them."""
        if self._stopped.is_set():
            return
        self._draining.set()
        self.transport.set_serving(False)
        self.streams.finish(grace)
        if self.data_plane is not None:
            self.data_plane.stop(1.0)
        if self.spooler is not None:
            self.spooler.stop_all()
        if self.results_sweeper is not None:
            self.results_sweeper.stop()
        self.transport.stop(grace=1.0)
        self.streams.close()
        self.engine.close()
        self.snapshots.stop()
        metrics.unwatch_snapshots(self.snapshots)
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.audit.close()
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

    def _ready(self) -> bool:
        return readiness(self.snapshots, self._draining.is_set())[0] == "ok"

    def _refuse_if_draining(self) -> None:
        if self._draining.is_set():
            raise ServiceUnavailable("the server is shutting down; retry on another replica")

    def _view(self, identity: Identity) -> ProjectView:
        self._refuse_if_draining()
        return self.snapshots.current().project(identity.project)

    def _command(self, descriptor: fl.FlightDescriptor) -> tuple[str, bytes]:
        if descriptor.descriptor_type != fl.DescriptorType.CMD:
            raise InvalidInput("this server takes Flight SQL commands, not paths")
        return proto.unpack_command(descriptor.command)

    # == GetFlightInfo / GetSchema ==============================================================

    def get_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        name, payload = self._command(descriptor)
        if name in STATEMENTS:
            return statements.flight_info(self, call, descriptor, name, payload)
        schema = self.metadata.schema(name, payload)
        if name in CATALOG_COMMANDS:
            self._view(call.identity)  # fail now (UNAVAILABLE) rather than at DoGet
        return fl.FlightInfo(schema, descriptor, [fl.FlightEndpoint(descriptor.command, [])], -1, -1)

    def poll_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> bytes:
        return statements.poll(self, call, descriptor)

    def _spooler(self, settings: LakeSettings) -> Spooler:
        area = ResultsArea.of(settings)
        area.check_writable()
        spool = SpoolSettings(
            min_rows=self.settings.spool_min_rows,
            min_bytes=self.settings.spool_min_bytes,
            segment_bytes=self.settings.spool_segment_bytes,
            ttl=settings.results_ttl_seconds,
            max_jobs=self.settings.spool_max_jobs,
            timeout=self.settings.query_timeout_seconds,
            presign=self.settings.spool_presign,
        )
        return Spooler(area, self.sealer, spool, self.engine.stream, self.fragment_sizes)

    def get_schema(self, call: Call, descriptor: fl.FlightDescriptor) -> pa.Schema:
        identity = call.identity
        name, payload = self._command(descriptor)
        if name in STATEMENTS:
            sql, params = statements.statement(self, call, name, payload, descriptor.command)
            return self.engine.plan(sql, self._view(identity), params).schema
        return self.metadata.schema(name, payload)

    def _is_dropped(self, incarnation: str) -> bool:
        """Whether this replica's cached catalog knows the incarnation was dropped (no I/O)."""
        snap = self.snapshots.latest()
        return snap is not None and snap.is_dropped(incarnation)

    # == DoGet ==================================================================================

    def do_get(self, call: Call, ticket: fl.Ticket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        name, payload = proto.unpack_command(ticket.ticket)
        if name == "TicketStatementQuery":
            return statements.stream(self, call, ticket)
        table = self.metadata.table(call.identity, name, payload)
        return table.schema, iter(table.to_batches())

    def do_put(self, call: Call, descriptor: fl.FlightDescriptor, batches: Iterator[pa.RecordBatch]) -> bytes:
        name, _ = self._command(descriptor)
        return statements.bind(self, call, descriptor, name, batches)

    # == actions ================================================================================

    def list_actions(self) -> list[tuple[str, str]]:
        return [(kind, action.description) for kind, action in ACTIONS.items()]

    def do_action(self, call: Call, action: fl.Action) -> list[bytes]:
        """The action's results, each a ``Result.body``."""
        body = action.body.to_pybytes() if action.body is not None else b""
        handler = ACTIONS.get(action.type)
        if handler is not None:
            return handler.run(self, call, body)
        raise Unsupported(REFUSED_ACTIONS.get(action.type, f"unknown action {action.type!r}"))

    def health(self, identity: Identity | None = None) -> dict[str, Any]:
        """The ``health`` action's report to ``identity`` (``flight.health``); in process
        (``None``), the server's figures."""
        if identity is None:
            return health_report(self, self._draining.is_set())
        return report_for(self, self._draining.is_set(), identity, self.settings.operator_project)


#: Kept for callers of the previous names.
Cancelled = QueryCancelled
__all__ = ["Cancelled", "FlightSqlServer", "QueryCancelled", "QueryTimeout", "serve"]


def serve(
    settings: LakeSettings | None = None,
    flight: FlightSettings | None = None,
    *,
    install_signals: bool = True,
    listening: Callable[[FlightSqlServer], None] | None = None,
    **kwargs: Any,
) -> None:
    """Run the endpoint until SIGINT/SIGTERM (what ``lake serve-flight`` calls).
    ``listening(server)`` is called once it serves (a port that cannot be bound raises before)."""
    from lake_platform.settings import load_settings

    settings = settings or load_settings()
    server = FlightSqlServer(settings, flight, **kwargs).start()
    if listening is not None:
        listening(server)
    if install_signals:

        def _stop(signum: int, _frame: Any) -> None:
            log.info("signal %s: stopping the Flight SQL endpoint", signum)
            threading.Thread(target=server.stop, name="lake-flight-stop", daemon=True).start()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    server.wait()

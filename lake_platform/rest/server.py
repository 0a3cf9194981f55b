"""The REST server's state: one catalog, its settings, and Flight's token verification.

``RestService`` holds what every request needs; ``rest.run`` serves it under uvicorn.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from lake_platform.auth.keyfile import endpoint_keys
from lake_platform.auth.service import AuthService, Throttle
from lake_platform.auth.tokens import Sealer
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.errors import SettingsError
from lake_platform.maintenance.results import ResultsSweeper
from lake_platform.observability import exposition, metrics
from lake_platform.observability.audit import open_trail
from lake_platform.query.limits import limits_from
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform.query.snapshot_transactions import manifests_on_storage
from lake_platform.rest import auth, results
from lake_platform.rest.credentials import StorageCredentials
from lake_platform.rest.ids import check_delimiter
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import FlightSettings, flight_settings, is_loopback

log = logging.getLogger(__name__)


class RestService:
    def __init__(
        self,
        settings: LakeSettings,
        *,
        catalog: Catalog | None = None,
        flight: FlightSettings | None = None,
    ) -> None:
        check_bind(settings)
        self.settings = settings
        self.flight = flight or flight_settings(settings)
        self._owned = catalog is None
        # Read (and checked) before anything else starts: a bad credentials file stops the start.
        self.credentials = StorageCredentials(settings)
        self.catalog = catalog if catalog is not None else Catalog(settings, heartbeat=False)
        # The same key ring as Flight SQL: a login token from a Flight Handshake works here too.
        self.sealer = Sealer(endpoint_keys(self.flight.sealing_keys(), settings))
        self.snapshots = SnapshotCache.for_store(
            self.catalog.store,
            ttl=self.flight.snapshot_ttl_seconds,
            # As Flight: never beyond the staleness version cleanup allows for.
            max_stale=min(self.flight.snapshot_max_stale_seconds, settings.reader_max_stale_seconds),
            published=manifests_on_storage(settings.storage_options),
        )
        self.auth = AuthService(
            self.catalog.access,
            self.sealer,
            token_ttl=self.flight.token_ttl_seconds,
            service_token_cache=self.flight.service_token_cache_seconds,
            throttle=Throttle(self.flight.auth_max_failures, self.flight.auth_lockout_seconds),
            snapshot=self.snapshots.current,
        )

        self._engine: Any = None
        self._engine_lock = threading.Lock()
        # The query audit trail (LAKE_AUDIT_LOG): one line per QueryTable, as Flight writes per DoGet.
        self.audit = open_trail(settings)
        self.metrics_server: exposition.Exposition | None = None
        # QueryTable's spooled results expire here too, not only by `lake results expire` or Dagster.
        self.results_sweeper = ResultsSweeper(
            results.area(settings), settings.results_sweep_seconds, settings.results_ttl_seconds
        )

    def query_engine(self) -> Any:
        """The query engine QueryTable runs on, with Flight SQL's limits (built on first use)."""
        with self._engine_lock:
            if self._engine is None:
                from lake_platform.query.branch_refs import BranchRefs
                from lake_platform.query.engine import QueryEngine

                engine = QueryEngine(
                    self.settings,
                    limits_from(self.flight, self.settings),
                    branches=BranchRefs(self.catalog.store),  # QueryTable's ``branch``
                )
                metrics.watch_engine(engine, engine.spill_dir, engine.limits.memory_limit_bytes)
                self._engine = engine
            return self._engine

    def start(self) -> None:
        """Start the snapshot refresher, the sweep of expired results, and ``/metrics`` when
        LAKE_METRICS_PORT is set (shared with a Flight endpoint in the same process: one port,
        one registry)."""
        self.start_metrics()
        metrics.watch_snapshots(self.snapshots)
        self.snapshots.start()
        self.results_sweeper.start()

    def start_metrics(self) -> None:
        """Serve ``/metrics`` if LAKE_METRICS_PORT is set (idempotent); a busy port is
        ServiceUnavailable naming the settings."""
        if self.metrics_server is None:
            self.metrics_server = exposition.start_metrics_server(
                self.settings.metrics_host, self.settings.metrics_port
            )

    def close(self) -> None:
        self.results_sweeper.stop()
        self.snapshots.stop()
        metrics.unwatch_snapshots(self.snapshots)
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        self.audit.close()
        if self._owned:
            self.catalog.close()

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        return auth.authenticate(self.auth, headers)

    def delimiter(self, query: Mapping[str, str]) -> str:
        asked = query.get("delimiter")
        return check_delimiter(asked) if asked else self.settings.rest_id_delimiter


def check_bind(settings: LakeSettings) -> None:
    tls = settings.rest_tls_cert_file is not None
    if not tls and not settings.rest_allow_insecure and not is_loopback(settings.rest_host):
        raise SettingsError(
            f"LAKE_REST_HOST: binding {settings.rest_host!r} without TLS needs LAKE_REST_ALLOW_INSECURE=true"
        )

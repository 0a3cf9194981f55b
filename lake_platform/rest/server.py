"""The REST server's state and process: one catalog, Flight's token verification, uvicorn.

``RestService`` holds what every request needs (catalog, settings, the authenticator);
``serve`` runs it under uvicorn until SIGINT/SIGTERM (uvicorn's graceful shutdown).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.errors import SettingsError
from lake_platform.flight.auth import AuthService, Throttle
from lake_platform.flight.keyfile import endpoint_keys
from lake_platform.flight.settings import FlightSettings, flight_settings, is_loopback
from lake_platform.flight.tokens import Sealer
from lake_platform.query.snapshot import SnapshotCache
from lake_platform.rest import auth
from lake_platform.settings import LakeSettings

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
        self.catalog = catalog if catalog is not None else Catalog(settings, heartbeat=False)
        # The same key ring as Flight SQL: a login token from a Flight Handshake works here too.
        self.sealer = Sealer(endpoint_keys(self.flight.sealing_keys(), settings))
        self.snapshots = SnapshotCache.for_store(
            self.catalog.store,
            ttl=self.flight.snapshot_ttl_seconds,
            max_stale=min(self.flight.snapshot_max_stale_seconds, settings.reader_max_stale_seconds or 1e9),
        )
        self.auth = AuthService(
            self.catalog,
            self.sealer,
            token_ttl=self.flight.token_ttl_seconds,
            service_token_cache=self.flight.service_token_cache_seconds,
            throttle=Throttle(self.flight.auth_max_failures, self.flight.auth_lockout_seconds),
            snapshot=self.snapshots.current,
        )

    def start(self) -> None:
        self.snapshots.start()

    def close(self) -> None:
        self.snapshots.stop()
        if self._owned:
            self.catalog.close()

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        return auth.authenticate(self.auth, headers)

    def delimiter(self, query: Mapping[str, str]) -> str:
        return query.get("delimiter") or self.settings.rest_id_delimiter


def check_bind(settings: LakeSettings) -> None:
    tls = settings.rest_tls_cert_file is not None
    if not tls and not settings.rest_allow_insecure and not is_loopback(settings.rest_host):
        raise SettingsError(
            f"LAKE_REST_HOST: binding {settings.rest_host!r} without TLS needs LAKE_REST_ALLOW_INSECURE=true"
        )


def uvicorn_config(settings: LakeSettings, app: Any, **overrides: Any) -> Any:
    import uvicorn

    options: dict[str, Any] = {
        "host": settings.rest_host,
        "port": settings.rest_port,
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
    }
    if settings.rest_tls_cert_file is not None:
        options["ssl_certfile"] = str(settings.rest_tls_cert_file)
        options["ssl_keyfile"] = str(settings.rest_tls_key_file)
    options.update(overrides)
    return uvicorn.Config(app, **options)


def serve(settings: LakeSettings) -> None:
    """Serve until Ctrl-C or SIGTERM."""
    import uvicorn

    from lake_platform.rest.app import build_app

    service = RestService(settings)
    try:
        uvicorn.Server(uvicorn_config(settings, build_app(service))).run()
    finally:
        service.close()

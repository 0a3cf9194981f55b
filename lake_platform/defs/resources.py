"""Typed resources. Both read ``LakeSettings`` (``LAKE_*`` variables and ``.env``) when used,
never at import or load time, so loading the code location makes no network call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field, field_validator

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.maintenance.inbox import Inbox
    from lake_platform.settings import LakeSettings

#: The actor the commit log records for runs started by Dagster.
ACTOR = "dagster"


class LakeResource(dg.ConfigurableResource):
    """The catalog. Empty fields mean "from LakeSettings" (``LAKE_HOME``, ``LAKE_REGISTRY_URL``).

    ``namespaces`` maps an asset key prefix (path parts joined by ``/``) to the namespace its
    tables live in (``{"sales": "demo.main.sales"}``): the tables the IO manager writes and the
    table assets observed are keyed by it (``defs.asset_tables``)."""

    home: str = ""
    registry_url: str = ""
    namespaces: dict[str, str] = {}  # noqa: RUF012 - a pydantic field: each instance gets a copy

    def settings(self) -> LakeSettings:
        from lake_platform.settings import load_settings

        overrides: dict[str, Any] = {}
        if self.home:
            overrides["home"] = self.home
        if self.registry_url:
            overrides["registry_url"] = self.registry_url
        return load_settings(**overrides)

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        from lake_platform.catalog.catalog import Catalog

        catalog = Catalog(self.settings())
        try:
            yield catalog
        finally:
            catalog.close()


class InboxResource(dg.ConfigurableResource):
    """Where producers land files: a folder or ``s3://bucket/prefix``, and how the inbox sensor
    takes them.

    Empty ``location`` means ``LAKE_INBOX``, else ``<LAKE_HOME>/inbox``. A file is listed once
    ``settle_seconds`` old (unset: ``LAKE_INBOX_SETTLE_SECONDS``, 1 s); a sensor tick requests
    runs for at most ``files_per_tick`` files over all tables, each run (one commit) at most
    ``files_per_run``.
    """

    lake: LakeResource
    location: str = ""
    settle_seconds: float | None = Field(None, ge=0)
    files_per_run: int = Field(100, gt=0)
    files_per_tick: int = Field(1000, gt=0)

    @field_validator("location")
    @classmethod
    def _an_inbox_location(cls, location: str) -> str:
        """Refused where it is set, naming the field: an S3 location with no valid bucket or
        another scheme would fail every sensor tick with the storage client's own error."""
        from lake_platform.settings.lake import inbox_location_problem

        why = inbox_location_problem(location)
        if why is not None:
            raise ValueError(why)
        return location

    def open(self) -> Inbox:
        from lake_platform.maintenance.inbox import open_inbox

        settings = self.lake.settings()
        return open_inbox(
            self.location or settings.inbox_location(),
            settings,
            settle_seconds=settings.inbox_settle_seconds
            if self.settle_seconds is None
            else self.settle_seconds,
        )


class FlightEndpointResource(dg.ConfigurableResource):
    """The Flight SQL endpoint analysts query: its address and its health, for assets and checks.

    Empty ``host``/``port`` mean the endpoint's own settings (``LAKE_FLIGHT_HOST``,
    ``LAKE_FLIGHT_PORT``). The health action is authenticated like every call: ``token`` is a
    service token (``lake token create ... --role reader``); empty means the environment's
    ``LAKE_FLIGHT_HEALTH_TOKEN``, read when probing so the secret never lands in run config.
    Nothing connects until ``health()`` is called.
    """

    host: str = ""
    port: int = 0
    token: str = ""
    timeout_seconds: float = 5.0

    def address(self) -> str:
        from lake_platform.settings.flight import flight_settings

        configured = flight_settings()
        host = self.host or configured.host
        port = self.port or configured.port
        scheme = "grpc+tls" if configured.tls else "grpc"
        return f"{scheme}://{host}:{port}"

    def health(self) -> dict[str, Any]:
        """The endpoint's own health report, or ``{"status": "unreachable", "error": ...}``."""
        import json

        import pyarrow.flight as fl

        address = self.address()
        try:
            client = fl.connect(address)
            try:
                import os

                token = self.token or os.environ.get("LAKE_FLIGHT_HEALTH_TOKEN", "")
                options = fl.FlightCallOptions(
                    timeout=self.timeout_seconds, headers=[(b"authorization", f"Bearer {token}".encode())]
                )
                results = list(client.do_action(fl.Action("health", b""), options))
                report: dict[str, Any] = json.loads(results[0].body.to_pybytes())
            finally:
                client.close()
        except Exception as exc:  # noqa: BLE001 - a health probe reports, it does not raise
            return {"status": "unreachable", "address": address, "error": str(exc).splitlines()[0][:300]}
        report["address"] = address
        return report

"""The Dagster resource that exposes the Flight SQL endpoint's address and health, against a
real endpoint on a free loopback port, authenticated with a real service token."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.checks import flight_endpoint_healthy
from lake_platform.defs.definitions import defs
from lake_platform.defs.resources import FlightEndpointResource
from lake_platform.flight.server import FlightSqlServer
from lake_platform.settings import load_settings
from lake_platform.settings.flight import flight_settings


@pytest.fixture
def endpoint(tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = load_settings(home=tmp_path / "home")
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table("p.w.ns.t", pa.table({"id": pa.array([1], pa.int64())}).to_reader())
    _, token = catalog.access.create_token("health", project="p", role="reader")
    server = FlightSqlServer(
        settings, flight_settings(port=0), store=catalog.store, authenticator=catalog.access
    ).start()
    yield server, token
    server.stop(1.0)
    catalog.close()


def test_health_with_a_service_token(endpoint) -> None:  # type: ignore[no-untyped-def]
    server, token = endpoint
    resource = FlightEndpointResource(host="127.0.0.1", port=server.port, token=token)
    assert resource.address() == f"grpc://127.0.0.1:{server.port}"
    report = resource.health()
    assert report["status"] == "ok" and report["snapshot"]["loaded"] is True


def test_health_reports_problems_instead_of_raising(endpoint, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    server, _ = endpoint
    monkeypatch.delenv("LAKE_FLIGHT_HEALTH_TOKEN", raising=False)
    unauthenticated = FlightEndpointResource(host="127.0.0.1", port=server.port).health()
    assert unauthenticated["status"] == "unreachable" and "nauthenticated" in unauthenticated["error"]
    nobody_there = FlightEndpointResource(host="127.0.0.1", port=1, timeout_seconds=2).health()
    assert nobody_there["status"] == "unreachable"


def test_check_and_resource_are_in_the_definitions(endpoint) -> None:  # type: ignore[no-untyped-def]
    server, token = endpoint
    loaded = defs()
    assert isinstance(loaded.resources["flight"], FlightEndpointResource)
    check_result = flight_endpoint_healthy(  # the check's body needs no partition, only the resource
        dg.build_asset_check_context(
            resources={"flight": FlightEndpointResource(host="127.0.0.1", port=server.port, token=token)}
        )
    )
    assert check_result.passed and check_result.metadata["status"].value == "ok"

"""The ``health`` action through a stock client (pyarrow.flight do_action): a tenant's
principal sees liveness and its own project, nothing about other tenants or internal errors; a
principal of the operator project (``LAKE_FLIGHT_OPERATOR_PROJECT``) sees the server's figures.
Among those, the names the snapshot lacked: the ``snapshot`` figures and ``/metrics`` count the
registry reads, those that found a table, and the names answered "not found" from an earlier
read, over a replica whose snapshot does not refresh."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import ServiceUnavailable
from lake_platform.flight.server import FlightSqlServer
from lake_platform.query.snapshot import CatalogSnapshot, load_snapshot
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform_tests.flight.conftest import build_catalog, login, plan, query, start_server, t_rows
from lake_platform_tests.observability.test_metrics import delta, scrape


@pytest.fixture
def lagging(tmp_path: Path) -> Iterator[tuple[FlightSqlServer, Catalog]]:
    """A server whose snapshot was loaded at start and is not refreshed during the test."""
    settings, catalog = build_catalog(tmp_path / "home", metrics_port=0)
    server = start_server(settings, catalog, snapshot_ttl_seconds=3600, operator_project="p")
    try:
        yield server, catalog
    finally:
        server.stop(grace=0)
        catalog.close()


def health(client: fl.FlightClient, options: fl.FlightCallOptions) -> dict[str, Any]:
    [result] = list(client.do_action(fl.Action("health", b""), options))
    return json.loads(result.body.to_pybytes())


def test_miss_reads_are_reported_by_the_health_action_and_the_metrics(
    lagging: tuple[FlightSqlServer, Catalog],
) -> None:
    server, catalog = lagging
    assert server.metrics_server is not None
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    before, scraped = health(client, options)["snapshot"], scrape(server.metrics_server.port)
    assert before["misses"] == {"reads": 0, "found": 0, "known_absent": 0}
    loads = before["loads"]
    catalog.tables.create_table("p.w.ns.fresh", t_rows(4).to_reader())
    assert query(client, options, "SELECT id FROM w.ns.fresh").num_rows == 4  # read, found
    for _ in range(3):  # read once, then answered from that read
        with pytest.raises(KeyError, match=r"table w\.ns\.nothing not found"):
            plan(client, options, "SELECT * FROM w.ns.nothing")
    with pytest.raises(KeyError, match="version 9 of p.w.ns.t does not exist"):
        plan(client, options, 'SELECT * FROM w.ns."t@v9"')  # read: the table, not its version 9
    after = health(client, options)["snapshot"]
    assert after["loads"] == loads  # all of it without a refresh
    assert after["misses"] == {"reads": 3, "found": 2, "known_absent": 2}
    scraped_after = scrape(server.metrics_server.port)
    assert delta(scraped, scraped_after, "lake_snapshot_miss_reads_total") == 3
    assert delta(scraped, scraped_after, "lake_snapshot_miss_found_total") == 2
    assert delta(scraped, scraped_after, "lake_snapshot_miss_known_absent_total") == 2


TENANT_VIEW = {"status", "version", "uptime_seconds", "snapshot", "project"}


def test_a_tenant_sees_liveness_and_its_own_project_only(tmp_path: Path) -> None:
    """alice (project p) and bob (q) after bob's queries: each sees the snapshot's freshness and
    its own project's table count; no server-wide table count, cache, plan, early-start or
    running-query figures (other tenants' activity), and no refresh error text."""
    settings, catalog = build_catalog(tmp_path / "home")
    failing = {"on": False}

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        if failing["on"]:
            raise ServiceUnavailable("registry at dynamodb://10.0.3.7:8000: AccessDenied for role lake-prod")
        return load_snapshot(catalog.store, previous)

    server = start_server(settings, catalog, snapshots=SnapshotCache(loader, ttl=3600, max_stale=3600))
    try:
        uri = f"grpc://127.0.0.1:{server.port}"
        bob, bob_options = login(uri, "bob")
        for _ in range(2):
            assert query(bob, bob_options, "SELECT count(*) AS n FROM w.ns.secret").num_rows == 1
        failing["on"] = True
        server.snapshots.refresh()  # fails: the last good snapshot keeps serving
        alice, alice_options = login(uri, "alice")
        seen = {"alice": health(alice, alice_options), "bob": health(bob, bob_options)}
        for who, report in seen.items():
            assert set(report) == TENANT_VIEW, who
            assert report["status"] == "ok"
            assert set(report["snapshot"]) == {"loaded", "age_seconds", "ttl_seconds", "max_stale_seconds"}
            assert "10.0.3.7" not in json.dumps(report) and "AccessDenied" not in json.dumps(report)
        assert seen["alice"]["project"] == {"name": "p", "tables": 3}
        assert seen["bob"]["project"] == {"name": "q", "tables": 2}
    finally:
        server.stop(grace=0)
        catalog.close()


def test_an_unavailable_endpoint_tells_a_tenant_so_without_the_registrys_error(tmp_path: Path) -> None:
    settings, catalog = build_catalog(tmp_path / "home")
    ahead = {"by": 0.0}  # the snapshot cache's clock, moved past max_stale instead of waiting
    failing = {"on": False}

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        if failing["on"]:
            raise ServiceUnavailable("registry at dynamodb://10.0.3.7:8000 refused")
        return load_snapshot(catalog.store, previous)

    clock = lambda: time.monotonic() + ahead["by"]  # noqa: E731
    # The refresh thread's failures (every 30 s) only confirm what the one below shows.
    snapshots = SnapshotCache(loader, ttl=30, max_stale=60, clock=clock)
    server = start_server(settings, catalog, snapshots=snapshots, operator_project="q")
    try:
        failing["on"], ahead["by"] = True, 120.0  # refreshes failing for longer than max_stale
        server.snapshots.refresh()
        uri = f"grpc://127.0.0.1:{server.port}"
        tenant = health(*login(uri, "alice"))
        assert tenant["status"] == "unavailable" and "10.0.3.7" not in json.dumps(tenant)
        operator = health(*login(uri, "bob"))  # q is the operator project here
        assert operator["status"] == "unavailable"
        assert "10.0.3.7" in operator["snapshot"]["error"] and operator["snapshot"]["last_error"]
    finally:
        server.stop(grace=0)
        catalog.close()


def test_a_principal_of_the_operator_project_sees_the_servers_figures(
    lagging: tuple[FlightSqlServer, Catalog],
) -> None:
    server, _ = lagging
    report = health(*login(f"grpc://127.0.0.1:{server.port}", "alice"))  # p: the operator project
    assert {"cache", "result_cache", "plans", "early_starts", "running_queries"} <= set(report)
    assert report["snapshot"]["tables"] == 5  # every tenant's: p's 3 and q's 2

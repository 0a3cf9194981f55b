"""What the endpoint reports of the names its snapshot lacked: the health action's ``snapshot``
figures and ``/metrics`` count the registry reads, those that found a table, and the names
answered "not found" from an earlier read, over a replica whose snapshot does not refresh."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.flight.server import FlightSqlServer
from lake_platform_tests.flight.conftest import build_catalog, login, plan, query, start_server, t_rows
from lake_platform_tests.observability.test_metrics import delta, scrape


@pytest.fixture
def lagging(tmp_path: Path) -> Iterator[tuple[FlightSqlServer, Catalog]]:
    """A server whose snapshot was loaded at start and is not refreshed during the test."""
    settings, catalog = build_catalog(tmp_path / "home", metrics_port=0)
    server = start_server(settings, catalog, snapshot_ttl_seconds=3600)
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

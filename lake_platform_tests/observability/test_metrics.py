"""Prometheus metrics of the Flight SQL endpoint, scraped over HTTP from its own port and read
with prometheus_client's text parser; counters are compared as deltas around a known sequence of
calls (the registry is process-wide)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import ServiceUnavailable
from lake_platform.observability.exposition import start_metrics_server
from lake_platform.observability.metrics import REGISTRY, WATCHED, observe_request
from lake_platform.query.snapshot import load_snapshot
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform.registry.store import Put
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.flight.conftest import login, plan, query, start_server, wait_until

#: Seconds: an age no snapshot of a live server in this process reaches.
AGES_AGO = 10.0**7

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        f"http://127.0.0.1:{port}/metrics", timeout=10
    ) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def small_lake(tmp_path: Path) -> Iterator[tuple[LakeSettings, Catalog]]:
    settings = load_settings(home=tmp_path / "home", metrics_port=0)
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table("p.w.ns.t", pa.table({"id": pa.array(range(100), pa.int64())}).to_reader())
    try:
        yield settings, catalog
    finally:
        catalog.close()


def test_metrics_are_off_unless_a_port_is_set(tmp_path: Path) -> None:
    assert load_settings(home=tmp_path).metrics_port is None
    assert start_metrics_server("127.0.0.1", None) is None


def test_a_stopped_server_no_longer_reports_its_snapshot(small_lake: tuple[LakeSettings, Catalog]) -> None:
    # Held after stop (as a test fixture or a supervisor would): its ever older snapshot must not
    # become the process's lake_snapshot_age_seconds, the oldest of the snapshots reported.
    settings, catalog = small_lake
    ahead = [0.0]  # the cache's clock, moved far ahead so its snapshot is the oldest reported
    cache = SnapshotCache(
        lambda prev: load_snapshot(catalog.store, prev),
        ttl=3600,
        max_stale=3600,
        clock=lambda: time.monotonic() + ahead[0],
    )
    server = start_server(settings, catalog, snapshots=cache)
    ahead[0] = AGES_AGO
    try:
        assert (REGISTRY.get_sample_value("lake_snapshot_age_seconds") or 0.0) >= AGES_AGO
    finally:
        server.stop()
    assert (REGISTRY.get_sample_value("lake_snapshot_age_seconds") or 0.0) < AGES_AGO
    assert cache.status()["age_seconds"] >= AGES_AGO  # still held, and as old as ever


def test_known_queries_read_exactly_in_the_counters(small_lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = small_lake
    # The snapshot cache never loads the table here: a load (in the background, after three
    # plannings) makes kept plans stale, planned again at a moment the counts would depend on.
    server = start_server(settings, catalog, cache_admit_after=1000)
    try:
        assert server.metrics_server is not None
        port = server.metrics_server.port
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        before = scrape(port)
        for k in (3, 5, 7):
            assert query(client, options, f"SELECT id FROM w.ns.t WHERE id < {k}").num_rows == k
        assert query(client, options, "SELECT id FROM w.ns.t WHERE id < 7").num_rows == 7  # kept
        with pytest.raises(KeyError, match="not found"):  # pyarrow's NOT_FOUND
            plan(client, options, "SELECT * FROM w.ns.missing")
        with pytest.raises(pa.ArrowInvalid):  # pyarrow's INVALID_ARGUMENT
            client.do_get(fl.Ticket(b"not a ticket"), options).read_all()
        after = scrape(port)
    finally:
        server.stop(grace=0)

    flight = {"surface": "flight"}
    assert delta(before, after, "lake_requests_total", method="GetFlightInfo", code="OK", **flight) == 4
    assert delta(before, after, "lake_requests_total", method="DoGet", code="OK", **flight) == 4
    # The failures, with their gRPC codes, in both the request and the error counters.
    for method, code in (("GetFlightInfo", "NOT_FOUND"), ("DoGet", "INVALID_ARGUMENT")):
        assert delta(before, after, "lake_requests_total", method=method, code=code, **flight) == 1
        assert delta(before, after, "lake_request_errors_total", method=method, code=code, **flight) == 1
    assert delta(before, after, "lake_request_errors_total", method="DoGet", code="OK", **flight) == 0
    assert delta(before, after, "lake_request_duration_seconds_count", method="GetFlightInfo", **flight) == 5
    assert delta(before, after, "lake_request_duration_seconds_count", method="DoGet", **flight) == 5
    assert delta(before, after, "lake_queries_total", status="OK", **flight) == 4
    assert delta(before, after, "lake_query_rows_total", **flight) == 3 + 5 + 7 + 7
    assert delta(before, after, "lake_query_bytes_total", **flight) >= (3 + 5 + 7 + 7) * 8  # int64 ids
    # The caches, read at scrape time: the repeated query was answered from the result cache.
    assert delta(before, after, "lake_query_cache_hits_total", cache="result") == 1
    assert delta(before, after, "lake_query_cache_misses_total", cache="result") == 3
    assert value(after, "lake_query_cache_entries", cache="result") >= 3
    assert value(after, "lake_query_cache_budget_bytes", cache="result") >= (256 << 20) // 16
    assert ("lake_query_cache_bytes", frozenset({("cache", "snapshot")})) in after
    # Kept plans: the repeated GetFlightInfo, and every DoGet (the plan its GetFlightInfo kept).
    assert delta(before, after, "lake_query_plan_hits_total") == 1 + 4
    assert value(after, "lake_query_plans_kept") >= 3
    assert delta(before, after, "lake_query_plans_shaped_total") == 0  # no key lookup here
    # Planned: the three texts and the missing table; run: the three (the fourth was answered
    # from the result cache).
    assert delta(before, after, "lake_query_plannings_total") == 3 + 1
    assert delta(before, after, "lake_query_runs_total") == 3
    assert value(after, "lake_queries_in_flight", **flight) == 0
    # Read at scrape time: the snapshot cache, the engine's pool and spill folder, the process.
    assert 0 <= value(after, "lake_snapshot_age_seconds") < 60
    assert value(after, "lake_snapshot_refreshes_total") >= 1
    assert ("lake_snapshot_refresh_failures_total", frozenset()) in after
    assert value(after, "lake_query_memory_pool_limit_bytes") >= 256 << 20
    assert ("lake_query_spill_bytes", frozenset()) in after
    assert value(after, "process_resident_memory_bytes") > 0


def test_admission_rejections_are_counted(small_lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = small_lake
    server = start_server(settings, catalog, max_concurrent_queries=1, admission_wait_seconds=0.05)
    try:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        port = server.metrics_server.port  # type: ignore[union-attr]
        # 100^4 rows: far more than gRPC buffers, so it holds the only slot until cancelled.
        huge = "SELECT a.id FROM w.ns.t a, w.ns.t b, w.ns.t c, w.ns.t d"
        first = client.do_get(plan(client, options, huge).endpoints[0].ticket, options)
        first.read_chunk()
        before = scrape(port)
        assert value(before, "lake_queries_in_flight", surface="flight") == 1
        with pytest.raises(pa.ArrowInvalid, match="too many queries"):  # RESOURCE_EXHAUSTED
            query(client, options, "SELECT id FROM w.ns.t")
        after = scrape(port)
        first.cancel()
        assert wait_until(lambda: value(scrape(port), "lake_queries_in_flight", surface="flight") == 0)
        done = scrape(port)
    finally:
        server.stop(grace=0)
    assert delta(before, after, "lake_admission_rejections_total", surface="flight") == 1
    rejected = {"surface": "flight", "method": "DoGet", "code": "RESOURCE_EXHAUSTED"}
    assert delta(before, after, "lake_request_errors_total", **rejected) == 1
    assert delta(after, done, "lake_queries_total", surface="flight", status="CANCELLED") == 1


def test_registry_io_and_lease_waits_are_counted(small_lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = small_lake
    # A writer that did not land the table's current version: it reads twice and acquires the
    # lease (the last writer's small append takes neither step: catalog/test_small_appends.py).
    writer = Catalog(settings)
    try:
        with start_metrics_server("127.0.0.1", 0) as metrics:  # type: ignore[union-attr]
            before = scrape(metrics.port)
            writer.tables.append("p.w.ns.t", pa.table({"id": pa.array([1], pa.int64())}).to_reader())
            catalog.store.transact([Put("zz/a", b"x")])
            list(catalog.store.scan_prefix("zz/"))
            after = scrape(metrics.port)
    finally:
        writer.close()
    sqlite = {"backend": "sqlite"}
    assert delta(before, after, "lake_registry_operations_total", op="transact", outcome="ok", **sqlite) >= 2
    assert (
        delta(before, after, "lake_registry_operations_total", op="scan_prefix", outcome="ok", **sqlite) >= 1
    )
    # The append's reads: the parent with the table, then the table with its current version.
    assert delta(before, after, "lake_registry_operations_total", op="get_many", outcome="ok", **sqlite) == 2
    timed = delta(before, after, "lake_registry_operation_duration_seconds_count", op="get_many", **sqlite)
    assert timed == 2
    assert delta(before, after, "lake_lease_wait_seconds_count", outcome="acquired") == 1


def test_metrics_port_in_use_is_a_typed_error(small_lake: tuple[LakeSettings, Catalog]) -> None:
    with start_metrics_server("127.0.0.1", 0) as busy:  # type: ignore[union-attr]
        with pytest.raises(ServiceUnavailable, match="LAKE_METRICS_PORT"):
            start_metrics_server("127.0.0.1", busy.port)


def test_rest_surface_records_through_the_same_api() -> None:
    """The REST catalog's requests go through observe_request, in the same series as Flight's
    (rest/test_observability: labelled by operation id, ``unmatched`` for any other path)."""
    with start_metrics_server("127.0.0.1", 0) as metrics:  # type: ignore[union-attr]
        before = scrape(metrics.port)
        observe_request("rest", "DescribeTable", 200, 0.01)
        observe_request("rest", "DescribeTable", 200, 0.01)
        observe_request("rest", "ListNamespaces", 503, 0.01)
        after = scrape(metrics.port)
    rest = {"surface": "rest"}
    assert delta(before, after, "lake_requests_total", method="DescribeTable", code="200", **rest) == 2
    assert delta(before, after, "lake_request_errors_total", method="DescribeTable", code="200", **rest) == 0
    listed = {"method": "ListNamespaces", "code": "503", **rest}
    assert delta(before, after, "lake_request_errors_total", **listed) == 1


def test_one_metrics_port_is_shared_by_the_surfaces_of_a_process() -> None:
    """Flight and REST in one process both ask for LAKE_METRICS_PORT: one endpoint, which
    stays up until both have stopped."""
    from lake_platform_tests.servers import free_port

    port = free_port()
    flight = start_metrics_server("127.0.0.1", port)
    rest = start_metrics_server("127.0.0.1", port)
    assert flight is not None and rest is not None and flight.port == rest.port == port
    flight.stop()
    assert ("process_resident_memory_bytes", frozenset()) in scrape(port)  # still served
    rest.stop()
    with start_metrics_server("127.0.0.1", port) as again:  # type: ignore[union-attr]
        assert again.port == port  # really released


def cache_counts(cache: str | None) -> dict[str, float]:
    """The cache counters as the collector reports them now (no HTTP: the collector itself);
    ``cache`` None: the plan cache's (no label)."""
    out = {}
    for family in WATCHED.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("cache") == cache:
                out[sample.name] = sample.value
    return {k: v for k, v in out.items() if cache is not None or k.startswith("lake_query_plan")}


def watched_engine_over_an_index(small_lake: tuple[LakeSettings, Catalog]) -> tuple[Any, Catalog]:
    """A query engine the metrics watch, over ``p.w.ns.t`` with a BTREE index on ``id`` (so a
    key lookup is planned as one)."""
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.limits import QueryLimits

    settings, catalog = small_lake
    catalog.indexes.create_index("p.w.ns.t", "id", "btree")
    engine = QueryEngine(settings, QueryLimits())
    WATCHED.watch_engine(engine, engine.spill_dir, 1)
    return engine, catalog


def test_plan_counters_count_kept_and_shaped_plans_and_outlive_their_engine(
    small_lake: tuple[LakeSettings, Catalog],
) -> None:
    import gc

    from lake_platform_tests.flight.conftest import ALICE

    engine, catalog = watched_engine_over_an_index(small_lake)
    before = cache_counts(None)
    view = load_snapshot(catalog.store).project("p")
    for k in (3, 5, 7, 7):  # a prepared key lookup bound per key: one planned, three answered from it
        engine.plan("SELECT id FROM w.ns.t WHERE id = ?", view, pa.record_batch({"k": [k]}), scope=ALICE)
    during = cache_counts(None)
    assert during["lake_query_plans_shaped_total"] == before.get("lake_query_plans_shaped_total", 0) + 3
    # Found: the kept lookup, for 5, for 7 and for 7 again.
    assert during["lake_query_plan_hits_total"] == before.get("lake_query_plan_hits_total", 0) + 3
    kept = [s.value for f in WATCHED.collect() for s in f.samples if s.name == "lake_query_plans_kept"]
    assert kept and kept[0] >= 1  # the kept lookup, at least (other live engines add)
    del engine
    gc.collect()
    assert cache_counts(None) == during  # a gone engine's counts stay in the totals


def test_lookup_scanner_counters_count_made_and_reused_scanners(
    small_lake: tuple[LakeSettings, Catalog],
) -> None:

    engine, catalog = watched_engine_over_an_index(small_lake)

    def counts() -> dict[str, float]:
        return {s.name: s.value for f in WATCHED.collect() for s in f.samples if "lookup_scanners" in s.name}

    before = counts()
    planned = engine.plan("SELECT id FROM w.ns.t WHERE id = 3", load_snapshot(catalog.store).project("p"))
    for _ in range(3):  # a cursor running its query again: one scanner, read three times
        list(engine.stream(planned))
    after = counts()
    assert planned.lookup is not None
    assert (
        after["lake_query_lookup_scanners_built_total"]
        == before["lake_query_lookup_scanners_built_total"] + 1
    )
    assert (
        after["lake_query_lookup_scanners_reused_total"]
        == before["lake_query_lookup_scanners_reused_total"] + 2
    )
    assert after["lake_query_lookup_scanners_kept"] >= 1  # this engine's, at least (other live engines add)


def test_cache_counters_never_go_down_when_an_engine_goes_away(
    small_lake: tuple[LakeSettings, Catalog],
) -> None:
    """A stopped server's engine is let go: its counts stay in the totals (a counter summed over
    the live engines alone dropped, and Prometheus reads a drop as a restart)."""
    import gc

    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.limits import QueryLimits
    from lake_platform_tests.flight.conftest import ALICE

    settings, catalog = small_lake
    engine = QueryEngine(settings, QueryLimits(result_cache_bytes=1 << 20))
    WATCHED.watch_engine(engine, engine.spill_dir, 1)
    before = cache_counts("result")
    view = load_snapshot(catalog.store).project("p")
    for _ in range(3):
        planned = engine.plan("SELECT count(*) AS n FROM w.ns.t", view, scope=ALICE)
        list(engine.stream(planned, scope=ALICE))
    during = cache_counts("result")
    assert during["lake_query_cache_hits_total"] == before.get("lake_query_cache_hits_total", 0) + 2
    del engine, planned
    gc.collect()
    after = cache_counts("result")
    assert all(after[name] >= value for name, value in during.items())
    assert after["lake_query_cache_hits_total"] == during["lake_query_cache_hits_total"]
    # A new engine's hits add to the gone one's, rather than hiding below them.
    engine = QueryEngine(settings, QueryLimits(result_cache_bytes=1 << 20))
    WATCHED.watch_engine(engine, engine.spill_dir, 1)
    for _ in range(2):
        planned = engine.plan("SELECT count(*) AS n FROM w.ns.t", view, scope=ALICE)
        list(engine.stream(planned, scope=ALICE))
    assert cache_counts("result")["lake_query_cache_hits_total"] == during["lake_query_cache_hits_total"] + 1


def test_versions_committed_around_the_registry_are_counted(small_lake: tuple[LakeSettings, Catalog]) -> None:
    """A bypassing writer (a plain Lance append on the table's location) is found by the next
    commit through the catalog, which moves it to quarantine: counted by project."""
    import lance  # plays the writer that bypasses the catalog

    _, catalog = small_lake
    location = catalog.reads.open_table("p.w.ns.t").record.location
    with start_metrics_server("127.0.0.1", 0) as metrics:  # type: ignore[union-attr]
        before = scrape(metrics.port)
        lance.write_dataset(pa.table({"id": pa.array([7], pa.int64())}), location, mode="append")
        lance.write_dataset(pa.table({"id": pa.array([8], pa.int64())}), location, mode="append")
        catalog.tables.append("p.w.ns.t", pa.table({"id": pa.array([1], pa.int64())}).to_reader())
        after = scrape(metrics.port)
    assert delta(before, after, "lake_bypassed_versions_total", project="p") == 2


def test_snapshot_counters_never_go_down_when_a_server_stops(
    small_lake: tuple[LakeSettings, Catalog],
) -> None:
    """Two servers in one process (Flight and REST share /metrics): the snapshot counters summed
    the live servers' caches, so stopping one took its loads out of lake_snapshot_refreshes_total
    (Prometheus reads a drop as a restart: rate() then counts the whole remainder again)."""
    settings, catalog = small_lake
    with start_metrics_server("127.0.0.1", 0) as metrics:  # type: ignore[union-attr]
        first = start_server(settings, catalog)
        try:
            second = start_server(settings, catalog)
            assert wait_until(lambda: second.snapshots.status()["loads"] > 0)
            second.stop(grace=0)
            during = scrape(metrics.port)
            assert value(during, "lake_snapshot_refreshes_total") >= second.snapshots.status()["loads"]
            third = start_server(settings, catalog)  # and another after it: its loads add on
            assert wait_until(lambda: third.snapshots.status()["loads"] > 0)
            after = scrape(metrics.port)
            third.stop(grace=0)
        finally:
            first.stop(grace=0)
        stopped = scrape(metrics.port)
    for name in ("lake_snapshot_refreshes_total", "lake_snapshot_refresh_failures_total"):
        assert value(during, name) <= value(after, name) <= value(stopped, name), name
    assert value(stopped, "lake_snapshot_refreshes_total") >= sum(
        s.snapshots.status()["loads"] for s in (first, second, third)
    )

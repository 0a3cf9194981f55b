"""The cache shield (invariant 7): the request path reads no registry, refreshes are coalesced,
the last good snapshot survives backend failures, and a backend error is never "not found"."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import ServiceUnavailable
from lake_platform.flight import proto
from lake_platform.query.snapshot import CatalogSnapshot, load_snapshot
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform_tests.flight.conftest import build_catalog, login, query, start_server, wait_until
from lake_platform_tests.flight.helpers import CountingStore


def test_hundred_queries_inside_the_ttl_read_no_registry(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    store = CountingStore(catalog.store)
    server = start_server(settings, catalog, store=store, snapshot_ttl_seconds=600)
    try:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        assert store.reads > 0  # the initial load
        before = store.reads
        for i in range(100):
            table = query(client, options, f"SELECT id, s FROM w.ns.t WHERE id = {i}")
            assert table.column("id").to_pylist() == [i]
        tables = fl.FlightDescriptor.for_command(proto.pack(proto.CommandGetTables(include_schema=True)))
        for _ in range(10):
            client.do_get(client.get_flight_info(tables, options).endpoints[0].ticket, options).read_all()
        assert store.reads == before, f"{store.reads - before} registry reads on the request path"
    finally:
        server.stop(grace=0)


def test_backend_error_is_unavailable_never_not_found(lake: tuple[Any, Catalog]) -> None:
    """Staleness is read on a clock the test moves (a minute ahead: the snapshot is past
    max_stale), not slept towards: on a loaded machine a 0.4 s sleep saw no failed refresh yet,
    or the 'still serves' query came after max_stale had run out."""
    settings, catalog = lake
    store = CountingStore(catalog.store)
    ahead = [0.0]
    snapshots = SnapshotCache(
        lambda prev: load_snapshot(store, prev),
        ttl=0.1,
        max_stale=30.0,
        clock=lambda: time.monotonic() + ahead[0],
    )
    server = start_server(settings, catalog, store=store, snapshots=snapshots)
    try:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        assert query(client, options, "SELECT count(*) AS n FROM w.ns.t").to_pylist() == [{"n": 1000}]
        store.failing = True
        until(lambda: snapshots.failures > 0, "a refresh to fail")
        # Refreshes fail; the last good snapshot still serves.
        assert query(client, options, "SELECT count(*) AS n FROM w.ns.t").to_pylist() == [{"n": 1000}]
        ahead[0] = 60.0  # now the snapshot is older than max_stale
        for text in ("SELECT count(*) FROM w.ns.t", "SELECT * FROM w.ns.missing"):
            with pytest.raises(fl.FlightUnavailableError, match="could not be refreshed"):
                query(client, options, text)
        with pytest.raises(fl.FlightUnavailableError):
            client.get_flight_info(
                fl.FlightDescriptor.for_command(proto.pack(proto.CommandGetTables())), options
            )
        loads = snapshots.loads
        store.failing = False
        until(lambda: snapshots.loads > loads, "a refresh after the backend came back")
        ahead[0] = 0.0  # the new snapshot is fresh
        assert query(client, options, "SELECT count(*) AS n FROM w.ns.t").to_pylist() == [{"n": 1000}]
    finally:
        server.stop(grace=0)


def test_no_snapshot_yet_is_unavailable(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    store = CountingStore(catalog.store)
    store.failing = True
    server = start_server(settings, catalog, store=store)
    try:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        with pytest.raises(fl.FlightUnavailableError, match="not loaded yet"):
            query(client, options, "SELECT * FROM w.ns.t")
    finally:
        server.stop(grace=0)


def test_refreshes_are_coalesced_and_replace_atomically() -> None:
    loads = []
    gate = threading.Event()

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        loads.append(previous)
        gate.wait(30)
        return CatalogSnapshot(loaded_at=time.monotonic(), loaded_at_wall=time.time(), projects={})

    cache = SnapshotCache(loader, ttl=60, max_stale=120)
    threads = [threading.Thread(target=cache.refresh) for _ in range(10)]
    for t in threads:
        t.start()
    # The first call loads (and waits for the gate); the nine others join its load.
    joined = wait_until(lambda: cache.coalesced == 9)
    gate.set()
    assert joined, cache.status()
    for t in threads:
        t.join()
    assert len(loads) == 1
    first = cache.current()
    cache.refresh()
    assert len(loads) == 2 and loads[1] is first and cache.current() is not first
    assert cache.status()["coalesced"] == 9


def test_failed_refresh_keeps_the_last_good_snapshot() -> None:
    calls = {"n": 0}

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ServiceUnavailable("down")
        return CatalogSnapshot(loaded_at=time.monotonic(), loaded_at_wall=time.time(), projects={})

    cache = SnapshotCache(loader, ttl=60, max_stale=120)
    cache.refresh()
    good = cache.current()
    assert cache.refresh() is good
    assert cache.current() is good
    assert cache.status()["last_error"] == "down" and cache.failures == 1


def test_a_late_background_refresh_is_made_up_in_line_not_refused() -> None:
    """A healthy registry whose background refresh is merely late (the thread descheduled on a
    busy machine, past a small max_stale) must not turn reads away: the reader refreshes once,
    coalesced, and gets the new snapshot. Before, it answered "could not be refreshed for 0s"."""
    now = [0.0]
    loads: list[float] = []

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        loads.append(now[0])
        return CatalogSnapshot(loaded_at=now[0], loaded_at_wall=time.time(), projects={})

    cache = SnapshotCache(loader, ttl=0.05, max_stale=0.05, clock=lambda: now[0])
    cache.refresh()
    now[0] = 0.2  # no background thread ran: the snapshot is past max_stale
    assert cache.current().loaded_at == 0.2
    assert loads == [0.0, 0.2]


def test_a_failing_registry_is_not_retried_on_the_read_path() -> None:
    """Once a refresh has failed, readers past max_stale are refused at once: each read does not
    add a registry call to a backend that is already down (the background thread backs off)."""
    now = [0.0]
    calls = {"n": 0}

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ServiceUnavailable("down")
        return CatalogSnapshot(loaded_at=now[0], loaded_at_wall=time.time(), projects={})

    cache = SnapshotCache(loader, ttl=0.05, max_stale=0.05, clock=lambda: now[0])
    cache.refresh()
    now[0] = 0.2
    with pytest.raises(ServiceUnavailable, match="could not be refreshed"):
        cache.current()  # the in-line refresh fails
    for _ in range(5):
        with pytest.raises(ServiceUnavailable, match="registry: down"):
            cache.current()
    assert calls["n"] == 2


def test_new_table_appears_after_one_ttl(tmp_path: Path) -> None:
    settings, catalog = build_catalog(tmp_path / "home")
    server = start_server(settings, catalog, snapshot_ttl_seconds=0.2)
    try:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        with pytest.raises(pa.ArrowKeyError):
            query(client, options, "SELECT * FROM w.ns.fresh")
        catalog.tables.create_table("p.w.ns.fresh", pa.table({"a": [1, 2]}).to_reader())
        deadline = time.monotonic() + 5
        while True:
            try:
                assert query(client, options, "SELECT sum(a) AS s FROM w.ns.fresh").to_pylist() == [{"s": 3}]
                break
            except pa.ArrowKeyError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        server.stop(grace=0)
        catalog.close()


def until(condition: Any, what: str, bound: float = 120.0) -> None:
    """Wait for ``condition()`` (the background refresh's doing); ``bound`` only catches a hang."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, f"waited {bound:.0f}s for {what}"
        time.sleep(0.01)

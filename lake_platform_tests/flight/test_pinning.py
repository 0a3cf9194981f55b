"""Tickets read exactly the snapshots they were planned on (issue 7), on one replica:

- append drift: plan, append, DoGet returns only the planned version's rows;
- drop and recreate: plan, drop, recreate with other data, DoGet fails cleanly (never the
  replacement's rows), with a grace-period drop (data still in the trash) and a purging one;
- retention: version cleanup keeps what a live ticket needs (both sides of the boundary, on an
  injected clock), and a ticket whose version was cleaned up fails cleanly;
- DoGet reads nothing from the registry.

The same scenarios across two server processes are in ``test_replicas``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.flight.conftest import (
    build_catalog,
    fetch,
    login,
    plan,
    serving,
    start_server,
    wait_until,
)
from lake_platform_tests.flight.helpers import CountingStore, tagged_rows


def current_ref(server: Any, name: str) -> Any:
    cached = server.snapshots.current().project("p").table("w", "ns", name)
    return cached.ref if cached is not None else None


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog]) -> Iterator[Any]:
    settings, catalog = lake
    with serving(settings, catalog, snapshot_ttl_seconds=0.1) as srv:
        yield srv


def test_append_drift_returns_only_the_planned_rows(lake: tuple[LakeSettings, Catalog], server: Any) -> None:
    _, catalog = lake
    catalog.tables.create_table("p.w.ns.drift", tagged_rows(100, tag="planned"))
    assert wait_until(lambda: current_ref(server, "drift") is not None)
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    star = plan(client, options, "SELECT id, tag FROM w.ns.drift")
    agg = plan(client, options, "SELECT count(*) AS n, max(id) AS top FROM w.ns.drift")
    catalog.tables.append("p.w.ns.drift", tagged_rows(50, start=1000, tag="appended"))
    assert wait_until(lambda: current_ref(server, "drift").version == 2)
    got = fetch(client, options, star)
    assert got.num_rows == 100 and set(got.column("tag").to_pylist()) == {"planned"}
    assert sorted(got.column("id").to_pylist()) == list(range(100))
    assert fetch(client, options, agg).to_pylist() == [{"n": 100, "top": 99}]
    # The same ticket again, after the next append: still the planned version.
    catalog.tables.append("p.w.ns.drift", tagged_rows(5, start=2000, tag="appended"))
    assert wait_until(lambda: current_ref(server, "drift").version == 3)
    assert fetch(client, options, agg).to_pylist() == [{"n": 100, "top": 99}]
    assert fetch(
        client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.drift")
    ).to_pylist() == [{"n": 155}]


@pytest.mark.parametrize("purge", [False, True], ids=["grace-drop", "purging-drop"])
def test_drop_and_recreate_fails_cleanly(
    lake: tuple[LakeSettings, Catalog], server: Any, purge: bool
) -> None:
    _, catalog = lake
    name = f"dr_{int(purge)}"
    catalog.tables.create_table(f"p.w.ns.{name}", tagged_rows(10, tag="original"))
    assert wait_until(lambda: current_ref(server, name) is not None)
    old_incarnation = current_ref(server, name).incarnation
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    info = plan(client, options, f"SELECT id, tag FROM w.ns.{name}")
    catalog.trash.drop_table(f"p.w.ns.{name}", purge=purge)
    catalog.tables.create_table(f"p.w.ns.{name}", tagged_rows(3, start=500, tag="replacement"))
    assert wait_until(lambda: current_ref(server, name).incarnation != old_incarnation)
    with pytest.raises(pa.ArrowKeyError) as err:  # NOT_FOUND
        fetch(client, options, info)
    message = str(err.value)
    assert f"w.ns.{name}" in message and ("dropped" in message or "no longer available" in message)
    assert "Traceback" not in message and "/" not in message.split("Detail")[0].replace("w.ns.", "")
    # A new plan reads the replacement.
    assert fetch(
        client, options, plan(client, options, f"SELECT count(*) AS n FROM w.ns.{name}")
    ).to_pylist() == [{"n": 3}]


def test_cleanup_keeps_what_a_live_ticket_needs(tmp_path: Path) -> None:
    """Both sides of the boundary, on one injected clock shared by the catalog's cleanup and
    the server's ticket expiry: inside the ticket lifetime the pinned version survives cleanup
    and the ticket reads it; past it the version is cleaned up and the ticket is expired."""
    lifetime = 60.0
    settings, catalog = build_catalog(
        tmp_path / "home", ticket_lifetime_seconds=lifetime, reader_max_stale_seconds=0.0
    )
    clock = ManualClock()
    maintainer = Catalog(settings, clock=clock, heartbeat=False)
    server = start_server(settings, catalog, snapshot_ttl_seconds=0.1, clock=lambda: clock.wall_ms() / 1000)
    try:
        catalog.tables.create_table("p.w.ns.ret", tagged_rows(10, tag="v1"))
        assert wait_until(lambda: current_ref(server, "ret") is not None)
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, options, "SELECT id, tag FROM w.ns.ret")
        catalog.tables.append("p.w.ns.ret", tagged_rows(5, start=10, tag="v2"))
        assert wait_until(lambda: current_ref(server, "ret").version == 2)

        clock.advance(lifetime - 5)  # inside the lifetime
        result = maintainer.versions.cleanup("p.w.ns.ret", retention=timedelta(0))
        assert result.status == "nothing-to-do"
        got = fetch(client, options, info)
        assert got.num_rows == 10 and set(got.column("tag").to_pylist()) == {"v1"}

        clock.advance(10)  # past it
        result = maintainer.versions.cleanup("p.w.ns.ret", retention=timedelta(0))
        assert result.status == "committed" and result.detail["versions_removed"] == [1]
        with pytest.raises(pa.ArrowInvalid, match="expired"):
            fetch(client, options, info)
    finally:
        server.stop(grace=0)
        maintainer.close()
        catalog.close()


def test_cleaned_up_version_fails_cleanly(tmp_path: Path) -> None:
    """Plan, clean the planned version up (a catalog whose settings have a tiny ticket lifetime,
    so cleanup does not wait for the ticket), DoGet: a clean NOT_FOUND, never the newer rows,
    although this replica opened (and cached) that version when it planned."""
    settings, catalog = build_catalog(tmp_path / "home")
    server = start_server(settings, catalog, snapshot_ttl_seconds=0.1)
    clock = ManualClock()
    maintainer = Catalog(
        settings.model_copy(update={"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0}),
        clock=clock,
        heartbeat=False,
    )
    try:
        catalog.tables.create_table("p.w.ns.gone", tagged_rows(10, tag="v1"))
        assert wait_until(lambda: current_ref(server, "gone") is not None)
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, options, "SELECT id, tag FROM w.ns.gone")
        catalog.tables.append("p.w.ns.gone", tagged_rows(5, start=10, tag="v2"))
        clock.advance(10)
        assert maintainer.versions.cleanup("p.w.ns.gone", retention=timedelta(0)).detail[
            "versions_removed"
        ] == [1]
        with pytest.raises(pa.ArrowKeyError, match=r"version 1 of p\.w\.ns\.gone is no longer available"):
            fetch(client, options, info)
    finally:
        server.stop(grace=0)
        maintainer.close()
        catalog.close()


def test_a_version_pinned_just_before_it_is_superseded_survives_cleanup(tmp_path: Path) -> None:
    lifetime = 1.0
    settings, catalog = build_catalog(
        tmp_path / "home", ticket_lifetime_seconds=lifetime, reader_max_stale_seconds=0.0
    )
    server = start_server(settings, catalog, snapshot_ttl_seconds=0.05)
    try:
        catalog.tables.create_table("p.w.ns.old", tagged_rows(10, tag="v1"))
        assert wait_until(lambda: current_ref(server, "old") is not None)
        time.sleep(lifetime + 0.2)  # v1 is now older than the ticket lifetime, but still current
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, options, "SELECT id, tag FROM w.ns.old")  # valid for `lifetime`
        catalog.tables.append("p.w.ns.old", tagged_rows(5, start=10, tag="v2"))
        catalog.versions.cleanup("p.w.ns.old", retention=timedelta(0))
        got = fetch(client, options, info)  # the ticket is still inside its lifetime
        assert set(got.column("tag").to_pylist()) == {"v1"}
    finally:
        server.stop(grace=0)
        catalog.close()


def test_doget_reads_nothing_from_the_registry(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    store = CountingStore(catalog.store)
    srv = start_server(settings, catalog, store=store, snapshot_ttl_seconds=3600)
    try:
        client, options = login(f"grpc://127.0.0.1:{srv.port}")
        info = plan(client, options, "SELECT count(*) AS n FROM w.ns.t a JOIN w.ns.multi b USING (id)")
        before = store.reads
        store.failing = True  # any registry read would now fail
        assert fetch(client, options, info).to_pylist() == [{"n": 500}]
        assert store.reads == before
    finally:
        store.failing = False
        srv.stop(grace=0)


def test_a_ticket_is_refused_with_a_clear_error_when_not_a_statement(server: Any) -> None:
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    with pytest.raises(pa.ArrowInvalid):
        client.do_get(fl.Ticket(b"\x00" * 10), options).read_all()


def test_snapshot_staleness_never_exceeds_what_cleanup_allows_for(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    strict = settings.model_copy(update={"reader_max_stale_seconds": 10.0})
    srv = start_server(strict, catalog, snapshot_max_stale_seconds=120)
    try:
        assert srv.snapshots.max_stale == 10.0
    finally:
        srv.stop(grace=0)

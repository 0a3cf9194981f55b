"""Two endpoint processes that share only settings (keys, registry, storage): a ticket planned
on replica A executes on replica B, and B keeps every pinning promise A made (append drift,
drop and recreate, retention), without asking the registry for anything.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.flight.conftest import build_catalog, fetch, login, plan, wait_until
from lake_platform_tests.flight.helpers import tagged_rows
from lake_platform_tests.flight.server_process import launch, port_of

pytestmark = pytest.mark.slow

KEYS = f"k1:{secrets.token_hex(32)},k2:{secrets.token_hex(32)}"


class Replica:
    def __init__(self, home: Path, **options: Any) -> None:
        args = [f"{k}={v}" for k, v in {"keys": KEYS, "snapshot_ttl_seconds": 0.1, **options}.items()]
        self.proc = launch(home, *args)

    def ready(self) -> Replica:
        self.port = port_of(self.proc)
        self.uri = f"grpc://127.0.0.1:{self.port}"
        self.client, self.options = login(self.uri)
        return self

    def plan(self, sql: str) -> Any:
        return plan(self.client, self.options, sql)

    def fetch(self, info: Any) -> pa.Table:
        return fetch(self.client, self.options, info)

    def count(self, table: str) -> int:
        return self.fetch(self.plan(f"SELECT count(*) AS n FROM w.ns.{table}")).column("n")[0].as_py()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog, Path]]:
    home = tmp_path_factory.mktemp("replicas") / "home"
    settings, catalog = build_catalog(home)
    try:
        yield settings, catalog, home
    finally:
        catalog.close()


@pytest.fixture(scope="module")
def replicas(lake: tuple[LakeSettings, Catalog, Path]) -> Iterator[tuple[Replica, Replica]]:
    home = lake[2]
    a, b = Replica(home), Replica(home)  # both start at once
    try:
        a.ready()
        b.ready()
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_a_ticket_from_a_executes_on_b(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    info = a.plan("SELECT id, s FROM w.ns.t WHERE id < 5 ORDER BY id")
    assert b.fetch(info).column("id").to_pylist() == [0, 1, 2, 3, 4]
    # A's bearer token is good on B as well (same keys).
    assert fetch(b.client, a.options, info).num_rows == 5


def test_append_drift_on_the_other_replica(
    lake: tuple[LakeSettings, Catalog, Path], replicas: tuple[Replica, Replica]
) -> None:
    _, catalog, _ = lake
    a, b = replicas
    catalog.tables.create_table("p.w.ns.rdrift", tagged_rows(40, tag="planned"))
    assert wait_until(lambda: a.count("rdrift") == 40)
    info = a.plan("SELECT id, tag FROM w.ns.rdrift")
    catalog.tables.append("p.w.ns.rdrift", tagged_rows(7, start=100, tag="appended"))
    assert wait_until(lambda: b.count("rdrift") == 47)  # B has seen the append
    for replica in (b, a):
        got = replica.fetch(info)
        assert got.num_rows == 40 and set(got.column("tag").to_pylist()) == {"planned"}


def test_drop_and_recreate_on_the_other_replica(
    lake: tuple[LakeSettings, Catalog, Path], replicas: tuple[Replica, Replica]
) -> None:
    _, catalog, _ = lake
    a, b = replicas
    catalog.tables.create_table("p.w.ns.rdrop", tagged_rows(10, tag="original"))
    assert wait_until(lambda: a.count("rdrop") == 10)
    info = a.plan("SELECT id, tag FROM w.ns.rdrop")
    catalog.trash.drop_table("p.w.ns.rdrop")
    catalog.tables.create_table("p.w.ns.rdrop", tagged_rows(3, start=500, tag="replacement"))
    assert wait_until(lambda: b.count("rdrop") == 3 and a.count("rdrop") == 3)
    for replica in (b, a):
        with pytest.raises(pa.ArrowKeyError, match=r"w\.ns\.rdrop.*dropped"):
            replica.fetch(info)


def test_retention_on_the_other_replica(
    lake: tuple[LakeSettings, Catalog, Path], replicas: tuple[Replica, Replica]
) -> None:
    settings, catalog, _ = lake
    a, b = replicas
    catalog.tables.create_table("p.w.ns.rgone", tagged_rows(10, tag="v1"))
    assert wait_until(lambda: a.count("rgone") == 10)
    info = a.plan("SELECT id, tag FROM w.ns.rgone")
    catalog.tables.append("p.w.ns.rgone", tagged_rows(5, start=10, tag="v2"))
    clock = ManualClock()
    clock.advance(10)
    maintainer = Catalog(
        settings.model_copy(update={"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0}),
        clock=clock,
        heartbeat=False,
    )
    try:
        assert maintainer.versions.cleanup("p.w.ns.rgone", retention=timedelta(0)).detail[
            "versions_removed"
        ] == [1]
    finally:
        maintainer.close()
    for replica in (b, a):
        with pytest.raises(pa.ArrowKeyError, match=r"version 1 of w\.ns\.rgone is no longer available"):
            replica.fetch(info)


def test_time_travel_is_pinned_across_replicas(
    lake: tuple[LakeSettings, Catalog, Path], replicas: tuple[Replica, Replica]
) -> None:
    """A tag read planned on A executes on B at the version A resolved, though the tag moved and
    the table grew in between; an explicit version reads the same on both."""
    _, catalog, _ = lake
    a, b = replicas
    catalog.tables.create_table("p.w.ns.rtravel", tagged_rows(8, tag="v1"))
    catalog.tags.create_tag("p.w.ns.rtravel", "eod", 1)
    catalog.tables.append("p.w.ns.rtravel", tagged_rows(4, start=8, tag="v2"))
    sql = 'SELECT id, tag FROM w.ns."rtravel@tag:eod" ORDER BY id'
    assert wait_until(lambda: a.fetch(a.plan(sql)).num_rows == 8)
    info = a.plan(sql)
    catalog.tags.create_tag("p.w.ns.rtravel", "eod", 2, replace=True)
    catalog.tables.append("p.w.ns.rtravel", tagged_rows(3, start=12, tag="v3"))
    # Each replica has seen the moved tag (so versions 2 and 3): a replica's snapshot may lag
    # the registry (up to LAKE_FLIGHT_SNAPSHOT_MAX_STALE_SECONDS), and one that has not seen
    # version 2 plans "rtravel@v2" as a version that does not exist.
    assert wait_until(lambda: all(r.fetch(r.plan(sql)).num_rows == 12 for r in (a, b)))
    for replica in (b, a):
        got = replica.fetch(info)
        assert got.column("id").to_pylist() == list(range(8)) and set(got.column("tag").to_pylist()) == {"v1"}
    v2 = 'SELECT count(*) AS n FROM w.ns."rtravel@v2"'
    assert b.fetch(a.plan(v2)).column("n")[0].as_py() == a.fetch(b.plan(v2)).column("n")[0].as_py() == 12

"""Two endpoint processes that share only settings (keys, registry, storage): a ticket planned
on replica A executes on replica B, and B keeps every pinning promise A made (append drift,
drop and recreate, retention), without asking the registry for anything.
"""

from __future__ import annotations

import json
import secrets
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
from lake_platform_tests.flight.conftest import build_catalog, fetch, login, plan, wait_until
from lake_platform_tests.flight.helpers import tagged_rows
from lake_platform_tests.flight.server_process import launch, port_of

pytestmark = pytest.mark.slow

KEYS = f"k1:{secrets.token_hex(32)},k2:{secrets.token_hex(32)}"


class Replica:
    def __init__(self, home: Path, **options: Any) -> None:
        args = [
            f"{k}={v}"
            for k, v in {
                "keys": KEYS,
                "snapshot_ttl_seconds": 0.1,
                "operator_project": "p",
                **options,
            }.items()
        ]
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

    def snapshot_loads(self) -> int:
        """Catalog snapshots this replica has loaded (its health answer to p, the operator project)."""
        [result] = list(self.client.do_action(fl.Action("health", b""), self.options))
        return json.loads(result.body.to_pybytes())["snapshot"]["loads"]

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
    loads = {r: r.snapshot_loads() for r in (a, b)}
    catalog.trash.drop_table("p.w.ns.rdrop")
    catalog.tables.create_table("p.w.ns.rdrop", tagged_rows(3, start=500, tag="replacement"))
    # Each replica has loaded a snapshot begun after the drop (the one in flight may have begun
    # before): a query alone does not tell, as a replica reads a table its snapshot lacks.
    assert wait_until(lambda: all(r.snapshot_loads() >= loads[r] + 2 for r in (a, b)))
    assert b.count("rdrop") == 3 and a.count("rdrop") == 3
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
        with pytest.raises(pa.ArrowKeyError, match=r"version 1 of p\.w\.ns\.rgone is no longer available"):
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
    # Each replica has seen the moved tag: a replica's snapshot may lag the registry (up to
    # LAKE_FLIGHT_SNAPSHOT_MAX_STALE_SECONDS), and a tag it holds is read as it holds it (a
    # name it lacks is read from the registry: the lagging replica's tests below).
    assert wait_until(lambda: all(r.fetch(r.plan(sql)).num_rows == 12 for r in (a, b)))
    for replica in (b, a):
        got = replica.fetch(info)
        assert got.column("id").to_pylist() == list(range(8)) and set(got.column("tag").to_pylist()) == {"v1"}
    v2 = 'SELECT count(*) AS n FROM w.ns."rtravel@v2"'
    assert b.fetch(a.plan(v2)).column("n")[0].as_py() == a.fetch(b.plan(v2)).column("n")[0].as_py() == 12


@pytest.fixture(scope="module")
def lagging(lake: tuple[LakeSettings, Catalog, Path]) -> Iterator[Replica]:
    """A replica whose snapshot never refreshes during the tests: loaded once, with ``rlag`` at
    version 1 and nothing of what the tests commit after."""
    _, catalog, home = lake
    catalog.tables.create_table("p.w.ns.rlag", tagged_rows(10, tag="v1"))
    replica = Replica(home, snapshot_ttl_seconds=3600)
    try:
        yield replica.ready()
    finally:
        replica.stop()


def test_a_lagging_replica_reads_a_version_tag_branch_and_table_committed_since(
    lake: tuple[LakeSettings, Catalog, Path], lagging: Replica
) -> None:
    """Named right after the commit on another process, the new version, tag, branch and table
    are answered at once: the replica reads that table from the registry on the miss, once."""
    _, catalog, _ = lake
    catalog.tables.append("p.w.ns.rlag", tagged_rows(5, start=10, tag="v2"))
    catalog.tags.create_tag("p.w.ns.rlag", "fresh", 2)
    catalog.tables.create_table("p.w.ns.rlagnew", tagged_rows(3, start=100, tag="new"))
    catalog.branches.create_branch("p.w.ns.rlagnew", "dev")
    assert lagging.count('"rlag@v2"') == 15
    assert lagging.count('"rlag@tag:fresh"') == 15
    assert lagging.count("rlagnew") == 3
    assert lagging.count('"rlagnew@branch:dev"') == 3
    # Not a refresh of everything: the current name still reads the snapshot's version, and one
    # query reads each name at one version.
    both = lagging.fetch(
        lagging.plan(
            'SELECT (SELECT count(*) FROM w.ns.rlag) AS now, (SELECT count(*) FROM w.ns."rlag@v2") AS v2'
        )
    )
    assert both.to_pylist() == [{"now": 10, "v2": 15}]


def test_a_lagging_replica_reads_a_table_in_a_namespace_and_a_warehouse_created_since(
    lake: tuple[LakeSettings, Catalog, Path], lagging: Replica
) -> None:
    """The containers are new to its snapshot too: the name goes through the same one read."""
    _, catalog, _ = lake
    catalog.containers.create_namespace("p.w.nslag")
    catalog.tables.create_table("p.w.nslag.t", tagged_rows(2, tag="new"))
    catalog.containers.create_warehouse("p.wlag")
    catalog.containers.create_namespace("p.wlag.ns")
    catalog.tables.create_table("p.wlag.ns.t", tagged_rows(6, tag="new"))
    for sql_name, rows in (("w.nslag.t", 2), ("wlag.ns.t", 6)):
        got = lagging.fetch(lagging.plan(f"SELECT count(*) AS n FROM {sql_name}"))
        assert got.column("n")[0].as_py() == rows


def test_a_lagging_replica_still_refuses_what_does_not_exist(lagging: Replica) -> None:
    """A name that really does not exist is NOT_FOUND with the message it always had."""
    for sql_name, message in (
        ('"rlag@v9"', r"version 9 of p\.w\.ns\.rlag does not exist or was cleaned up"),
        ('"rlag@tag:nope"', r"no tag nope on p\.w\.ns\.rlag"),
        ('"rlag@branch:nope"', r"no branch nope on p\.w\.ns\.rlag"),
        ("rlagnothing", r"table w\.ns\.rlagnothing not found"),
    ):
        for _ in range(2):  # the second time from what the first one read
            with pytest.raises(pa.ArrowKeyError, match=message):
                lagging.plan(f"SELECT count(*) FROM w.ns.{sql_name}")


def test_a_lagging_replica_serves_a_ticket_pinned_past_its_snapshot(
    lake: tuple[LakeSettings, Catalog, Path], replicas: tuple[Replica, Replica], lagging: Replica
) -> None:
    """A ticket another replica planned on a version (and a table) this one has not seen is
    served: a ticket carries its snapshots, so DoGet needs nothing of the replica's catalog."""
    _, catalog, _ = lake
    a, _ = replicas
    catalog.tables.create_table("p.w.ns.rlagpin", tagged_rows(4, tag="v1"))
    catalog.tables.append("p.w.ns.rlagpin", tagged_rows(2, start=4, tag="v2"))
    assert wait_until(lambda: a.count("rlagpin") == 6)
    info = a.plan("SELECT id, tag FROM w.ns.rlagpin ORDER BY id")
    assert lagging.fetch(info).column("id").to_pylist() == list(range(6))

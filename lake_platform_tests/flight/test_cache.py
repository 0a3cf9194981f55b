"""The snapshot cache over ADBC: a hot table's queries return the same rows cached and uncached,
including a ticket planned on Lance (a miss) and served from memory (its DoGet a hit), with the
stream's schema equal to the FlightInfo's; a new version is read from Lance, not the old entry."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import fetch, login, plan, serving, t_rows, wait_until

SQL = [
    "SELECT * FROM w.ns.warm ORDER BY id",
    "SELECT id % 7 AS k, count(*) AS n, sum(x) AS total FROM w.ns.warm GROUP BY id % 7 ORDER BY k",
    "SELECT s FROM w.ns.warm WHERE id = 1234",
]


def _adbc(conn: Any, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def test_hot_table_over_adbc(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    catalog.tables.create_table("p.w.ns.warm", t_rows(5000).to_reader())
    with (
        serving(settings, catalog, cache_bytes=64 << 20) as server,
        serving(settings, catalog, cache_bytes=0) as plain,
    ):
        import adbc_driver_flightsql.dbapi as fsql

        def connect(port: int) -> Any:
            return fsql.connect(
                f"grpc://127.0.0.1:{port}",
                db_kwargs={"username": "alice", "password": "alice-password"},
                autocommit=True,
            )

        with connect(server.port) as conn, connect(plain.port) as ref:
            expected = {sql: _adbc(ref, sql) for sql in SQL}
            catalog.policies.set_policy("p.w.ns.warm", {"cache": "hot"})
            assert wait_until(
                lambda: server.snapshots.current().project("p").table("w", "ns", "warm").cache == "hot"
            )
            client, options = login(f"grpc://127.0.0.1:{server.port}")
            info = plan(client, options, SQL[0])  # a miss: planned on Lance, the load starts
            assert server.engine.cache.wait_idle() and server.engine.cache.stats()["entries"] == 1
            got = fetch(client, options, info)  # DoGet re-plans on the cached snapshot
            assert got.schema == info.schema and got.equals(expected[SQL[0]])
            hits = server.engine.cache.stats()["hits"]
            for sql in SQL:
                assert _adbc(conn, sql).equals(expected[sql]), sql
            # Each planned once, on the cached snapshot: GetFlightInfo and DoGet reuse that plan.
            assert server.engine.cache.stats()["hits"] >= hits + len(SQL)
            assert server.health()["cache"]["entries"] == 1

            catalog.tables.append("p.w.ns.warm", t_rows(10, start=5000).to_reader())
            assert wait_until(
                lambda: _adbc(conn, "SELECT count(*) AS n FROM w.ns.warm").column("n")[0].as_py() == 5010
            )
            assert _adbc(conn, 'SELECT count(*) AS n FROM w.ns."warm@v1"').column("n")[0].as_py() == 5000

"""The endpoint's cached schema follows a table's schema changes (issue 16): after an explicit
``alter`` or an append that adds or widens columns, the next snapshot refresh serves the new
columns, to raw Flight clients and to ADBC alike; a ticket planned before keeps its version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lake_platform_tests.flight.conftest import PASSWORDS, build_catalog, fetch, login, plan, query, serving

T = "p.w.ns.t"


def test_flight_sees_added_renamed_and_widened_columns_after_the_refresh(tmp_path: Path) -> None:
    settings, catalog = build_catalog(tmp_path / "home")
    try:
        with serving(settings, catalog, snapshot_ttl_seconds=3600) as server:
            uri = f"grpc://127.0.0.1:{server.port}"
            client, options = login(uri)
            sql = "SELECT * FROM w.ns.t WHERE id < 2"
            assert query(client, options, sql).schema.names == ["id", "s", "x"]
            before = plan(client, options, sql)  # pinned to the version before the changes

            catalog.alter.add_column(T, "note", "string")
            catalog.alter.rename_column(T, "s", "label")
            catalog.policies.set_policy(T, {"schema_evolution": "widen"})
            catalog.tables.append(
                T,
                pa.table(
                    {
                        "id": pa.array([5000], pa.int64()),
                        "label": ["new"],
                        "x": pa.array([1.0], pa.float64()),
                        "note": pa.array(["n"], pa.large_string()),
                        "extra": pa.array([7], pa.int32()),
                    }
                ).to_reader(),
            )
            # The cache is long-lived (TTL 1 h): until its refresh, the endpoint serves what it had.
            assert query(client, options, sql).schema.names == ["id", "s", "x"]
            server.snapshots.refresh()  # what the background refresh does within the TTL

            info = plan(client, options, "SELECT * FROM w.ns.t WHERE id >= 4999 ORDER BY id")
            assert info.schema.names == ["id", "label", "x", "note", "extra"]
            assert info.schema.field("note").type == pa.large_string()
            result = fetch(client, options, info)
            assert result.schema == info.schema
            assert result.to_pylist() == [{"id": 5000, "label": "new", "x": 1.0, "note": "n", "extra": 7}]
            old_rows = query(client, options, "SELECT note, extra FROM w.ns.t WHERE id = 0")
            assert old_rows.to_pylist() == [{"note": None, "extra": None}]

            # A ticket planned before the changes still reads its own version's columns.
            assert fetch(client, options, before).schema.names == ["id", "s", "x"]

            # ADBC, a client that caches nothing itself, sees the same.
            import adbc_driver_flightsql.dbapi as fsql

            with fsql.connect(
                uri, db_kwargs={"username": "alice", "password": PASSWORDS["alice"]}, autocommit=True
            ) as conn:
                with conn.cursor() as cur:
                    cur.execute("SELECT * FROM w.ns.t LIMIT 1")
                    assert [d[0] for d in cur.description] == ["id", "label", "x", "note", "extra"]
                    schema = conn.adbc_get_table_schema("t", catalog_filter="w", db_schema_filter="ns")
                    assert schema.names == ["id", "label", "x", "note", "extra"]

            catalog.alter.drop_column(T, "note")
            server.snapshots.refresh()
            assert query(client, options, "SELECT * FROM w.ns.t LIMIT 1").schema.names == [
                "id",
                "label",
                "x",
                "extra",
            ]
    finally:
        catalog.close()

"""Filters reach Lance: a point query on an indexed column, planned and streamed by the query
engine, is answered through the scalar index and reads a small fraction of the table's bytes;
the same predicates give the same rows with and without the index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine.indexes import scan_io
from lake_platform.engine.lance_engine import version_stats
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import load_snapshot
from lake_platform.settings import load_settings

T = "p.w.ns.big"
ROWS = 400_000


def data(start: int, stop: int) -> pa.RecordBatchReader:
    ids = pa.array(range(start, stop), pa.int64())
    return pa.table(
        {
            "id": ids,
            "k": pa.array([i % 97 for i in range(start, stop)], pa.int32()),
            "s": pa.array([None if i % 13 == 0 else f"name-{i:08d}" for i in range(start, stop)]),
        }
    ).to_reader()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Catalog]]:
    settings = load_settings(home=tmp_path_factory.mktemp("indexes") / "home")
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table(T, data(0, ROWS // 2))
    catalog.tables.append(T, data(ROWS // 2, ROWS))
    try:
        yield settings, catalog
    finally:
        catalog.close()


def query(engine: QueryEngine, catalog: Catalog, sql: str) -> tuple[list[dict[str, Any]], Any]:
    planned = engine.plan(sql, load_snapshot(catalog.store).project("p"))
    batches = list(engine.stream(planned))
    rows = pa.Table.from_batches(batches, schema=planned.schema).to_pylist() if batches else []
    (ref,) = planned.refs
    return rows, ref


def explain(engine: QueryEngine, catalog: Catalog, sql: str) -> str:
    planned = engine.plan("EXPLAIN " + sql, load_snapshot(catalog.store).project("p"))
    table = pa.Table.from_batches(list(engine.stream(planned)))
    return "\n".join(table.column("plan").to_pylist())


POINT = "SELECT id, k, s FROM w.ns.big WHERE id = 4242"
PREDICATES = [
    "id = 4242",
    "id >= 199990 AND id < 200010",
    "id IN (0, 13, 399999, 1000000)",
    "s IS NULL AND id < 200",
    "k = 5 AND id BETWEEN 1000 AND 2000",
]


def test_a_point_query_uses_the_index_and_reads_a_fraction_of_the_table(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits())
    # Without an index the filter is still pushed into Lance's scan (exactly: DataFusion keeps
    # no FilterExec of its own above it), which then reads the whole column.
    plan = explain(engine, catalog, POINT)
    assert "full_filters=[w.ns.big.id = Int64(4242)]" in plan
    assert not [line for line in plan.splitlines() if line.strip().startswith("FilterExec")]
    rows, ref = query(engine, catalog, POINT)
    unindexed_bytes, _ = scan_io(engine.dataset(ref))
    assert rows == [{"id": 4242, "k": 4242 % 97, "s": "name-00004242"}]

    catalog.indexes.create_index(T, "id", "btree")
    plan = explain(engine, catalog, POINT)
    assert "ScalarIndexExec" in plan  # answered from the index, not a scan
    rows, ref = query(engine, catalog, POINT)
    dataset = engine.dataset(ref)
    scan_io(dataset)  # opening and planning read metadata: count only the query
    rows, _ = query(engine, catalog, POINT)
    indexed_bytes, _ = scan_io(dataset)
    table_bytes = version_stats(catalog.reads.open_table(T).dataset).data_bytes
    assert rows == [{"id": 4242, "k": 4242 % 97, "s": "name-00004242"}]
    assert 0 < indexed_bytes < table_bytes * 0.05, (indexed_bytes, table_bytes)
    assert indexed_bytes * 10 < unindexed_bytes, (indexed_bytes, unindexed_bytes)


def test_indexed_and_unindexed_answers_are_identical(lake: tuple[Any, Catalog], tmp_path: Path) -> None:
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits())
    if not catalog.indexes.list_indexes(T):
        catalog.indexes.create_index(T, "id", "btree")
    catalog.indexes.create_index(T, "s", "bitmap", replace=True)
    indexed_version = catalog.reads.open_table(T).version
    catalog.tables.append(T, data(ROWS, ROWS + 5000))  # an unindexed tail
    catalog.tables.delete_rows(T, "id % 7 = 0")
    got = {}
    for predicate in PREDICATES:
        rows, _ = query(engine, catalog, f"SELECT id, k, s FROM w.ns.big WHERE {predicate} ORDER BY id")
        got[predicate] = rows
    ds = catalog.reads.open_table(T).dataset
    for predicate in PREDICATES:
        plain = ds.to_table(filter=predicate, use_scalar_index=False, columns=["id", "k", "s"])
        assert got[predicate] == sorted(plain.to_pylist(), key=lambda r: r["id"]), predicate
    assert got["id = 4242"] == []  # deleted (4242 = 7 * 606)
    assert [r["id"] for r in got["id IN (0, 13, 399999, 1000000)"]] == [13, 399999]
    assert catalog.reads.open_table(T).version > indexed_version

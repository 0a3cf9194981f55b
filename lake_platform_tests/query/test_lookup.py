"""Key lookups on an indexed column read from Lance's scanner (``query/lookup.py``) return exactly
what DataFusion returns for the same plan; any other shape, an unindexed column or a literal of
another type stays with DataFusion; appended (unindexed) and deleted rows, the result-size limit
and pinned versions behave as on DataFusion."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import LakeError
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import load_snapshot
from lake_platform.query.stream import stream as datafusion_stream
from lake_platform.settings import load_settings

T = "p.w.ns.keys"


def data(start: int, stop: int) -> pa.RecordBatchReader:
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i % 10 for i in ids], pa.int32()),
            "s": pa.array([None if i % 13 == 0 else f"name-{i}" for i in ids]),
            "x": pa.array([i / 4 for i in ids], pa.float64()),
        }
    ).to_reader()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Catalog]]:
    settings = load_settings(home=tmp_path_factory.mktemp("lookup") / "home")
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table(T, data(0, 20_000))
    catalog.indexes.create_index(T, "id", "btree")
    catalog.indexes.create_index(T, "s", "btree")
    catalog.indexes.create_index(T, "k", "bitmap")
    try:
        yield settings, catalog
    finally:
        catalog.close()


def both(
    engine: QueryEngine, catalog: Catalog, sql: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """(rows through the engine, rows through DataFusion, whether Lance's scanner answered)."""
    planned = engine.plan(sql, load_snapshot(catalog.store).project("p"))
    ours = pa.Table.from_batches(list(engine.stream(planned)), planned.schema).to_pylist()
    theirs = pa.Table.from_batches(
        list(datafusion_stream(planned, engine.limits)), planned.schema
    ).to_pylist()
    return ours, theirs, planned.lookup is not None


DIRECT = [
    "SELECT * FROM w.ns.keys WHERE id = 4242",
    "SELECT s, id FROM w.ns.keys WHERE id = 77",
    "SELECT * FROM w.ns.keys WHERE id = 99999999",
    "SELECT id, x FROM w.ns.keys WHERE s = 'name-12345'",
    "SELECT id FROM w.ns.keys WHERE id = 130 AND s = 'name-130'",  # no such row: s is NULL there
    "SELECT id FROM w.ns.keys WHERE 5 = id",
    "SELECT id, s FROM w.ns.keys WHERE id = -5",  # no row, but a lookup all the same
    "SELECT id FROM w.ns.keys WHERE id = -9223372036854775807",
]
DATAFUSION = [
    "SELECT * FROM w.ns.keys WHERE k = 3 AND id < 50",  # k is int32, the literal Int64: coercion
    "SELECT * FROM w.ns.keys WHERE x = 2.5",  # x has no index (and is a float)
    "SELECT * FROM w.ns.keys WHERE id = 5 OR id = 6",
    "SELECT id + 1 AS n FROM w.ns.keys WHERE id = 5",
    "SELECT id AS n FROM w.ns.keys WHERE id = 5",
    "SELECT * FROM w.ns.keys WHERE id = 5 ORDER BY id",
    "SELECT * FROM w.ns.keys WHERE id = 5 LIMIT 1",
    "SELECT * FROM w.ns.keys WHERE id > 19990",
    "SELECT * FROM w.ns.keys WHERE s = 'it''s'",
    "SELECT count(*) AS n FROM w.ns.keys WHERE id = 5",
    # Int64's least value: Lance's filter text reads it as a Float64 it will not compare to id
    "SELECT id FROM w.ns.keys WHERE id = -9223372036854775808",
    "SELECT a.id FROM w.ns.keys a JOIN w.ns.keys b ON a.id = b.id WHERE a.id = 5",
    # a function call anywhere in the shape (DataFusion's Python binding cannot convert one)
    "SELECT id FROM w.ns.keys WHERE abs(id) = 5",
    "SELECT id FROM w.ns.keys WHERE upper(s) = 'NAME-5'",
    "SELECT id FROM w.ns.keys WHERE id = 5 AND abs(k) = 5",
    "SELECT upper(s) FROM w.ns.keys WHERE id = 5",
]


@pytest.mark.parametrize("sql", DIRECT)
def test_lookups_read_lance_directly_with_datafusions_rows(lake: tuple[Any, Catalog], sql: str) -> None:
    engine = QueryEngine(lake[0], QueryLimits())
    ours, theirs, direct = both(engine, lake[1], sql)
    assert direct and ours == theirs


@pytest.mark.parametrize("sql", DATAFUSION)
def test_other_queries_stay_with_datafusion(lake: tuple[Any, Catalog], sql: str) -> None:
    engine = QueryEngine(lake[0], QueryLimits())
    ours, theirs, direct = both(engine, lake[1], sql)
    assert not direct and ours == theirs


@pytest.mark.parametrize("column", ["null", "true", "interval", "Id"])
def test_a_column_named_as_a_word_of_lances_filter_text(lake: tuple[Any, Catalog], column: str) -> None:
    """Lance's filter text reads ``null = 2`` as NULL = 2 (no rows), ``true = 2`` and
    ``interval = 2`` as errors: the lookup names its column quoted."""
    settings, catalog = lake
    table = f"p.w.ns.word_{column.lower()}"
    catalog.tables.create_table(table, pa.table({column: pa.array(range(100), pa.int64())}).to_reader())
    catalog.indexes.create_index(table, column, "btree")
    engine = QueryEngine(settings, QueryLimits())
    sql = f'SELECT "{column}" FROM w.ns.word_{column.lower()} WHERE "{column}" = 2'
    ours, theirs, direct = both(engine, catalog, sql)
    assert direct and ours == theirs == [{column: 2}]


def test_appended_deleted_and_pinned_rows(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    catalog.tables.create_table("p.w.ns.moves", data(0, 1000))
    catalog.indexes.create_index("p.w.ns.moves", "id", "btree")
    engine = QueryEngine(settings, QueryLimits())
    sql = "SELECT id, s FROM w.ns.moves WHERE id = {}"
    old = engine.plan(sql.format(700), load_snapshot(catalog.store).project("p"))
    catalog.tables.append("p.w.ns.moves", data(1000, 1500))  # not in the index
    catalog.tables.delete_rows("p.w.ns.moves", "id = 700")
    ours, theirs, direct = both(engine, catalog, sql.format(1200))
    assert direct and ours == theirs == [{"id": 1200, "s": "name-1200"}]
    ours, theirs, direct = both(engine, catalog, sql.format(700))
    assert direct and ours == theirs == []
    # The version planned before the delete still has the row.
    pinned = engine.plan_pinned(old.sql, old.refs)
    rows = pa.Table.from_batches(list(engine.stream(pinned)), pinned.schema).to_pylist()
    assert pinned.lookup is not None and rows == [{"id": 700, "s": "name-700"}]


def test_the_result_size_limit_holds(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits(max_result_bytes=10))
    planned = engine.plan("SELECT * FROM w.ns.keys WHERE id = 42", load_snapshot(catalog.store).project("p"))
    with pytest.raises(LakeError, match="larger than"):
        list(engine.stream(planned))
    assert planned.lookup is not None


def test_a_kept_lookup_reuses_its_scanner(lake: tuple[Any, Catalog]) -> None:
    """A plan run again (a cursor re-running its query) reads through the scanner its first run
    made; runs of one plan at once, and another plan, each get their rows."""
    engine = QueryEngine(lake[0], QueryLimits())
    view = load_snapshot(lake[1].store).project("p")
    planned = engine.plan("SELECT id, s FROM w.ns.keys WHERE id = 4242", view)
    runs = [pa.Table.from_batches(list(engine.stream(planned)), planned.schema).to_pylist() for _ in range(3)]
    assert runs == [[{"id": 4242, "s": "name-4242"}]] * 3
    assert engine.scanners.stats() == {"entries": 1, "built": 1, "reused": 2}
    # Two runs of the same plan interleaved: each reader reads the whole result.
    first, second = engine.stream(planned), engine.stream(planned)
    a, b = next(first), next(second)
    assert a.to_pylist() == b.to_pylist() == [{"id": 4242, "s": "name-4242"}]
    assert list(first) == list(second) == []
    other = engine.plan("SELECT id, s FROM w.ns.keys WHERE id = 77", view)
    assert pa.Table.from_batches(list(engine.stream(other)), other.schema).to_pylist() == [
        {"id": 77, "s": "name-77"}
    ]
    assert engine.scanners.stats() == {"entries": 2, "built": 2, "reused": 4}


# -- a prepared lookup executed with new values: planned once, answered with those values --------


def rows(engine: QueryEngine, planned: Any) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(engine.stream(planned)), planned.schema).to_pylist()


def indexed_table(lake: tuple[Any, Catalog], name: str) -> tuple[QueryEngine, Catalog]:
    """A new table ``p.w.ns.<name>`` of 1,000 rows with a BTREE on ``id``, and a new engine."""
    settings, catalog = lake
    catalog.tables.create_table(f"p.w.ns.{name}", data(0, 1000))
    catalog.indexes.create_index(f"p.w.ns.{name}", "id", "btree")
    return QueryEngine(settings, QueryLimits()), catalog


def bound(*values: Any) -> pa.RecordBatch:
    """One row of parameters, as ADBC binds them (positional; the names do not matter)."""
    return pa.record_batch([pa.array([v]) for v in values], names=[str(i) for i in range(len(values))])


def plan_id(engine: QueryEngine, view: Any, table: str, key: int, scope: str) -> Any:
    """The key lookup of ``key`` in ``p.w.ns.<table>``: one prepared text with the key bound."""
    return engine.plan(f"SELECT id, s FROM w.ns.{table} WHERE id = ?", view, bound(key), scope=scope)


def test_a_kept_lookup_is_kept_per_principal_and_catalog_view(lake: tuple[Any, Catalog]) -> None:
    table = "boundkeys"
    engine, catalog = indexed_table(lake, table)
    view = load_snapshot(catalog.store).project("p")
    plan_id(engine, view, table, 1, "alice")
    plan_id(engine, view, table, 2, "etl")  # another principal: planned
    assert engine.rebound == 0
    plan_id(engine, view, table, 3, "etl")
    assert engine.rebound == 1
    catalog.tables.append(f"p.w.ns.{table}", data(1000, 1100))
    newer = load_snapshot(catalog.store).project("p")
    planned = plan_id(engine, newer, table, 1050, "alice")  # a new view: planned
    assert engine.rebound == 1 and engine.work.plannings == 3  # plannings
    assert rows(engine, planned) == [{"id": 1050, "s": "name-1050"}]
    assert planned.refs[0].version == newer.table("w", "ns", table).ref.version
    # The older view still answers from its own kept plan, over its own version.
    planned = plan_id(engine, view, table, 1051, "alice")
    assert engine.rebound == 2 and rows(engine, planned) == []


def test_a_bound_time_travel_read_stays_on_its_version(lake: tuple[Any, Catalog]) -> None:
    engine, catalog = indexed_table(lake, "travel")
    version = load_snapshot(catalog.store).project("p").table("w", "ns", "travel").ref.version
    catalog.tables.delete_rows("p.w.ns.travel", "id < 10")
    view = load_snapshot(catalog.store).project("p")
    sql = 'SELECT id FROM w.ns."travel@v' + str(version) + '" WHERE id = ?'
    engine.plan(sql, view, bound(1), scope="alice")
    planned = engine.plan(sql, view, bound(2), scope="alice")
    assert engine.rebound == 1 and planned.refs[0].version == version
    assert pa.Table.from_batches(list(engine.stream(planned))).to_pylist() == [{"id": 2}]
    current = engine.plan("SELECT id FROM w.ns.travel WHERE id = ?", view, bound(3), scope="alice")
    assert engine.rebound == 1 and rows(engine, current) == []


BOUND = [
    ("SELECT * FROM w.ns.keys WHERE id = ?", [(4242,), (7,), (99999999,), (0,), (-5,), (-(2**63) + 1,)]),
    ("SELECT * FROM w.ns.keys WHERE id = ?", [(-5,), (4242,)]),
    ("SELECT s, id FROM w.ns.keys WHERE ? = id", [(77,), (78,)]),
    ("SELECT id, x FROM w.ns.keys WHERE s = ?", [("name-12345",), ("name-1",), ("nobody",), ("",)]),
    ("SELECT id, s FROM w.ns.keys WHERE id = ? AND s = ?", [(5, "name-5"), (6, "name-6"), (6, "name-7")]),
    # the parameters in another order than the columns are compared in the table
    ("SELECT id, s FROM w.ns.keys WHERE s = ? AND id = ?", [("name-5", 5), ("name-8", 8), ("name-9", 8)]),
    ("SELECT id FROM w.ns.keys WHERE id = $2 AND s = $1", [("name-5", 5), ("name-8", 8)]),
]


@pytest.mark.parametrize(("sql", "bindings"), BOUND)
def test_a_lookup_bound_to_new_values_is_answered_without_planning(
    lake: tuple[Any, Catalog], sql: str, bindings: list[tuple[Any, ...]]
) -> None:
    """The first binding is planned; every other is not (nor to answer what its structure
    says), and still gives exactly the rows DataFusion gives for those values (planned on use,
    below)."""
    engine = QueryEngine(lake[0], QueryLimits())
    view = load_snapshot(lake[1].store).project("p")
    for i, values in enumerate(bindings):
        plannings = engine.work.plannings
        params = bound(*values)
        planned = engine.plan(sql, view, params, scope="alice")
        ours = rows(engine, planned)
        assert planned.lookup is not None and planned.params is params
        # What splitting, ordering and spooling ask is its kept plan's structure: no planning.
        # A key lookup returns few rows: never split or spooled by the size of its table.
        assert planned.facts.point and not planned.facts.ordered and not planned.facts.table_rows
        # Planned the first time only, nor did streaming the lookup ask for DataFusion's frame.
        assert engine.work.plannings == plannings + (i == 0)
        assert engine.rebound == i
        theirs = pa.Table.from_batches(list(datafusion_stream(planned, engine.limits)), planned.schema)
        assert ours == theirs.to_pylist()  # DataFusion's frame, planned on use for the comparison


@pytest.mark.parametrize(
    ("sql", "first", "second"),
    [
        # a literal beside the parameter: its term takes no parameter, so nothing is kept
        ("SELECT id FROM w.ns.keys WHERE id = ? AND s = 'name-131'", (130,), (131,)),
        # two equal values first: which term takes which is in doubt, so nothing is kept
        ("SELECT id FROM w.ns.keys WHERE id = ? AND id = ?", (5, 5), (6, 6)),
        # a parameter compared to an Int32 column is cast: no lookup
        ("SELECT id FROM w.ns.keys WHERE k = ?", (3,), (4,)),
        # no index on x: no lookup
        ("SELECT id FROM w.ns.keys WHERE id = ? AND x = ?", (5, 1.25), (6, 1.5)),
        # the parameter inside an expression: no lookup (5 % 1000 is 5, but 5005 % 1000 is not 5005)
        ("SELECT id FROM w.ns.keys WHERE id = ? % 1000", (5,), (5005,)),
    ],
)
def test_other_bindings_are_planned(
    lake: tuple[Any, Catalog], sql: str, first: tuple[Any, ...], second: tuple[Any, ...]
) -> None:
    engine = QueryEngine(lake[0], QueryLimits())
    view = load_snapshot(lake[1].store).project("p")
    engine.plan(sql, view, bound(*first), scope="alice")
    planned = engine.plan(sql, view, bound(*second), scope="alice")
    assert engine.rebound == 0 and engine.work.plannings == 2  # plannings
    ours = rows(engine, planned)
    theirs = pa.Table.from_batches(list(datafusion_stream(planned, engine.limits)), planned.schema)
    assert ours == theirs.to_pylist()


@pytest.mark.parametrize(
    "params",
    [
        bound(None),  # NULL: never equal, no lookup
        bound(-(2**63)),  # what Lance's filter text cannot say (a Float64 to it): planned
        bound("5"),  # a string for the Int64 column: other types, another key
        pa.record_batch([pa.array([6, 7])], names=["0"]),  # two rows: refused by planning
    ],
)
def test_a_binding_the_kept_lookup_cannot_take_is_planned(
    lake: tuple[Any, Catalog], params: pa.RecordBatch
) -> None:
    engine = QueryEngine(lake[0], QueryLimits())
    view = load_snapshot(lake[1].store).project("p")
    sql = "SELECT id, s FROM w.ns.keys WHERE id = ?"
    engine.plan(sql, view, bound(5), scope="alice")
    try:
        planned = engine.plan(sql, view, params, scope="alice")
    except LakeError as exc:  # what planning says of it, as before (before it takes a context)
        assert params.num_rows == 2 and "exactly one row" in str(exc)
    else:
        assert engine.work.plannings == 2  # planned, not answered from the kept lookup
        theirs = pa.Table.from_batches(list(datafusion_stream(planned, engine.limits)), planned.schema)
        assert rows(engine, planned) == theirs.to_pylist()
    assert engine.rebound == 0

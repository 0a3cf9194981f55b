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
from lake_platform.query.stream import FIRST_BATCH
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
    catalog.create_project("p")
    catalog.create_warehouse("p.w")
    catalog.create_namespace("p.w.ns")
    catalog.create_table(T, data(0, 20_000))
    catalog.create_index(T, "id", "btree")
    catalog.create_index(T, "s", "btree")
    catalog.create_index(T, "k", "bitmap")
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
    return ours, theirs, planned.derived["lookup"] is not None


DIRECT = [
    "SELECT * FROM w.ns.keys WHERE id = 4242",
    "SELECT s, id FROM w.ns.keys WHERE id = 77",
    "SELECT * FROM w.ns.keys WHERE id = 99999999",
    "SELECT id, x FROM w.ns.keys WHERE s = 'name-12345'",
    "SELECT id FROM w.ns.keys WHERE id = 130 AND s = 'name-130'",  # no such row: s is NULL there
    "SELECT id FROM w.ns.keys WHERE 5 = id",
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
    "SELECT a.id FROM w.ns.keys a JOIN w.ns.keys b ON a.id = b.id WHERE a.id = 5",
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


def test_appended_deleted_and_pinned_rows(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    catalog.create_table("p.w.ns.moves", data(0, 1000))
    catalog.create_index("p.w.ns.moves", "id", "btree")
    engine = QueryEngine(settings, QueryLimits())
    sql = "SELECT id, s FROM w.ns.moves WHERE id = {}"
    old = engine.plan(sql.format(700), load_snapshot(catalog.store).project("p"))
    catalog.append("p.w.ns.moves", data(1000, 1500))  # not in the index
    catalog.delete_rows("p.w.ns.moves", "id = 700")
    ours, theirs, direct = both(engine, catalog, sql.format(1200))
    assert direct and ours == theirs == [{"id": 1200, "s": "name-1200"}]
    ours, theirs, direct = both(engine, catalog, sql.format(700))
    assert direct and ours == theirs == []
    # The version planned before the delete still has the row.
    pinned = engine.plan_pinned(old.sql, old.refs)
    rows = pa.Table.from_batches(list(engine.stream(pinned)), pinned.schema).to_pylist()
    assert pinned.derived["lookup"] is not None and rows == [{"id": 700, "s": "name-700"}]


def test_the_result_size_limit_holds(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits(max_result_bytes=10))
    planned = engine.plan("SELECT * FROM w.ns.keys WHERE id = 42", load_snapshot(catalog.store).project("p"))
    with pytest.raises(LakeError, match="larger than"):
        list(engine.stream(planned))
    assert planned.derived["lookup"] is not None


@pytest.mark.parametrize("sql", [DIRECT[0], DIRECT[2]], ids=["a row", "no row"])
def test_a_lookup_remembers_how_long_its_first_batch_took(lake: tuple[Any, Catalog], sql: str) -> None:
    """What lets a kept lookup start at GetFlightInfo (``flight.streams``), as a DataFusion
    plan's stream records it."""
    engine = QueryEngine(lake[0], QueryLimits())
    planned = engine.plan(sql, load_snapshot(lake[1].store).project("p"))
    assert FIRST_BATCH not in planned.derived
    list(engine.stream(planned))
    assert planned.derived["lookup"] is not None
    assert 0 < planned.derived[FIRST_BATCH] < 60


def test_a_kept_lookup_reuses_its_scanner(lake: tuple[Any, Catalog], monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan run again (a cursor re-running its query) reads through the scanner its first run
    made; runs of one plan at once, and another plan, each get their rows."""
    import lance

    built: list[str] = []
    real = lance.LanceDataset.scanner

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        built.append(kwargs.get("filter"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "scanner", counting)
    engine = QueryEngine(lake[0], QueryLimits())
    view = load_snapshot(lake[1].store).project("p")
    planned = engine.plan("SELECT id, s FROM w.ns.keys WHERE id = 4242", view)
    runs = [pa.Table.from_batches(list(engine.stream(planned)), planned.schema).to_pylist() for _ in range(3)]
    assert runs == [[{"id": 4242, "s": "name-4242"}]] * 3
    assert built == ["id = 4242"]
    # Two runs of the same plan interleaved: each reader reads the whole result.
    first, second = engine.stream(planned), engine.stream(planned)
    a, b = next(first), next(second)
    assert a.to_pylist() == b.to_pylist() == [{"id": 4242, "s": "name-4242"}]
    assert list(first) == list(second) == []
    other = engine.plan("SELECT id, s FROM w.ns.keys WHERE id = 77", view)
    assert pa.Table.from_batches(list(engine.stream(other)), other.schema).to_pylist() == [
        {"id": 77, "s": "name-77"}
    ]
    assert built == ["id = 4242", "id = 77"]

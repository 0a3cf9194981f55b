"""A table in a namespace or warehouse the snapshot does not know yet goes through the same one
miss read as a table it lacks in a namespace it knows: found, it is planned at once; missing,
it is NOT_FOUND as before, and asking again over the same view reads nothing more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import TableNotFound
from lake_platform.query.branch_refs import BranchRefs
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import ProjectView, load_snapshot
from lake_platform.settings import load_settings
from lake_platform_tests.flight.helpers import CountingStore


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    catalog = Catalog(load_settings(home=tmp_path / "home"))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table("p.w.ns.t", ids(1))
    yield catalog
    catalog.close()


def ids(*values: int) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(values, pa.int64())}).to_reader()


def count(engine: QueryEngine, view: ProjectView, name: str) -> int:
    planned = engine.plan(f"SELECT count(*) AS n FROM {name}", view)
    return sum(batch.column(0)[0].as_py() for batch in engine.stream(planned))


def test_a_table_in_a_namespace_or_warehouse_created_since_is_read_once(catalog: Catalog) -> None:
    view = load_snapshot(catalog.store).project("p")
    catalog.containers.create_namespace("p.w.fresh")
    catalog.tables.create_table("p.w.fresh.t", ids(1, 2))
    catalog.containers.create_namespace("p.w.fresh.sub")
    catalog.tables.create_table("p.w.fresh.sub.t", ids(1, 2, 3))
    catalog.containers.create_warehouse("p.w2")
    catalog.containers.create_namespace("p.w2.ns")
    catalog.tables.create_table("p.w2.ns.t", ids(1, 2, 3, 4))
    store = CountingStore(catalog.store)
    engine = QueryEngine(
        catalog.settings, QueryLimits(memory_limit_bytes=64 << 20), branches=BranchRefs(store)
    )
    assert count(engine, view, "w.fresh.t") == 2
    assert store.reads == 2  # the table's record, then its head: as for a table new to a known namespace
    # A nested namespace the snapshot does not know is one schema, written quoted (unquoted, four
    # names read as a column of w.fresh.sub until a refresh knows the namespace).
    assert count(engine, view, 'w."fresh.sub".t') == 3
    assert count(engine, view, "w2.ns.t") == 4
    assert count(engine, view, 'w2.ns."t@v1"') == 4
    before = store.reads
    assert count(engine, view, "w.fresh.t") + count(engine, view, "w2.ns.t") == 6
    assert store.reads == before  # each name was read once for this view
    assert count(engine, view, "w.ns.t") == 1  # the snapshot's own tables as they were


@pytest.mark.parametrize("name", ["w.nowhere.t", "nowhere.ns.t", 'w."no.where".t'])
def test_a_table_in_a_namespace_or_warehouse_that_does_not_exist_is_read_once_per_view(
    catalog: Catalog, name: str
) -> None:
    store = CountingStore(catalog.store)
    engine = QueryEngine(
        catalog.settings, QueryLimits(memory_limit_bytes=64 << 20), branches=BranchRefs(store)
    )
    view = load_snapshot(catalog.store).project("p")
    written = name.replace('"', "")
    for _ in range(3):
        with pytest.raises(TableNotFound, match=rf"table {written} not found"):
            count(engine, view, name)
    assert store.reads == 1  # one record read: there is no table, and that answer is kept
    catalog.tables.append("p.w.ns.t", ids(2))  # a refresh that changes the project: a new view
    with pytest.raises(TableNotFound, match=rf"table {written} not found"):
        count(engine, load_snapshot(catalog.store).project("p"), name)
    assert store.reads == 2

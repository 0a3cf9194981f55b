"""The values a user's asset returns, written through the Lake IO manager with
``dagster.materialize``: pandas and polars frames into tables another writer made (their Arrow
conversion gives ``large_string`` and ``large_list`` where a pyarrow table has ``string`` and
``list``), and frames Arrow cannot convert."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.errors import InvalidInput
from lake_platform.settings import load_settings
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.orders"
#: The table as a pyarrow writer (an ingest, ``lake table create``) made it.
MADE = pa.table(
    {
        "id": pa.array([1], pa.int64()),
        "name": pa.array(["a"], pa.string()),
        "tags": pa.array([["x"]], pa.list_(pa.string())),
    }
)


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    with Catalog(load_settings(home=home)) as catalog:
        catalog.tables.create_table(TABLE, MADE.to_reader())
        yield catalog


def materialize(catalog: Catalog, value: object) -> dg.ExecuteInProcessResult:
    @dg.asset(key=["p", "w", "ns", "orders"], io_manager_key="lake_io")
    def orders() -> object:
        return value

    lake = LakeResource(home=str(catalog.settings.home))
    with dg.DagsterInstance.ephemeral() as instance:
        return dg.materialize(
            [orders],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake)},
            raise_on_error=False,
        )


FRAMES = {
    "pandas": lambda: pd.DataFrame({"id": [2], "name": ["b"], "tags": [["y", "z"]]}),
    "polars": lambda: pl.DataFrame({"id": [2], "name": ["b"], "tags": [["y", "z"]]}),
    "polars-lazy": lambda: pl.DataFrame({"id": [2], "name": ["b"], "tags": [["y", "z"]]}).lazy(),
}


@pytest.mark.parametrize("kind", sorted(FRAMES))
def test_a_frame_lands_in_a_table_a_pyarrow_writer_made(catalog: Catalog, kind: str) -> None:
    result = materialize(catalog, FRAMES[kind]())
    assert result.success, result.get_step_failure_events()
    snapshot = catalog.reads.open_table(TABLE)
    assert snapshot.schema == MADE.schema  # the table's own types, not the frame's large ones
    assert snapshot.to_reader().read_all().to_pylist() == [
        {"id": 1, "name": "a", "tags": ["x"]},
        {"id": 2, "name": "b", "tags": ["y", "z"]},
    ]


def test_a_frame_arrow_cannot_convert_fails_the_step_typed_and_unwritten(catalog: Catalog) -> None:
    result = materialize(catalog, pd.DataFrame({"id": [2, "two"], "name": ["b", "c"]}))
    assert not result.success
    (failure,) = result.get_step_failure_events()
    error = str(failure.event_specific_data.error)
    assert "InvalidInput (code 13)" in error and "column id" in error
    assert [e.operation for e in catalog.reads.history(TABLE)] == ["create"]


def test_conformed_changes_only_the_width_of_a_type() -> None:
    from lake_platform.defs.io_frames import conformed

    table = pa.schema([("s", pa.string()), ("n", pa.int32()), ("b", pa.binary())])
    data = pa.table(
        {
            "s": pa.array(["x"], pa.string_view()),
            "n": pa.array([1], pa.int64()),  # another type: left for the table's schema policy
            "b": pa.array([b"1"], pa.large_binary()),
        }
    )
    reader = conformed(data.to_reader(), table)
    assert reader.schema == pa.schema([("s", pa.string()), ("n", pa.int64()), ("b", pa.binary())])
    assert reader.read_all().to_pylist() == [{"s": "x", "n": 1, "b": b"1"}]
    untouched = data.to_reader()
    assert conformed(untouched, pa.schema([("other", pa.string())])) is untouched


def test_a_frame_that_is_not_a_table_names_its_type() -> None:
    from lake_platform.defs.io_frames import as_reader

    with pytest.raises(InvalidInput, match="returned dict"):
        as_reader({"id": [1]})


def test_an_asset_returning_none_writes_nothing_and_says_so(catalog: Catalog) -> None:
    result = materialize(catalog, None)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert meta == {"lake/table": TABLE, "lake/written": False}  # no version a read would pin to
    assert [e.operation for e in catalog.reads.history(TABLE)] == ["create"]


def test_a_pandas_frames_named_index_is_written_as_its_columns(catalog: Catalog) -> None:
    sales = pd.DataFrame({"region": ["eu", "us", "eu"], "day": [1, 1, 2], "amount": [1, 2, 3]})
    totals = sales.groupby(["region", "day"]).sum()  # the keys are the index, no longer columns

    @dg.asset(key=["p", "w", "ns", "totals"], io_manager_key="lake_io")
    def by_region() -> pd.DataFrame:
        return totals

    lake = LakeResource(home=str(catalog.settings.home))
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [by_region], instance=instance, resources={"lake_io": LakeIOManager(lake=lake)}
        )
    assert result.success
    written = catalog.reads.open_table("p.w.ns.totals").to_reader().read_all()
    assert written.column_names == ["region", "day", "amount"]
    assert sorted(written.to_pylist(), key=str) == sorted(
        [
            {"region": "eu", "day": 1, "amount": 1},
            {"region": "eu", "day": 2, "amount": 3},
            {"region": "us", "day": 1, "amount": 2},
        ],
        key=str,
    )


def test_a_pandas_frame_with_a_column_twice_fails_typed_and_unwritten(catalog: Catalog) -> None:
    from lake_platform.defs.io_frames import as_reader

    twice = pd.DataFrame([[2, "b"]], columns=["id", "id"])
    index_too = pd.DataFrame({"id": [2], "name": ["b"]}, index=pd.Index([7], name="id"))
    for frame in (twice, index_too):
        with pytest.raises(InvalidInput, match="id"):
            as_reader(frame)
    result = materialize(catalog, twice)
    (failure,) = result.get_step_failure_events()
    assert "InvalidInput (code 13)" in str(failure.event_specific_data.error)
    assert [e.operation for e in catalog.reads.history(TABLE)] == ["create"]

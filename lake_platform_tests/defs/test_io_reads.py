"""What an input of a user's asset reads through the Lake IO manager: an input whose ``columns``
metadata names a column the table lacks, or one twice, fails the step with InvalidInput naming
it and the table's columns, never with the engine's own message."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.io_reads import ReadPlan, scan_options
from lake_platform.defs.resources import LakeResource
from lake_platform.errors import InvalidInput
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.maintenance.helpers import make_lake

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    yield home


@dg.asset(key=["p", "w", "ns", "people"], io_manager_key="lake_io")
def people() -> pa.Table:
    return pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]})


@pytest.mark.parametrize("columns", [["id", "nmae"], ["id", "id"]])
def test_an_input_naming_a_column_the_table_lacks_fails_by_name(home: Path, columns: list[str]) -> None:
    @dg.asset(
        key=["p", "w", "ns", "names"],
        ins={"people": dg.AssetIn(key=people.key, metadata={"columns": columns})},
    )
    def names(people: pa.Table) -> None:
        raise AssertionError("never loaded")

    lake = LakeResource(home=str(home))
    with sqlite_instance() as instance:
        result = dg.materialize(
            [people, names],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake)},
            raise_on_error=False,
        )
    (failure,) = result.get_step_failure_events()
    error = str(failure.event_specific_data.error)
    assert "InvalidInput (code 13)" in error and f"'{columns[1]}'" in error and "id, name" in error


def test_scan_options_push_the_columns_down() -> None:
    plan = ReadPlan("p.w.ns.people", 1, None, ["name"], None, [])
    assert scan_options(plan, SCHEMA) == {"columns": ["name"]}
    with pytest.raises(InvalidInput, match="'nope' is not a column of p.w.ns.people"):
        scan_options(ReadPlan("p.w.ns.people", 1, None, ["nope"], None, []), SCHEMA)

"""What an input of a user's asset reads through the Lake IO manager: an input whose ``columns``
metadata names a column the table lacks, or one twice, fails the step with InvalidInput naming
it and the table's columns, never with the engine's own message; the version it pins is its own
run's record, else the latest publishable one, however many newer records other runs left."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.defs.asset_tables import BRANCH, VERSION
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.io_reads import Pin, ReadPlan, recorded_version, scan_options
from lake_platform.defs.resources import LakeResource
from lake_platform.errors import InvalidInput, InvalidTableState
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.maintenance.helpers import make_lake

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
PRICES = dg.AssetKey(["p", "w", "ns", "prices"])
#: More newer records than the old read's window of the newest len(partitions) + 20.
MANY = 25


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    yield home


@dg.asset(key=["p", "w", "ns", "people"], io_manager_key="lake_io")
def people() -> pa.Table:
    return pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]})


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (["id", "nmae"], "'nmae' is not a column of p.w.ns.people (its columns: id, name)"),
        (["id", "id"], "'id' is named twice (its columns: id, name)"),
        ("name", "the input's columns is a list of column names, not 'name'"),  # not n, a, m, e
    ],
)
def test_an_input_naming_a_column_the_table_lacks_fails_by_name(
    home: Path, columns: list[str], message: str
) -> None:
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
    assert "InvalidInput (code 13)" in error and message in error


def test_scan_options_push_the_columns_down() -> None:
    plan = ReadPlan("p.w.ns.people", 1, None, ["name"], None, [])
    assert scan_options(plan, SCHEMA) == {"columns": ["name"]}
    with pytest.raises(InvalidInput, match="'nope' is not a column of p.w.ns.people"):
        scan_options(ReadPlan("p.w.ns.people", 1, None, ["nope"], None, []), SCHEMA)


def record(
    instance: dg.DagsterInstance, version: int, partition: str | None = None, branch: str = ""
) -> None:
    """A materialization of ``PRICES`` by no run of the reader's (Dagster records it run-less)."""
    metadata: dict[str, object] = {VERSION: version} | ({BRANCH: branch} if branch else {})
    instance.report_runless_asset_event(
        dg.AssetMaterialization(PRICES, partition=partition, metadata=metadata)
    )


def wap_unpublished(branch: str) -> bool:
    return branch.startswith("run_")


def test_an_input_reads_its_own_runs_record_behind_many_newer_ones() -> None:
    @dg.asset(key=PRICES)
    def prices() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={VERSION: 3})

    with sqlite_instance() as instance:
        own = dg.materialize([prices], instance=instance).run_id
        for version in range(4, 4 + MANY):
            record(instance, version)
        assert recorded_version(instance, PRICES, [], {own}) == Pin(3)
        assert recorded_version(instance, PRICES, [], {"another run"}) == Pin(3 + MANY)


def test_an_input_passes_over_many_unpublished_records_to_the_last_published() -> None:
    with sqlite_instance() as instance:
        record(instance, 2, branch="main")
        record(instance, 3)
        for version in range(4, 4 + MANY):
            record(instance, version, branch=f"run_{version}")
        assert recorded_version(instance, PRICES, [], set(), wap_unpublished) == Pin(3)


def test_a_partition_behind_many_records_of_another_is_found() -> None:
    with sqlite_instance() as instance:
        record(instance, 1, "b")
        record(instance, 5, "a")
        for version in range(6, 6 + MANY):
            record(instance, version, "b", branch=f"run_{version}")
        # a's published 5 and b's published 1: every row read is in version 5
        assert recorded_version(instance, PRICES, ["a", "b"], set(), wap_unpublished) == Pin(5)
        assert recorded_version(instance, PRICES, ["b"], set(), wap_unpublished) == Pin(1)
        assert recorded_version(instance, PRICES, ["c"], set(), wap_unpublished) is None


def test_the_search_for_a_published_record_is_bounded() -> None:
    with sqlite_instance() as instance:
        record(instance, 1, "a")
        for version in range(2, 2 + MANY):
            record(instance, version, "a", branch=f"run_{version}")
        assert recorded_version(instance, PRICES, ["a"], set(), wap_unpublished, max_passed_over=MANY) == Pin(
            1
        )
        with pytest.raises(
            InvalidTableState,
            match=r"p/w/ns/prices partition a: none of its newest 25 materializations is published",
        ):
            recorded_version(instance, PRICES, ["a"], set(), wap_unpublished, max_passed_over=MANY - 1)
        # the records ending right at the bound is no refusal: nothing published was recorded
        record(instance, 99, "z", branch="run_z")
        assert recorded_version(instance, PRICES, ["z"], set(), wap_unpublished, max_passed_over=0) is None

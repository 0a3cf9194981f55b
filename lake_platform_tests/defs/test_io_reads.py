"""What an input of a user's asset reads through the Lake IO manager: an input whose ``columns``
metadata names a column the table lacks, or one twice, fails the step with InvalidInput naming
it and the table's columns, never with the engine's own message; the version it pins is its own
run's record, else the latest publishable one, however many newer records other runs left."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.asset_tables import BRANCH, VERSION
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.io_reads import Pin, ReadPlan, Where, recorded_version, scan_options
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.wap import run_branch
from lake_platform.errors import InvalidInput, InvalidTableState
from lake_platform.settings import load_settings
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs import wap_project
from lake_platform_tests.defs.wap_sensor import publish
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
    plan = ReadPlan("p.w.ns.people", 1, None, None, ["name"], None, [])
    assert scan_options(plan, SCHEMA) == {"columns": ["name"]}
    with pytest.raises(InvalidInput, match="'nope' is not a column of p.w.ns.people"):
        scan_options(ReadPlan("p.w.ns.people", 1, None, None, ["nope"], None, []), SCHEMA)


def record(
    instance: dg.DagsterInstance, version: int, partition: str | None = None, branch: str = ""
) -> None:
    """A materialization of ``PRICES`` by no run of the reader's (Dagster records it run-less)."""
    metadata: dict[str, object] = {VERSION: version} | ({BRANCH: branch} if branch else {})
    instance.report_runless_asset_event(
        dg.AssetMaterialization(PRICES, partition=partition, metadata=metadata)
    )


def wap_unpublished(pin: Pin) -> Where:
    return "branch" if pin.branch is not None and pin.branch.startswith("run_") else "main"


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


BOOKED = dg.AssetKey(["p", "w", "ns", "booked"])
#: What ``booked`` writes in the next run; a negative amount fails its audit.
AMOUNTS: list[int] = []


@dg.asset(key=BOOKED, io_manager_key="lake_io")
def booked() -> pa.Table:
    return pa.table({"amount": pa.array(AMOUNTS, pa.int64())})


@dg.asset_check(asset=booked, blocking=True)
def no_negative_amounts(booked: pa.Table) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=min(booked.column("amount").to_pylist()) >= 0)


@dg.asset(key=["p", "w", "ns", "total"], io_manager_key="lake_io", metadata={"write_mode": "overwrite"})
def total(booked: pa.Table) -> pa.Table:
    return pa.table({"total": pa.array([sum(booked.column("amount").to_pylist())], pa.int64())})


def wap_run(home: Path, instance: dg.DagsterInstance, amounts: list[int]) -> dg.ExecuteInProcessResult:
    AMOUNTS[:] = amounts
    lake = LakeResource(home=str(home))
    return dg.materialize(
        [booked, no_negative_amounts],
        instance=instance,
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        raise_on_error=False,
    )


@pytest.mark.parametrize("purge", [False, True])
def test_a_deleted_unpublished_branch_is_never_read_as_mains_version(home: Path, purge: bool) -> None:
    """A run's audit refused its write (branch B, version 3, never published); B is deleted and
    another writer commits main's version 3. A later run reading the asset reads the last
    published materialization (version 2), never main's 3 as if it were the refused one's."""
    lake = LakeResource(home=str(home))
    plain = {"lake": lake, "lake_io": LakeIOManager(lake=lake)}
    table = "p.w.ns.booked"
    with sqlite_instance() as instance, Catalog(load_settings(home=home)) as catalog:
        catalog.tables.create_table(table, pa.table({"amount": pa.array([1], pa.int64())}).to_reader())
        good = wap_run(home, instance, [10])
        assert publish(home, instance, good) is None  # main at 2: 1 + 10
        refused = wap_run(home, instance, [-100])
        assert not refused.success
        catalog.branch_trash.delete_branch(table, run_branch(refused.run_id), purge=purge)
        catalog.tables.append(table, pa.table({"amount": pa.array([1000], pa.int64())}).to_reader())
        assert catalog.reads.open_table(table).version == 3  # the number the refused write recorded

        later = dg.materialize([booked, total], selection=[total.key], instance=instance, resources=plain)
        assert later.success
        read = catalog.reads.open_table("p.w.ns.total").to_reader().read_all().column("total").to_pylist()
        assert read == [11]  # the published version 2, not main's 3 (1011) nor the refused rows


def test_a_reexecution_whose_branch_was_deleted_unpublished_is_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed run's branch is deleted, main's version of the number it recorded is another
    writer's; the re-execution's check (fixed) reads its own lineage's record: refused, never
    main's other commit audited in its place."""
    table = "p.w.ns.audited"
    with Catalog(load_settings(home=home)) as catalog:
        catalog.tables.create_table(table, pa.table({"n": pa.array([0], pa.int64())}).to_reader())
    job = dg.reconstructable(wap_project.audited_job)
    with sqlite_instance() as instance:
        first = dg.execute_job(job, instance=instance, raise_on_error=False)
        assert not first.success
        with Catalog(load_settings(home=home)) as catalog:
            catalog.branch_trash.delete_branch(table, run_branch(first.run_id))
            catalog.tables.append(table, pa.table({"n": pa.array([1000], pa.int64())}).to_reader())
        monkeypatch.setenv(wap_project.PASSES, "1")
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
        again = dg.execute_job(job, instance=instance, raise_on_error=False, reexecution_options=options)
        assert not again.success
        (failure,) = again.get_step_failure_events()
        error = str(failure.event_specific_data.error)
        assert "InvalidTableState" in error and "was never published, and its branch is gone" in error

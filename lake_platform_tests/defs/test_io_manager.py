"""LakeIOManager on Dagster instances: a user project of three daily-partitioned assets
(raw -> cleaned -> daily totals) and unpartitioned assets in each write mode, materialized with
Dagster's own APIs; the lake checked through the catalog."""

import uuid
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
from lake_platform_tests.defs.conftest import instance_on
from lake_platform_tests.maintenance.helpers import make_lake

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
daily = dg.DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-01-11")
SHOP = {"shop": "p.w.ns"}


def raw_rows(day: str, amounts: list[float | None]) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([day] * len(amounts)),
            "id": pa.array(range(len(amounts)), pa.int64()),
            "amount": pa.array(amounts, pa.float64()),
        }
    )


#: What raw returns for a day; a test changes it to make a re-materialization differ.
AMOUNTS: dict[str, list[float | None]] = {}


@dg.asset(
    key_prefix="shop", io_manager_key="lake_io", partitions_def=daily, metadata={"partition_expr": "day"}
)
def raw(context: dg.AssetExecutionContext) -> pa.Table:
    return raw_rows(context.partition_key, AMOUNTS.get(context.partition_key, [1.0, 2.0, None]))


@dg.asset(
    key_prefix="shop",
    io_manager_key="lake_io",
    partitions_def=daily,
    metadata={"partition_expr": "day"},
    ins={"raw": dg.AssetIn(key_prefix="shop", metadata={"columns": ["day", "amount"]})},
)
def cleaned(raw: pd.DataFrame) -> pd.DataFrame:
    assert list(raw.columns) == ["day", "amount"]  # the input's columns, read by Lance
    return raw.dropna()


@dg.asset(
    key_prefix="shop",
    io_manager_key="lake_io",
    partitions_def=daily,
    metadata={"partition_expr": "day", "key_columns": ["day"]},
    ins={"cleaned": dg.AssetIn(key_prefix="shop")},
)
def daily_totals(cleaned: pl.DataFrame) -> pl.DataFrame:
    return cleaned.group_by("day").agg(pl.col("amount").sum().alias("total"), pl.len().alias("orders"))


PROJECT = [raw, cleaned, daily_totals]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    AMOUNTS.clear()
    yield home
    AMOUNTS.clear()


@pytest.fixture
def catalog(home: Path) -> Iterator[Catalog]:
    from lake_platform.settings import load_settings

    with Catalog(load_settings(home=home)) as catalog:
        yield catalog


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """In memory: what these tests assert is the lake's, not the storage's (``any_storage`` runs
    the storage-dependent lookups on SQLite and Postgres). A SQLite instance creates and
    migrates an event-log database for every run, 0.3 to 0.7 s of each test's runs."""
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


@pytest.fixture(params=["sqlite", "postgres"])
def any_storage(request: pytest.FixtureRequest) -> Iterator[dg.DagsterInstance]:
    """The suite's instance storages (``conftest.instance_on``): where pinned versions are
    looked up through the instance API matters."""
    with instance_on(request) as inst:
        yield inst


def resources(home: Path) -> dict[str, object]:
    lake = LakeResource(home=str(home))
    return {"lake": lake, "lake_io": LakeIOManager(lake=lake, namespaces=SHOP)}


def metadata_of(result: dg.ExecuteInProcessResult, name: str) -> dict[str, object]:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == name]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def table_rows(catalog: Catalog, name: str, version: int | None = None) -> list[dict[str, object]]:
    return catalog.reads.open_table(f"p.w.ns.{name}", version).dataset.to_table().to_pylist()


def commits(catalog: Catalog, name: str) -> list[str]:
    return [e.operation for e in catalog.reads.history(f"p.w.ns.{name}")]


def test_three_assets_write_one_commit_each_per_partition(
    home: Path, catalog: Catalog, any_storage: dg.DagsterInstance
) -> None:
    for day in DAYS[:2]:
        result = dg.materialize(PROJECT, partition_key=day, instance=any_storage, resources=resources(home))
        assert result.success
    assert commits(catalog, "raw") == ["create", "replace"]
    assert commits(catalog, "cleaned") == ["create", "replace"]
    assert commits(catalog, "daily_totals") == ["create", "replace"]
    totals = sorted(table_rows(catalog, "daily_totals"), key=lambda r: str(r["day"]))
    assert totals == [{"day": d, "total": 3.0, "orders": 2} for d in DAYS[:2]]

    meta = metadata_of(result, "daily_totals")
    assert meta["dagster/table_name"] == "p.w.ns.daily_totals"
    assert meta["lake/version"] == 2
    assert meta["dagster/row_count"] == 2
    assert meta["dagster/partition_row_count"] == 1
    assert meta["lake/rows_written"] == 1 and meta["lake/bytes_written"] > 0
    assert [c.name for c in meta["dagster/column_schema"].columns] == ["day", "total", "orders"]
    entry = catalog.reads.commit("p.w.ns.daily_totals", str(meta["lake/commit_id"]))
    assert entry is not None and entry.run_id == result.run_id and entry.to_version == 2


def test_a_partition_materialized_again_is_replaced_not_appended(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    for amounts in ([1.0, 2.0, None], [5.0]):
        AMOUNTS[DAYS[0]] = amounts
        dg.materialize(PROJECT, partition_key=DAYS[0], instance=instance, resources=resources(home))
    dg.materialize(PROJECT, partition_key=DAYS[1], instance=instance, resources=resources(home))
    assert len(table_rows(catalog, "raw")) == 1 + 3
    totals = {r["day"]: r["total"] for r in table_rows(catalog, "daily_totals")}
    assert totals == {DAYS[0]: 5.0, DAYS[1]: 3.0}


def test_a_backfill_writes_each_partition_once(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    days = [f"2024-01-{d:02d}" for d in range(1, 11)]  # ten partitions, as the backfill
    for day in days:  # one run per partition, as a backfill launches them
        assert dg.materialize([raw], partition_key=day, instance=instance, resources=resources(home)).success
    assert commits(catalog, "raw") == ["create"] + ["replace"] * (len(days) - 1)
    assert sorted(r["day"] for r in table_rows(catalog, "raw")) == sorted(days * 3)
    assert instance.get_materialized_partitions(raw.key) == set(days)


def test_a_step_run_again_under_its_run_id_applies_once(home: Path, catalog: Catalog) -> None:
    """A step retried after its process died once the commit landed runs again under the same run
    id and step key: a second instance (no memory of the first) executes the same run id."""
    job = dg.Definitions(
        assets=[raw], jobs=[dg.define_asset_job("raw_job", [raw])], resources=resources(home)
    ).resolve_job_def("raw_job")
    run_id = str(uuid.uuid4())
    outcomes = []
    for _ in range(2):
        with dg.DagsterInstance.ephemeral() as inst:
            result = job.execute_in_process(instance=inst, partition_key=DAYS[0], run_id=run_id)
            outcomes.append(metadata_of(result, "raw"))
    assert [o["lake/replayed"] for o in outcomes] == [False, True]
    assert outcomes[0]["lake/version"] == outcomes[1]["lake/version"] == 1
    assert outcomes[0]["lake/commit_id"] == outcomes[1]["lake/commit_id"]
    assert commits(catalog, "raw") == ["create"]
    assert len(table_rows(catalog, "raw")) == 3


def test_downstream_reads_the_version_upstream_recorded_not_latest(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    dg.materialize([raw], partition_key=DAYS[0], instance=instance, resources=resources(home))
    # A writer outside this asset's materializations moves the table on (a concurrent run's
    # commit not yet recorded, a client of the lake): downstream stays on the recorded version.
    catalog.tables.append("p.w.ns.raw", raw_rows(DAYS[0], [100.0, 200.0]).to_reader())
    result = dg.materialize(
        PROJECT, partition_key=DAYS[0], instance=instance, resources=resources(home), selection=[cleaned]
    )
    assert sorted(r["amount"] for r in table_rows(catalog, "cleaned")) == [1.0, 2.0]
    assert metadata_of(result, "cleaned")["lake/version"] == 1


def test_an_input_reads_only_its_partitions(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    for day in DAYS[:3]:
        AMOUNTS[day] = [float(DAYS.index(day) + 1)]
        dg.materialize([raw], partition_key=day, instance=instance, resources=resources(home))
    dg.materialize(
        PROJECT, partition_key=DAYS[1], instance=instance, resources=resources(home), selection=[cleaned]
    )
    assert table_rows(catalog, "cleaned") == [{"day": DAYS[1], "amount": 2.0}]


def test_a_row_outside_the_partition_fails_the_step_unwritten(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    @dg.asset(
        key_prefix="shop", io_manager_key="lake_io", partitions_def=daily, metadata={"partition_expr": "day"}
    )
    def stray(context: dg.AssetExecutionContext) -> pa.Table:
        return raw_rows(DAYS[1], [1.0])

    result = dg.materialize(
        [stray], partition_key=DAYS[0], instance=instance, resources=resources(home), raise_on_error=False
    )
    assert not result.success
    assert "outside the partitions written" in str(result.get_step_failure_events()[0].event_specific_data)
    assert [r.name for r in catalog.reads.list_tables("p.w.ns")] == []


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("append", [(1, "a"), (2, "B"), (2, "b"), (3, "C")]),
        ("overwrite", [(2, "B"), (3, "C")]),
        ("merge", [(1, "a"), (2, "B"), (3, "C")]),
    ],
)
def test_write_modes(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance, mode: str, expected: list[tuple[int, str]]
) -> None:
    batches = iter([{"k": [1, 2], "v": ["a", "b"]}, {"k": [2, 3], "v": ["B", "C"]}])

    @dg.asset(
        key=["p", "w", "ns", "modes"],
        io_manager_key="lake_io",
        metadata={"write_mode": mode, "key_columns": ["k"]},
    )
    def modes() -> pa.RecordBatchReader:
        return pa.table(next(batches)).to_reader()

    @dg.asset(ins={"modes": dg.AssetIn(key=["p", "w", "ns", "modes"])}, io_manager_key="lake_io")
    def modes_read(modes: pa.RecordBatchReader) -> None:
        assert sorted(zip(*modes.read_all().to_pydict().values(), strict=True)) == expected

    for _ in range(2):
        dg.materialize([modes], instance=instance, resources=resources(home))
    rows = sorted((r["k"], r["v"]) for r in table_rows(catalog, "modes"))
    assert rows == expected
    assert commits(catalog, "modes") == ["create", "append" if mode == "append" else mode]
    assert dg.materialize(
        [modes, modes_read], selection=[modes_read], instance=instance, resources=resources(home)
    ).success


def test_downstream_reads_its_own_runs_upstream_while_another_run_rematerializes_it(
    home: Path, catalog: Catalog, any_storage: dg.DagsterInstance
) -> None:
    """Run A writes ``prices``; while A runs, run B re-materializes ``prices`` (recorded after A's);
    A's downstream still reads the version A wrote."""
    values = iter([[1.0], [2.0]])

    @dg.asset(key=["p", "w", "ns", "prices"], io_manager_key="lake_io", metadata={"write_mode": "overwrite"})
    def prices() -> pa.Table:
        return pa.table({"price": next(values)})

    @dg.asset(deps=[prices])
    def other_run(context: dg.AssetExecutionContext) -> None:
        # Another run of the upstream lands and is recorded between A's write and A's read.
        assert dg.materialize([prices], instance=context.instance, resources=resources(home)).success

    @dg.asset(
        key=["p", "w", "ns", "doubled"],
        io_manager_key="lake_io",
        deps=[other_run],
        ins={"prices": dg.AssetIn(key=prices.key)},
    )
    def doubled(prices: pa.Table) -> pa.Table:
        return pa.table({"price": [2 * p for p in prices.column("price").to_pylist()]})

    result = dg.materialize([prices, other_run, doubled], instance=any_storage, resources=resources(home))
    assert result.success
    assert table_rows(catalog, "prices") == [{"price": 2.0}]  # run B's, the latest recorded
    assert table_rows(catalog, "doubled") == [{"price": 2.0}]  # from run A's 1.0


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"write_mode": "upsert"}, "write_mode is one of"),
        ({"write_mode": "merge"}, "needs key_columns"),
        ({"write_mode": "merge", "key_columns": "k"}, "key_columns is a list of column names, not 'k'"),
        ({"wap": "false"}, "wap is true or false, not 'false'"),  # not a branch write
    ],
)
def test_bad_write_metadata_fails_the_step_unwritten(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance, metadata: dict[str, object], message: str
) -> None:
    catalog.tables.create_table("p.w.ns.bad", pa.table({"k": [1]}).to_reader())

    @dg.asset(key=["p", "w", "ns", "bad"], io_manager_key="lake_io", metadata=metadata)
    def bad() -> pa.Table:
        return pa.table({"k": [2]})

    result = dg.materialize([bad], instance=instance, resources=resources(home), raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    assert message in str(failure.event_specific_data.error)
    assert catalog.reads.open_table("p.w.ns.bad").version == 1


def test_a_single_run_backfill_replaces_its_partitions_in_one_commit(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    @dg.asset(
        key=["p", "w", "ns", "ranged"],
        io_manager_key="lake_io",
        partitions_def=daily,
        backfill_policy=dg.BackfillPolicy.single_run(),
        metadata={"partition_expr": "day"},
    )
    def ranged(context: dg.AssetExecutionContext) -> pa.Table:
        days = context.partition_keys
        return pa.table({"day": days, "n": [len(days)] * len(days)})

    def backfill(first: str, last: str) -> dg.ExecuteInProcessResult:
        tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        return dg.materialize([ranged], instance=instance, resources=resources(home), tags=tags)

    backfill(DAYS[0], DAYS[2])
    result = backfill(DAYS[1], DAYS[3])
    assert commits(catalog, "ranged") == ["create", "replace"]
    assert sorted((r["day"], r["n"]) for r in table_rows(catalog, "ranged")) == [
        (DAYS[0], 3),
        (DAYS[1], 3),
        (DAYS[2], 3),
        (DAYS[3], 3),
    ]
    events = result.get_asset_materialization_events()  # one per partition, of the one commit
    assert sorted(e.partition for e in events) == DAYS[1:4]
    assert {e.materialization.metadata["lake/version"].value for e in events} == {2}
    assert {e.materialization.metadata["lake/rows_written"].value for e in events} == {3}


def test_a_partition_keeps_every_row_of_its_output_even_identical_ones(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    """Two identical rows in a partition's output are two rows of the table: the partition is
    replaced by exactly what the asset returned, and the other partitions are untouched."""
    runs = [(DAYS[0], [1.0, 2.0]), (DAYS[1], [4.0]), (DAYS[1], [4.0, 4.0]), (DAYS[1], [4.0, 4.0])]
    for day, amounts in runs:
        AMOUNTS[day] = amounts

        @dg.asset(
            key=["p", "w", "ns", "twins"],
            io_manager_key="lake_io",
            partitions_def=daily,
            metadata={"partition_expr": "day"},
        )
        def twins(context: dg.AssetExecutionContext) -> pa.Table:
            amounts = AMOUNTS[context.partition_key]
            return pa.table({"day": [context.partition_key] * len(amounts), "amount": amounts})

        assert dg.materialize(
            [twins], partition_key=day, instance=instance, resources=resources(home)
        ).success
    rows = sorted((r["day"], r["amount"]) for r in table_rows(catalog, "twins"))
    assert rows == [(DAYS[0], 1.0), (DAYS[0], 2.0), (DAYS[1], 4.0), (DAYS[1], 4.0)]
    # each write one version and one log entry (a replace: rows deleted and added)
    assert commits(catalog, "twins") == ["create", "replace", "replace", "replace"]
    assert sorted(catalog.reads.readable_versions("p.w.ns.twins")[1]) == [1, 2, 3, 4]
    last = catalog.reads.history("p.w.ns.twins")[-1]
    assert (last.rows_removed, last.rows_added) == (2, 2)


def test_a_partition_replace_run_again_under_its_run_id_applies_once(home: Path, catalog: Catalog) -> None:
    """As a step retried after its process died once its replace landed: a second instance
    executes the same run id, finds the commit id and writes nothing."""
    job = dg.Definitions(
        assets=[raw], jobs=[dg.define_asset_job("raw_job", [raw])], resources=resources(home)
    ).resolve_job_def("raw_job")
    with dg.DagsterInstance.ephemeral() as inst:
        assert job.execute_in_process(instance=inst, partition_key=DAYS[1]).success  # creates the table
    run_id = str(uuid.uuid4())
    outcomes = []
    for _ in range(2):
        with dg.DagsterInstance.ephemeral() as inst:
            result = job.execute_in_process(instance=inst, partition_key=DAYS[0], run_id=run_id)
            outcomes.append(metadata_of(result, "raw"))
    assert [(o["lake/replayed"], o["lake/version"], o["lake/operation"]) for o in outcomes] == [
        (False, 2, "replace"),
        (True, 2, "replace"),
    ]
    assert commits(catalog, "raw") == ["create", "replace"]
    assert sorted(r["day"] for r in table_rows(catalog, "raw")) == [DAYS[0]] * 3 + [DAYS[1]] * 3


def test_a_partition_column_the_output_lacks_fails_the_step_unwritten(
    home: Path, catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    catalog.tables.create_table("p.w.ns.misnamed", raw_rows(DAYS[1], [1.0]).to_reader())

    @dg.asset(
        key=["p", "w", "ns", "misnamed"],
        io_manager_key="lake_io",
        partitions_def=daily,
        metadata={"partition_expr": "date"},
    )
    def misnamed(context: dg.AssetExecutionContext) -> pa.Table:
        return raw_rows(context.partition_key, [2.0])

    result = dg.materialize(
        [misnamed], partition_key=DAYS[0], instance=instance, resources=resources(home), raise_on_error=False
    )
    assert not result.success
    (failure,) = result.get_step_failure_events()
    assert "partition column 'date' is not a column of the data" in str(failure.event_specific_data.error)
    assert commits(catalog, "misnamed") == ["create"]
    assert table_rows(catalog, "misnamed") == [{"day": DAYS[1], "id": 0, "amount": 1.0}]

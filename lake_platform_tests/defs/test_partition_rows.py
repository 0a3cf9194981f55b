"""Which rows are a partitioned asset's partitions, written and read through the Lake IO manager
with ``dagster.materialize``: a time-window partition over a timestamp or date column is the rows
inside its window (hourly, daily, monthly), a partition of other keys the rows holding its key,
and a multi-partitioned asset is refused unwritten."""

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_frames import refuse_strays
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.partition_rows import PartitionRows
from lake_platform.defs.resources import LakeResource
from lake_platform.errors import InvalidInput
from lake_platform.settings import load_settings
from lake_platform_tests.maintenance.helpers import make_lake

hourly = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00", end_date="2024-01-03-00:00")
monthly = dg.MonthlyPartitionsDefinition(start_date="2024-01-01", end_date="2024-04-01")
UTC = dt.timezone.utc
#: The minutes past each hour the hourly asset writes rows at; a test changes them.
MINUTES: list[int] = [10, 50]


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    MINUTES[:] = [10, 50]
    with Catalog(load_settings(home=home)) as catalog:
        yield catalog


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def materialize(
    catalog: Catalog, instance: dg.DagsterInstance, assets: list[object], key: str | dg.MultiPartitionKey
) -> dg.ExecuteInProcessResult:
    lake = LakeResource(home=str(catalog.settings.home))
    return dg.materialize(
        assets,
        partition_key=key,
        instance=instance,
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake)},
        raise_on_error=False,
    )


@dg.asset(
    key=["p", "w", "ns", "clicks"],
    io_manager_key="lake_io",
    partitions_def=hourly,
    metadata={"partition_expr": "at"},
)
def clicks(context: dg.AssetExecutionContext) -> pa.Table:
    start = context.partition_time_window.start.replace(tzinfo=None)
    at = [start + dt.timedelta(minutes=m) for m in MINUTES]
    return pa.table({"at": pa.array(at, pa.timestamp("us")), "n": [len(at)] * len(at)})


@dg.asset(key=["p", "w", "ns", "per_hour"], io_manager_key="lake_io", partitions_def=hourly)
def per_hour(clicks: pa.Table) -> None:
    assert clicks.num_rows == 2, clicks.to_pylist()  # its hour's rows, read by Lance's filter


def test_an_hourly_partition_over_a_timestamp_column_is_the_rows_of_its_hour(
    catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    for key in ["2024-01-02-05:00", "2024-01-02-06:00", "2024-01-02-05:00"]:
        result = materialize(catalog, instance, [clicks, per_hour], key)
        assert result.success, result.get_step_failure_events()
    history = [e.operation for e in catalog.reads.history("p.w.ns.clicks")]
    assert history == ["create", "replace", "replace"]
    at = sorted(r["at"] for r in catalog.reads.open_table("p.w.ns.clicks").to_reader().read_all().to_pylist())
    assert [t.strftime("%H:%M") for t in at] == ["05:10", "05:50", "06:10", "06:50"]


def test_a_row_outside_the_hour_fails_the_step_unwritten(
    catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    assert materialize(catalog, instance, [clicks], "2024-01-02-05:00").success
    MINUTES[:] = [10, 60]
    result = materialize(catalog, instance, [clicks], "2024-01-02-05:00")
    assert not result.success
    (failure,) = result.get_step_failure_events()
    error = str(failure.event_specific_data.error)
    assert "InvalidInput (code 13)" in error and "is '2024-01-02 06:00:00'" in error
    assert "(2024-01-02-05:00: from 2024-01-02T05:00:00+00:00 to before 2024-01-02T06:00:00+00:00)" in error
    assert [e.operation for e in catalog.reads.history("p.w.ns.clicks")] == ["create"]


@dg.asset(
    key=["p", "w", "ns", "ledger"],
    io_manager_key="lake_io",
    partitions_def=monthly,
    metadata={"partition_expr": "day"},
)
def ledger(context: dg.AssetExecutionContext) -> pa.Table:
    first = context.partition_time_window.start.date()
    days = [first, first + dt.timedelta(days=14), first + dt.timedelta(days=27)]
    return pa.table({"day": pa.array(days, pa.date32()), "amount": [1.0, 2.0, 3.0]})


def test_a_monthly_partition_over_a_date_column_is_the_rows_of_its_month(
    catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    for key in ["2024-01-01", "2024-02-01", "2024-01-01"]:
        assert materialize(catalog, instance, [ledger], key).success
    days = sorted(
        r["day"] for r in catalog.reads.open_table("p.w.ns.ledger").to_reader().read_all().to_pylist()
    )
    assert [d.isoformat() for d in days] == [
        "2024-01-01",
        "2024-01-15",
        "2024-01-28",
        "2024-02-01",
        "2024-02-15",
        "2024-02-28",
    ]


def test_a_multi_partitioned_asset_is_refused_unwritten(
    catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    both = dg.MultiPartitionsDefinition(
        {
            "day": dg.DailyPartitionsDefinition(start_date="2024-01-01"),
            "region": dg.StaticPartitionsDefinition(["eu"]),
        }
    )

    @dg.asset(
        key=["p", "w", "ns", "sales"],
        io_manager_key="lake_io",
        partitions_def=both,
        metadata={"partition_expr": {"day": "day", "region": "region"}},
    )
    def sales() -> pa.Table:
        return pa.table({"day": ["2024-01-02"], "region": ["eu"]})

    key = dg.MultiPartitionKey({"day": "2024-01-02", "region": "eu"})
    result = materialize(catalog, instance, [sales], key)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    assert "InvalidInput (code 13): multi-partitioned asset p/w/ns/sales" in str(
        failure.event_specific_data.error
    )
    assert not any(r.name == "p.w.ns.sales" for r in catalog.reads.list_tables())


def test_predicates_are_typed_literals_or_the_window() -> None:
    schema = pa.schema(
        [
            ("day", pa.date32()),
            ("region", pa.string()),
            ("n", pa.int32()),
            ("at", pa.timestamp("us")),
            ("utc", pa.timestamp("us", "UTC")),
        ]
    )
    assert PartitionRows("day", ("2024-01-01",)).predicate(schema) == "`day` IN (date '2024-01-01')"
    assert PartitionRows("region", ("o'hare", "x")).predicate(schema) == "`region` IN ('o''hare', 'x')"
    assert PartitionRows("n", ("7",)).predicate(schema) == "`n` IN (7)"
    berlin = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00", timezone="Europe/Berlin")
    window = berlin.time_window_for_partition_key("2024-01-02-05:00")
    hour = PartitionRows("at", ("2024-01-02-05:00",), (window.start, window.end))
    assert hour.predicate(schema) == (
        "`at` >= timestamp '2024-01-02 05:00:00' AND `at` < timestamp '2024-01-02 06:00:00'"
    )  # a zone-less column holds the partitions' wall-clock time
    assert PartitionRows("utc", hour.keys, hour.window).predicate(schema) == (
        "`utc` >= timestamp '2024-01-02T04:00:00+00:00' AND `utc` < timestamp '2024-01-02T05:00:00+00:00'"
    )
    # a date column holds no hour: refused, where its dates would be the empty `day >= d AND day < d`
    with pytest.raises(InvalidInput, match=r"partition column 'day' is a date32\[day\] column"):
        PartitionRows("day", hour.keys, hour.window).predicate(schema)
    whole = berlin.time_window_for_partition_key("2024-01-03-00:00")  # hours from midnight to midnight
    days = PartitionRows("day", hour.keys, (hour.window[0].replace(hour=0), whole.start))
    assert days.predicate(schema) == "`day` >= date '2024-01-02' AND `day` < date '2024-01-03'"
    assert hour.describe(pa.string()) == "2024-01-02-05:00"  # a string column: the key itself
    # a time window over a string column: its keys, as written
    assert (
        PartitionRows("region", hour.keys, hour.window).predicate(schema)
        == "`region` IN ('2024-01-02-05:00')"
    )
    with pytest.raises(InvalidInput, match="not a column of the data"):
        PartitionRows("missing", ("x",)).predicate(schema)


def test_a_null_partition_value_is_a_stray_row() -> None:
    """No partition's predicate selects a null: written, the row would never be replaced, and
    each run of the partition would add another."""
    eu = PartitionRows("region", ("eu",))
    assert eu.stray(pa.array(["eu", "eu"])) is None
    assert not eu.stray(pa.array(["eu", None])).is_valid
    with pytest.raises(InvalidInput, match="a row's region is null, outside the partitions written"):
        refuse_strays(pa.array(["eu", None]), eu)


def test_an_integer_column_takes_its_keys_as_numbers() -> None:
    """The write's check reads a key as its predicate does ('07' is 7), and a key that is no
    number is refused by name, not with int()'s ValueError."""
    schema = pa.schema([("n", pa.int32())])
    seven = PartitionRows("n", ("07",))
    assert seven.predicate(schema) == "`n` IN (7)"
    assert seven.stray(pa.array([7, 7], pa.int32())) is None
    assert seven.stray(pa.array([7, 8], pa.int32())).as_py() == 8
    eu = PartitionRows("n", ("eu",))
    for use in (lambda: eu.predicate(schema), lambda: eu.stray(pa.array([1], pa.int32()))):
        with pytest.raises(InvalidInput, match="partition key 'eu' is not an integer, as column n is"):
            use()


@dg.asset(
    key=["p", "w", "ns", "visits"],
    io_manager_key="lake_io",
    partitions_def=hourly,
    metadata={"partition_expr": "day"},
)
def visits(context: dg.AssetExecutionContext) -> pa.Table:
    day = context.partition_time_window.start.date()
    return pa.table({"day": pa.array([day, day], pa.date32()), "n": [1, 2]})


#: What an hourly partition over a date column cannot be: the window, as the refusal names it.
HOUR_WINDOW = "2024-01-02-05:00: from 2024-01-02T05:00:00+00:00 to before 2024-01-02T06:00:00+00:00"


def refusal(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    (failure,) = result.get_step_failure_events()
    return str(failure.event_specific_data.error)


def test_an_hourly_partition_over_a_date_column_is_refused_unwritten(
    catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    """A date column holds whole days: an hour is no range of its values (``day >= d AND
    day < d`` selects nothing), so the write is refused by what cannot be expressed, not by
    every row seeming a stray."""
    error = refusal(materialize(catalog, instance, [visits], "2024-01-02-05:00"))
    assert "InvalidInput (code 13): asset p/w/ns/visits" in error
    assert "partition column 'day' is a date32[day] column" in error and HOUR_WINDOW in error
    assert not any(r.name == "p.w.ns.visits" for r in catalog.reads.list_tables())


def test_an_hourly_partition_read_over_a_date_column_is_refused_not_empty(
    catalog: Catalog, instance: dg.DagsterInstance
) -> None:
    """The input's filter would be empty: a silently empty read is a wrong answer."""
    day = dt.date(2024, 1, 2)
    catalog.tables.create_table(
        "p.w.ns.visits", pa.table({"day": pa.array([day], pa.date32()), "n": [1]}).to_reader()
    )
    source = dg.AssetSpec(
        key=["p", "w", "ns", "visits"], partitions_def=hourly, metadata={"partition_expr": "day"}
    ).with_io_manager_key("lake_io")
    read: list[pa.Table] = []

    @dg.asset(key=["p", "w", "ns", "visit_counts"], partitions_def=hourly)
    def visit_counts(visits: pa.Table) -> None:
        read.append(visits)

    error = refusal(materialize(catalog, instance, [source, visit_counts], "2024-01-02-05:00"))
    assert "InvalidInput (code 13): asset p/w/ns/visits" in error
    assert "partition column 'day' is a date32[day] column" in error and HOUR_WINDOW in error
    assert read == []

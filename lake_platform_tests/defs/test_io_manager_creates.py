"""The first write of a new table while another writer creates it (a backfill's runs of a new
table's first partitions, started together): the output's rows land, or the step fails
retryably; never a materialization of rows the table does not hold.

The race is made at the catalog's own hook point: the other writer creates the table after this
one's create has checked that it is missing and while it streams its rows."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.defs.asset_tables import WritePlan
from lake_platform.defs.io_manager import LakeIOManager, write
from lake_platform.defs.resources import LakeResource
from lake_platform.errors import ConcurrentModification, TableAlreadyExists
from lake_platform.settings import load_settings
from lake_platform_tests.maintenance.helpers import make_lake

NEW = "p.w.ns.fresh"
daily = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")


def day_rows(day: str, *ids: int) -> pa.Table:
    return pa.table({"day": pa.array([day] * len(ids)), "id": pa.array(ids, pa.int64())})


class CreatedMeanwhile(LakeResource):
    """The lake, except that the first table create under way is overtaken: another writer
    creates the table with day 2024-01-01's rows, past the create's check."""

    def created_meanwhile(self, point: str) -> None:
        if point == "create:before-write":
            with Catalog(self.settings()) as other:
                try:
                    other.tables.create_table(NEW, day_rows("2024-01-01", 1).to_reader())
                except TableAlreadyExists:
                    pass  # created on the first create's way: later creates are not overtaken

    @contextmanager
    def catalog(self) -> Iterator[Catalog]:
        with Catalog(self.settings(), hook=self.created_meanwhile) as catalog:
            yield catalog


@dg.asset(
    key=["p", "w", "ns", "fresh"],
    io_manager_key="lake_io",
    partitions_def=daily,
    metadata={"partition_expr": "day"},
)
def fresh(context: dg.AssetExecutionContext) -> pa.Table:
    return day_rows(context.partition_key, 2, 3)


def test_a_partition_written_while_another_run_creates_the_table_lands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_lake(home).close()
    lake = CreatedMeanwhile(home=str(home))
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [fresh],
            partition_key="2024-01-02",
            instance=instance,
            resources={"lake_io": LakeIOManager(lake=lake)},
        )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    with Catalog(load_settings(home=home)) as catalog:
        table = catalog.reads.open_table(NEW)
        got = sorted(table.dataset.to_table().to_pylist(), key=lambda r: (r["day"], r["id"]))
        assert got == [
            {"day": "2024-01-01", "id": 1},
            {"day": "2024-01-02", "id": 2},
            {"day": "2024-01-02", "id": 3},
        ]
        assert event.materialization.metadata["lake/version"].value == table.version
    assert event.materialization.metadata["lake/rows_written"].value == 2


def test_a_streamed_first_write_overtaken_fails_retryably_and_its_retry_lands(tmp_path: Path) -> None:
    """A RecordBatchReader cannot be read twice: its rows went to the create that lost, so the
    write fails retryably (a RetryPolicy runs the asset again) rather than commit nothing."""

    def stream(*ids: int) -> pa.RecordBatchReader:
        return day_rows("2024-01-02", *ids).to_reader()

    with make_lake(tmp_path / "home") as catalog:
        lake = CreatedMeanwhile(home=str(tmp_path / "home"))
        by = Provenance(actor="dagster", run_id="r", commit_id="step-r-0001")
        with (
            lake.catalog() as racing,
            pytest.raises(ConcurrentModification, match="created by another writer"),
        ):
            write(racing, NEW, stream(2, 3), WritePlan("append"), by)
        assert catalog.reads.open_table(NEW).count_rows() == 1  # only the other writer's row
        again = write(catalog, NEW, stream(2, 3), WritePlan("append"), by)
        assert not again.replayed
        assert sorted(catalog.reads.open_table(NEW).dataset.to_table()["id"].to_pylist()) == [1, 2, 3]

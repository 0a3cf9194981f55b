"""An asset whose output holds no rows, through the Lake IO manager: appended, it commits nothing
and its materialization records the table's current version (what downstream reads pin to);
overwritten, it empties the table in one commit."""

from pathlib import Path

import dagster as dg
import pyarrow as pa

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import load_settings
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.quiet"


@dg.asset(key=TABLE.split("."), io_manager_key="lake_io")
def quiet() -> pa.Table:
    return pa.table({"id": pa.array([], pa.int64())})


def test_no_rows_appended_commit_nothing_and_overwritten_empty_the_table(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with make_lake(home) as catalog:
        catalog.tables.create_table(TABLE, pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
    lake = LakeResource(home=str(home))
    versions = []
    with sqlite_instance() as instance, Catalog(load_settings(home=home)) as catalog:
        for mode in ("append", "append", "overwrite"):
            result = dg.materialize(
                [quiet],
                instance=instance,
                resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, write_mode=mode)},
            )
            (event,) = result.get_asset_materialization_events()
            recorded = event.materialization.metadata["lake/version"].value
            versions.append((recorded, catalog.reads.open_table(TABLE).version))
        assert versions == [(1, 1), (1, 1), (2, 2)]
        assert catalog.reads.open_table(TABLE).count_rows() == 0
        assert [e.operation for e in catalog.reads.history(TABLE)] == ["create", "overwrite"]

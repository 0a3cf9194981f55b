"""The demo's user asset: materialized on the lake `lake up` seeds, through the Lake IO manager."""

from pathlib import Path

import dagster as dg
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs import demo_assets
from lake_platform.defs.definitions import build
from lake_platform.settings import load_settings
from lake_platform.up import demo


def test_region_totals_commits_a_table_from_the_seeded_orders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert demo_assets.ORDERS == demo.TABLE_NAME
    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "home"))
    with Catalog(load_settings()) as catalog:
        demo.seed_demo(catalog)
        definitions = build()
        with dg.DagsterInstance.ephemeral() as instance:
            job = definitions.resolve_implicit_global_asset_job_def()
            result = job.execute_in_process(
                instance=instance, asset_selection=[demo_assets.region_totals.key]
            )
        assert result.success
        totals = catalog.reads.open_table("demo.main.sales.region_totals").dataset.to_table()
    assert sorted(totals.column("region").to_pylist()) == ["east", "north", "south", "west"]
    assert sum(totals.column("region_count").to_pylist()) == 1000

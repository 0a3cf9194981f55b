"""An op's output that is no asset (a DynamicOut's mapped outputs, a plain op's) handed to the
Lake IO manager: refused with InvalidInput saying what to do instead, nothing written."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import load_settings
from lake_platform_tests.maintenance.helpers import make_lake


@dg.op(out=dg.DynamicOut(io_manager_key="lake_io"))
def days() -> Iterator[dg.DynamicOutput[list[int]]]:
    for day in ("2024-01-01", "2024-01-02"):
        yield dg.DynamicOutput([1, 2], mapping_key=day.replace("-", "_"))


@dg.job(resource_defs={"lake_io": LakeIOManager(lake=LakeResource())})
def fan_out() -> None:
    days()


def test_a_dynamic_output_is_refused_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    with dg.DagsterInstance.ephemeral() as instance:
        result = fan_out.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = str(failure.step_failure_data.error)
    assert "InvalidInput" in message and "dynamic output 2024_01_01" in message
    assert "fs_io_manager" in message
    with Catalog(load_settings(home=home)) as catalog:
        assert list(catalog.reads.list_tables("p.w.ns", declared=True)) == []

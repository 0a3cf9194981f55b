"""The bypass sensor on a real Dagster instance: a version committed around the registry by
pylance (a real Lance commit on the registered table's location) is caught within one tick,
moved to quarantine, written into the table's history, and the run the sensor requests is the
table's ``no_versions_beyond_registry`` check, which fails naming the table and version."""

from __future__ import annotations

import dagster as dg
import lance
from lance.dataset import LanceDataset, LanceOperation

from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.defs import checks
from lake_platform.defs.bypasses import bypass_check_job, bypass_sensor
from lake_platform.defs.definitions import build
from lake_platform.defs.ingest import ingested
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows


def bypassing_commit(lake: Lake) -> None:
    """lance-ray's write path: fragments, then pylance's LanceDataset.commit with the catalog's
    namespace and its default, unmanaged versioning (the manifest goes straight to storage)."""
    ns = LakeNamespace(lake.catalog)
    table_id = TABLE.split(".")
    ds = lance.dataset(namespace_client=ns, table_id=table_id)
    location = lake.catalog.reads.open_table(TABLE).record.location
    fragments = lance.fragment.write_fragments(rows(900, 4), location, schema=ds.schema)
    LanceDataset.commit(
        location,
        LanceOperation.Append(fragments),
        read_version=ds.version,
        namespace_client=ns,
        table_id=table_id,
    )


def tick(instance: dg.DagsterInstance, lake: Lake) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, resources=lake.resources) as context:
        result = bypass_sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def test_a_clean_lake_ticks_without_runs(instance, lake: Lake) -> None:
    result = tick(instance, lake)
    assert not result.run_requests
    assert result.skip_reason is not None and "no commit around the registry in 1 table" in str(
        result.skip_reason.skip_message
    )


def test_a_bypassing_commit_is_caught_in_one_tick_and_its_check_fails_naming_it(instance, lake: Lake) -> None:
    bypassing_commit(lake)  # version 2 on storage; the registry is at 1

    result = tick(instance, lake)

    assert [(r.tags["dagster/partition"], r.tags["lake/bypassed_versions"]) for r in result.run_requests] == [
        (TABLE, "2")
    ]
    history = [e for e in lake.catalog.reads.history(TABLE) if e.operation == "bypass"]
    assert [e.detail["versions"] for e in history] == [[2]]
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 10  # readers never saw it

    # The run the sensor asked for, as the daemon would launch it.
    defs = dg.Definitions(
        assets=[ingested],
        asset_checks=[checks.no_versions_beyond_registry],
        jobs=[bypass_check_job],
        resources=lake.resources,
    )
    run = defs.resolve_job_def("bypass_check").execute_in_process(
        instance=instance, tags=result.run_requests[0].tags, raise_on_error=False
    )
    assert run.success
    (evaluation,) = run.get_asset_check_evaluations()
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert f"version 2 of {TABLE} was committed around the registry" in (evaluation.description or "")
    assert evaluation.metadata["quarantined_versions"].value == [2]

    assert not tick(instance, lake).run_requests  # reported once


def test_the_code_location_runs_the_sensor() -> None:
    defs = build()
    assert defs.resolve_sensor_def("bypass_sensor").job_name == "bypass_check"

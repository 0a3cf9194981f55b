"""Every asset check, driven to fail by drift planted by hand, on a real Dagster instance.

Checks run the way a check-only run for one table does: a job selecting only the checks,
tagged with the table's partition. Each failing check must say what is wrong in words an
operator can act on, and carry its severity.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import dagster as dg
import lance
import pyarrow as pa

from lake_platform.catalog.arrow_io import schema_to_ipc
from lake_platform.catalog.catalog import Catalog
from lake_platform.defs import checks
from lake_platform.defs.ingest import ingested
from lake_platform.defs.maintenance import orphan_folder_report
from lake_platform.defs.resources import FlightEndpointResource
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform.settings import load_settings
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows

ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN


def run_checks(
    instance: dg.DagsterInstance, lake: Lake, *selected: dg.AssetChecksDefinition, flight_port: int = 1
) -> dict[str, dg.AssetCheckEvaluation]:
    job = dg.define_asset_job("lake_checks", selection=dg.AssetSelection.checks(*selected))
    resources = {
        **lake.resources,
        "flight": FlightEndpointResource(host="127.0.0.1", port=flight_port, timeout_seconds=2),
    }
    defs = dg.Definitions(
        assets=[ingested],
        asset_checks=list(selected),
        jobs=[job],
        resources=resources,
    )
    result = defs.resolve_job_def("lake_checks").execute_in_process(
        instance=instance, tags={"dagster/partition": TABLE}, raise_on_error=False
    )
    assert result.success  # a failing check is a result, never a crashed step
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def values(evaluation: dg.AssetCheckEvaluation) -> dict[str, object]:
    return {k: v.value for k, v in evaluation.metadata.items()}


def location(lake: Lake) -> Path:
    return Path(lake.catalog.reads.open_table(TABLE).record.location)


def rewrite_record(lake: Lake, **changes: object) -> None:
    """Plant drift in the registry: rewrite the table record behind the catalog's back."""
    key = keys.table(TableName.parse(TABLE))
    item = lake.catalog.store.get(key)
    assert item is not None
    record = decode(TableRecord, item.value, key).model_copy(update=changes)
    lake.catalog.store.compare_and_swap(key, item.revision, record.encode())


def v2_manifest_name(version: int) -> str:
    return f"{(1 << 64) - 1 - version:020d}.manifest"


ERROR_CHECKS = (
    checks.registry_version_is_real,
    checks.schema_matches_engine,
    checks.no_versions_beyond_registry,
)


def test_a_healthy_table_passes_every_check_and_says_so(instance, lake: Lake) -> None:
    found = run_checks(instance, lake, *ERROR_CHECKS)
    assert {name: e.passed for name, e in found.items()} == {
        "registry_version_is_real": True,
        "schema_matches_engine": True,
        "no_versions_beyond_registry": True,
    }
    assert "version 1" in found["registry_version_is_real"].description
    assert "no version newer than 1" in found["no_versions_beyond_registry"].description


def test_a_registered_version_missing_from_disk_fails(instance, lake: Lake) -> None:
    rewrite_record(lake, current_version=7)
    found = run_checks(instance, lake, *ERROR_CHECKS)
    real = found["registry_version_is_real"]
    assert not real.passed and real.severity == ERROR
    assert "registry says version 7" in real.description
    assert (
        "no manifest of version 7 on disk" in real.description and "newest on disk is 1" in real.description
    )
    assert values(real)["registered_version"] == 7 and values(real)["newest_on_disk"] == 1
    schema = found["schema_matches_engine"]  # cannot compare: reported, not crashed
    assert not schema.passed and "does not open at registered version 7" in schema.description


def test_a_deleted_current_manifest_fails(instance, lake: Lake) -> None:
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    manifest = location(lake) / "_versions" / v2_manifest_name(2)
    assert manifest.exists()
    manifest.rename(manifest.with_name("moved-away"))
    real = run_checks(instance, lake, checks.registry_version_is_real)["registry_version_is_real"]
    assert not real.passed and real.severity == ERROR
    assert "registry says version 2" in real.description and "newest on disk is 1" in real.description


def test_a_registry_schema_that_differs_from_the_engine_fails(instance, lake: Lake) -> None:
    drifted = pa.schema([("id", pa.int32()), ("name", pa.string()), ("extra", pa.float64())])
    rewrite_record(lake, schema_ipc_b64=TableRecord.encode_schema(schema_to_ipc(drifted)))
    schema = run_checks(instance, lake, checks.schema_matches_engine)["schema_matches_engine"]
    assert not schema.passed and schema.severity == ERROR
    text = schema.description
    assert "registry schema differs from the engine's at version 1" in text
    assert "id is int32 in the registry, int64 in the engine" in text
    assert "extra is only in the registry" in text and "name" not in text.split(":", 1)[1]

    rewrite_record(lake, schema_ipc_b64="")
    missing = run_checks(instance, lake, checks.schema_matches_engine)["schema_matches_engine"]
    assert not missing.passed and "registry holds no schema" in missing.description


def test_a_version_written_around_the_registry_fails(instance, lake: Lake) -> None:
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())  # version 2, registered
    lance.write_dataset(rows(500, 3), str(location(lake)), mode="append")  # a rogue writer: version 3
    lance.write_dataset(rows(600, 3), str(location(lake)), mode="append")  # and 4
    found = run_checks(instance, lake, *ERROR_CHECKS)
    beyond = found["no_versions_beyond_registry"]
    assert not beyond.passed and beyond.severity == ERROR
    assert (
        "registry says version 2; newest on disk is 4: versions 3, 4 were written around the registry"
        in beyond.description
    )
    assert values(beyond)["unregistered_versions"] == [3, 4]
    assert found["registry_version_is_real"].passed  # readers still get version 2 ...
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 15  # ... and nothing of the rogue rows


def test_a_rogue_version_moved_to_quarantine_still_fails_until_an_operator_clears_it(
    instance, lake: Lake
) -> None:
    lance.write_dataset(rows(500, 3), str(location(lake)), mode="append")  # a rogue writer: version 2
    lake.catalog.tables.append(
        TABLE, rows(100, 5).to_reader()
    )  # registers 2 and moves the rogue manifest aside
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 15  # the rogue rows never became visible

    quarantined = run_checks(instance, lake, checks.no_versions_beyond_registry)[
        "no_versions_beyond_registry"
    ]
    assert not quarantined.passed and quarantined.severity == ERROR
    assert f"version 2 of {TABLE} was committed around the registry" in quarantined.description
    assert "moved to _quarantine/" in quarantined.description
    assert values(quarantined)["quarantined_versions"] == [2]
    assert [p.split("/")[-2:] for p in values(quarantined)["quarantined_files"]] == [  # type: ignore[union-attr]
        ["_versions", v2_manifest_name(2)]
    ]

    shutil.rmtree(location(lake) / "_quarantine")  # the operator has looked
    assert run_checks(instance, lake, checks.no_versions_beyond_registry)[
        "no_versions_beyond_registry"
    ].passed


def test_a_crashed_writers_unregistered_manifest_fails_once_no_lease_can_cover_it(
    instance, lake: Lake
) -> None:
    versions = location(lake) / "_versions"
    staging = versions / f"{v2_manifest_name(2)}-{uuid.uuid4()}"
    shutil.copyfile(versions / v2_manifest_name(1), staging)  # written, never registered

    fresh = run_checks(instance, lake, checks.no_versions_beyond_registry)["no_versions_beyond_registry"]
    assert fresh.passed and "version 2 is being committed" in fresh.description  # a write may be in flight

    gone = time.time() - 3600  # far older than any lease: its writer is gone
    os.utime(staging, (gone, gone))
    crashed = run_checks(instance, lake, checks.no_versions_beyond_registry)["no_versions_beyond_registry"]
    assert not crashed.passed and crashed.severity == ERROR
    assert "registry says version 1; newest on disk is 2: version 2 was written around the registry" in (
        crashed.description
    )
    assert "crashed before registering" in crashed.description
    assert values(crashed)["unregistered_manifests"] == [f"_versions/{staging.name}"]


def test_an_unreachable_flight_endpoint_warns(instance, lake: Lake) -> None:
    health = run_checks(instance, lake, checks.flight_endpoint_healthy)["flight_endpoint_healthy"]
    assert not health.passed and health.severity == WARN
    assert "grpc://127.0.0.1:1" in health.description and "unreachable" in health.description


def test_a_warehouse_registered_outside_the_allowed_roots_fails(instance, lake: Lake, tmp_path: Path) -> None:
    def roots_check() -> dg.AssetCheckEvaluation:
        job = dg.define_asset_job("roots", selection=dg.AssetSelection.checks(checks.warehouse_roots_allowed))
        defs = dg.Definitions(
            assets=[orphan_folder_report],
            asset_checks=[checks.warehouse_roots_allowed],
            jobs=[job],
            resources=lake.resources,
        )
        result = defs.resolve_job_def("roots").execute_in_process(instance=instance, raise_on_error=False)
        assert result.success
        [evaluation] = result.get_asset_check_evaluations()
        return evaluation

    healthy = roots_check()
    assert healthy.passed and "all 1 warehouse root(s) obey" in healthy.description
    # Registered while LAKE_WAREHOUSE_ROOTS was wider; the check runs under today's narrower one.
    old = tmp_path / "old-disk" / "w"
    wide = f"{lake.home / 'warehouse'},{old.parent}"
    with Catalog(load_settings(home=lake.home, warehouse_roots=wide)) as widened:
        widened.containers.create_warehouse("p.legacy", root=str(old))
    found = roots_check()
    assert not found.passed and found.severity == ERROR
    assert (
        f"p.legacy: root {old}" in found.description
        and "outside the allowed warehouse roots" in found.description
    )
    assert values(found)["warehouses"] == 2

"""Asset checks: the registry and the engine agree, the Flight endpoint answers, warehouse roots
where the rule allows them. A table's maintenance health (fragments, versions, orphans, a
registered schema) is checked on the table's own asset: ``table_checks.py``.

Each check reports; none repairs. A failing check says what is wrong in words an operator can
act on (``description``) and carries the figures behind it (``metadata``).

Severity: ERROR where readers are affected or a writer went around the registry (the
registered version does not open, the registered schema is not the table's, versions exist on
disk that the registry never committed, a warehouse rooted where the allowed-roots rule
refuses one: a tenant boundary). WARN where the table is still correct but needs
attention (an unreachable Flight endpoint).
"""

import time
from typing import Any

import dagster as dg
import pyarrow as pa

from lake_platform.defs.ingest import ingested
from lake_platform.defs.maintenance import orphan_folder_report
from lake_platform.defs.partitions import allow_per_table_checks, tables
from lake_platform.defs.resources import FlightEndpointResource, LakeResource
from lake_platform.errors import LakeError

allow_per_table_checks()

ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN


def _table(context: dg.AssetCheckExecutionContext) -> str:
    return context.op_execution_context.partition_key


def _result(
    passed: bool, severity: dg.AssetCheckSeverity, description: str, **metadata: Any
) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=passed, severity=severity, description=description, metadata=metadata)


def _versions(numbers: list[int]) -> str:
    return ("version " if len(numbers) == 1 else "versions ") + ", ".join(str(n) for n in numbers)


@dg.asset_check(
    asset=ingested,
    partitions_def=tables,
    description=("The registry's current version is a real engine version, and the table opens there."),
)
def registry_version_is_real(
    context: dg.AssetCheckExecutionContext, lake: LakeResource
) -> dg.AssetCheckResult:
    from lake_platform.engine.lance_engine import versions_on_disk

    table = _table(context)
    with lake.catalog() as catalog:
        info = catalog.reads.describe_table(table, with_stats=False)
        on_disk = versions_on_disk(info.location, catalog.settings.storage_options(info.location))
        registered, newest = info.current_version, max(on_disk, default=0)
        figures = {"registered_version": registered, "newest_on_disk": newest}
        if registered not in on_disk:
            return _result(
                False,
                ERROR,
                (
                    f"registry says version {registered}, but there is no manifest of version "
                    f"{registered} on disk "
                    f"(newest on disk is {newest}): readers of {table} fail. The manifest was deleted or the "
                    "registry was rewritten by hand; restore the manifest or point the registry at a "
                    "real version."
                ),
                **figures,
            )
        try:
            snap = catalog.reads.open_table(table)
            opened, rows = int(snap.dataset.version), snap.count_rows()
        except LakeError as exc:
            return _result(
                False,
                ERROR,
                (
                    f"registry says version {registered} and its manifest is on disk, but the table "
                    "does not open "
                    f"there: {type(exc).__name__}: {exc}"
                ),
                **figures,
            )
    if opened != registered:
        return _result(
            False,
            ERROR,
            (
                f"registry says version {registered}, but opening the table gave version {opened}: "
                "reads do not "
                f"follow the registry."
            ),
            **figures,
            opened_version=opened,
        )
    return _result(
        True,
        ERROR,
        f"registry version {registered} is on disk and opens ({rows} rows).",
        **figures,
        opened_version=opened,
        rows=rows,
    )


def _schema_differences(registered: pa.Schema, engine: pa.Schema) -> list[str]:
    differences = []
    engine_fields = {f.name: f for f in engine}
    registry_fields = {f.name: f for f in registered}
    for f in registered:
        other = engine_fields.get(f.name)
        if other is None:
            differences.append(f"{f.name} is only in the registry")
        elif not f.type.equals(other.type):
            differences.append(f"{f.name} is {f.type} in the registry, {other.type} in the engine")
        elif f.nullable != other.nullable:
            differences.append(
                f"{f.name} is {'nullable' if f.nullable else 'not nullable'} in the registry only"
            )
    differences += [f"{f.name} is only in the engine" for f in engine if f.name not in registry_fields]
    if not differences and registered.names != engine.names:
        differences.append(
            f"column order differs (registry {', '.join(registered.names)}; engine {', '.join(engine.names)})"
        )
    return differences


@dg.asset_check(
    asset=ingested,
    partitions_def=tables,
    description=(
        "The registry holds the schema (Arrow IPC) and it equals the engine's schema at the current version."
    ),
)
def schema_matches_engine(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    from lake_platform.catalog.arrow_io import schema_from_ipc

    table = _table(context)
    with lake.catalog() as catalog:
        info = catalog.reads.describe_table(table, with_stats=False)
        try:
            snap = catalog.reads.open_table(table)
        except LakeError as exc:
            return _result(
                False,
                ERROR,
                (
                    f"cannot compare schemas: {table} does not open at registered version "
                    f"{info.current_version} "
                    f"({type(exc).__name__}); see registry_version_is_real."
                ),
                version=info.current_version,
            )
        ipc, engine_schema = snap.record.schema_ipc, snap.schema
    version = snap.version
    if not ipc:
        return _result(
            False,
            ERROR,
            (
                f"the registry holds no schema for {table} (version {version}): discovery and SQL planning "
                f"cannot see its columns."
            ),
            version=version,
            engine=str(engine_schema),
        )
    registered = schema_from_ipc(ipc)
    differences = _schema_differences(registered.remove_metadata(), engine_schema.remove_metadata())
    figures = {"version": version, "registry": str(registered), "engine": str(engine_schema)}
    if differences:
        return _result(
            False,
            ERROR,
            (
                f"registry schema differs from the engine's at version {version}: "
                + "; ".join(differences)
                + ". Queries are planned with the registry's schema and read the engine's."
            ),
            **figures,
        )
    return _result(
        True,
        ERROR,
        f"registry schema equals the engine's at version {version} ({len(registered)} columns).",
        **figures,
    )


@dg.asset_check(
    asset=ingested,
    partitions_def=tables,
    description=(
        "No version exists on disk beyond the registry's current one: every commit went through the registry "
        "(a rogue writer or a crashed one leaves versions readers never see)."
    ),
)
def no_versions_beyond_registry(
    context: dg.AssetCheckExecutionContext, lake: LakeResource
) -> dg.AssetCheckResult:
    from lake_platform.engine.lance_engine import manifest_version, manifests_on_disk, quarantined_files

    table = _table(context)
    with lake.catalog() as catalog:
        location = catalog.reads.describe_table(table, with_stats=False).location
        storage = catalog.settings.storage_options(location)
        manifests = manifests_on_disk(location, storage)
        quarantined = [e.path for e in quarantined_files(location, storage)]
        # Read the registry after listing, so a commit that landed meanwhile is not reported.
        info = catalog.reads.describe_table(table, with_stats=False)
        # A staging manifest older than a lease can only belong to a writer that is gone: its
        # lease expired, so it can no longer register the version.
        window = catalog.settings.lease_ttl_seconds + catalog.settings.lease_safety_margin_seconds
    registered = info.current_version
    if info.location != location:
        return _result(True, ERROR, f"{table} was recreated during the check; nothing to compare.")
    now = time.time()
    beyond = [m for m in manifests if m.version > registered]
    in_flight = sorted(
        {
            m.version
            for m in beyond
            if m.staging and m.mtime is not None and now - m.mtime.timestamp() < window
        }
        - {m.version for m in beyond if not m.staging}
    )
    around = sorted({m.version for m in beyond} - set(in_flight))
    figures: dict[str, Any] = {
        "registered_version": registered,
        "newest_on_disk": max((m.version for m in manifests), default=0),
        "unregistered_versions": around,
        "in_flight_versions": in_flight,
    }
    if not around and quarantined:
        # Moved aside when found (so nothing builds on them), but somebody wrote around the
        # registry, and that stays an error until an operator has looked.
        moved = sorted({v for p in quarantined if (v := manifest_version(p)) is not None})
        named = f"{_versions(moved)} of {table}" if moved else f"{len(quarantined)} file(s) of {table}"
        return _result(
            False,
            ERROR,
            (
                f"{named} {'was' if len(moved) == 1 else 'were'} committed around the registry (not "
                "through the catalog) and moved to _quarantine/ when found (see `lake table history "
                f"{table}`, operation bypass). Readers never saw them; the data is kept. Find the "
                f"writer, recover or drop its data, then delete {location}/_quarantine to clear this check."
            ),
            **figures,
            quarantined_versions=moved,
            quarantined_files=quarantined[:100],
        )
    if not around:
        note = f"; {_versions(in_flight)} is being committed" if in_flight else ""
        return _result(True, ERROR, f"no version newer than {registered} on disk{note}.", **figures)
    stray = [m for m in beyond if m.version in around]
    crashed = sorted({m.version for m in stray if m.staging})
    rogue = sorted({m.version for m in stray if not m.staging})
    causes = []
    if rogue:
        causes.append(f"{_versions(rogue)} by a writer that bypassed the catalog (a final manifest)")
    if crashed:
        causes.append(
            f"{_versions(crashed)} by a writer that crashed before registering "
            f"(a staging manifest older than the write lease)"
        )
    return _result(
        False,
        ERROR,
        (
            f"registry says version {registered}; newest on disk is {max(around)}: {_versions(around)} "
            f"{'was' if len(around) == 1 else 'were'} written around the registry: "
            + "; ".join(causes)
            + f". Readers do not see {'it' if len(around) == 1 else 'them'}; the next commit through the "
            f"catalog moves {'it' if len(around) == 1 else 'them'} to _quarantine/ and reuses the number. "
            f"Find the writer."
        ),
        **figures,
        unregistered_manifests=[m.path for m in stray],
    )


@dg.asset_check(
    asset=ingested,
    partitions_def=tables,
    description=(
        "The Flight SQL endpoint analysts query answers its health action (address and snapshot age shown)."
    ),
)
def flight_endpoint_healthy(
    context: dg.AssetCheckExecutionContext, flight: FlightEndpointResource
) -> dg.AssetCheckResult:
    report = flight.health()
    snapshot = report.get("snapshot") or {}
    status, address = report.get("status", ""), report.get("address", "")
    figures = {
        "address": address,
        "status": status,
        "snapshot_age_seconds": float(snapshot.get("age_seconds") or -1)
        if isinstance(snapshot, dict)
        else -1.0,
        "error": report.get("error", ""),
    }
    if status != "ok":
        detail = f": {figures['error']}" if figures["error"] else ""
        return _result(
            False,
            WARN,
            f"the Flight SQL endpoint at {address} is {status or 'not ok'}{detail}. Analysts cannot query.",
            **figures,
        )
    return _result(True, WARN, f"the Flight SQL endpoint at {address} answers.", **figures)


@dg.asset_check(
    asset=orphan_folder_report,
    description="Every registered warehouse's root obeys the allowed-roots rule (inside "
    "LAKE_WAREHOUSE_ROOTS, overlapping no other warehouse, the results area, the inbox or LAKE_HOME).",
)
def warehouse_roots_allowed(lake: LakeResource) -> dg.AssetCheckResult:
    with lake.catalog() as catalog:
        found = catalog.containers.root_violations()
        count = len(catalog.inventory.warehouses())
    if not found:
        return _result(
            True, ERROR, f"all {count} warehouse root(s) obey the allowed-roots rule.", warehouses=count
        )
    listed = "; ".join(f"{name}: {why}" for name, why in sorted(found.items()))
    return _result(
        False,
        ERROR,
        f"{len(found)} warehouse(s) registered where the allowed-roots rule refuses new ones: {listed}. "
        "Their tables may share storage with another tenant or the platform's own files; move their "
        "tables to a warehouse under an allowed root, or widen LAKE_WAREHOUSE_ROOTS if the root is "
        "meant to be allowed.",
        warehouses=count,
        violations=dg.MetadataValue.json(found),
    )


ALL = [
    registry_version_is_real,
    schema_matches_engine,
    no_versions_beyond_registry,
    flight_endpoint_healthy,
    warehouse_roots_allowed,
]

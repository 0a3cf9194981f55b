"""A table's health as asset checks on its own asset: what its page's Checks tab shows.

Four checks per table, read from the registry and the head's manifest (never its data):

- ``fragments_under_threshold``: main's and each branch head's fragment count is under the
  compaction threshold of the table's effective policy (WARN: due for compaction);
- ``versions_within_retention``: no version beyond the policy's ``retain_versions`` has waited
  longer than ``cleanup_interval`` for a cleanup (WARN: due for cleanup);
- ``no_orphans``: the last orphan scan found no orphan file and no Lance branch the registry does
  not know (WARN: the files are kept until reclaimed);
- ``schema_registered``: the registry holds the table's schema (ERROR: discovery and SQL
  planning cannot see its columns).

They are evaluated three ways, all under the same check keys: ``table_checks_sensor`` for every
table (the tables whose head moved, plus a round-robin sweep for policy changes and passing
time), each table maintenance run for the check its work answers (``defs/maintenance.py``), and
``table_checks`` for tables declared as assets, which lists the checks in the UI before any
evaluation and runs them from it.
"""

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg

from lake_platform.defs.asset_tables import key_for_table, table_for_key
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.table_assets import TickTables
from lake_platform.errors import TableNotFound

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

ERROR, WARN = dg.AssetCheckSeverity.ERROR, dg.AssetCheckSeverity.WARN

FRAGMENTS = "fragments_under_threshold"
VERSIONS = "versions_within_retention"
ORPHANS = "no_orphans"
SCHEMA = "schema_registered"
CHECKS = (FRAGMENTS, VERSIONS, ORPHANS, SCHEMA)

#: The per-table maintenance jobs (``defs/maintenance.py``), named here because the checks read
#: their last successful run.
COMPACTION_JOB = "table_compaction"
BRANCH_COMPACTION_JOB = "branch_compaction"
CLEANUP_JOB = "table_cleanup"
ORPHAN_SCAN_JOB = "table_orphan_scan"

#: Tables a sensor tick evaluates: those whose head moved first, then the sweep's next ones.
EVALUATED_PER_TICK = 50
SWEEP_PER_TICK = 10


@dataclass(frozen=True)
class Verdict:
    """One check's outcome for one table, whichever way it was evaluated."""

    check: str
    passed: bool
    severity: dg.AssetCheckSeverity
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def evaluation(self, key: dg.AssetKey) -> dg.AssetCheckEvaluation:
        """As reported from outside a check's own step (a sensor, a maintenance run)."""
        return dg.AssetCheckEvaluation(**self._fields(key))

    def result(self, key: dg.AssetKey) -> dg.AssetCheckResult:
        """As a declared check's step returns it."""
        return dg.AssetCheckResult(**self._fields(key))

    def _fields(self, key: dg.AssetKey) -> dict[str, Any]:
        return {
            "asset_key": key,
            "check_name": self.check,
            "passed": self.passed,
            "severity": self.severity,
            "description": self.description,
            "metadata": self.metadata,
        }


def last_success_ms(instance: dg.DagsterInstance, job: str, table: str) -> int:
    """When the newest successful run of ``job`` for ``table`` (its partition) ended; 0 if none."""
    records = instance.get_run_records(
        dg.RunsFilter(
            job_name=job, tags={"dagster/partition": table}, statuses=[dg.DagsterRunStatus.SUCCESS]
        ),
        limit=1,
    )
    ended = records[0].end_time if records else None
    return int(ended * 1000) if ended else 0


def fragments_verdict(catalog: "Catalog", table: str) -> Verdict:
    from lake_platform.maintenance.compaction import due

    _, _, fragments, threshold = due(catalog, table)
    effective = catalog.policies.effective_policy(table)
    source = effective.source or "(platform defaults)"
    branches = branch_fragments(catalog, table)
    over = sorted(b for b, n in branches.items() if n >= threshold)
    figures = {
        "fragments": fragments,
        "threshold": threshold,
        "compact_enabled": effective.policy.compact_enabled,
        "policy_source": source,
        "branch_fragments": dg.MetadataValue.json(branches),
    }
    if not effective.policy.compact_enabled:
        return Verdict(
            FRAGMENTS,
            True,
            WARN,
            f"{fragments} fragments; compaction is disabled by the policy of {source}.",
            figures,
        )
    if fragments >= threshold or over:
        lines = ([f"main has {fragments} fragments"] if fragments >= threshold else []) + [
            f"branch {b} has {branches[b]}" for b in over
        ]
        return Verdict(
            FRAGMENTS,
            False,
            WARN,
            f"{'; '.join(lines)}: at or above the compaction threshold of {threshold} (policy of {source}). "
            f"Due for compaction: the compaction sensor requests {COMPACTION_JOB} (main) or "
            f"{BRANCH_COMPACTION_JOB} (a branch) within a tick; if this stays, look at those runs.",
            figures,
        )
    return Verdict(
        FRAGMENTS,
        True,
        WARN,
        f"{fragments} fragments, under the compaction threshold of {threshold}.",
        figures,
    )


def branch_fragments(catalog: "Catalog", table: str) -> dict[str, int]:
    """Each live branch head's fragment count (one manifest read per branch)."""
    return {
        b.branch: len(catalog.branches.open_branch(table, b.branch).dataset.get_fragments())
        for b in catalog.branches.list_branches(table)
    }


def versions_verdict(
    catalog: "Catalog", instance: dg.DagsterInstance, table: str, now_ms: int, *, cleaned: bool = False
) -> Verdict:
    """Versions cleanup may remove (beyond the newest ``retain_versions``, untagged, not current)
    are fine while a cleanup ran within ``cleanup_interval`` (``cleaned``: one just did);
    otherwise cleanup is overdue."""
    policy = catalog.policies.effective_policy(table).policy
    _, versions = catalog.reads.readable_versions(table)
    ordered = sorted(versions)
    older = ordered[: -policy.retain_versions] if policy.retain_versions else ordered
    candidates = [v for v in older if not versions[v] and v != ordered[-1]]
    interval_ms = int(policy.cleanup_interval.total_seconds() * 1000)
    figures: dict[str, Any] = {
        "registered_versions": len(ordered),
        "retain_versions": policy.retain_versions,
        "retention_seconds": policy.retention.total_seconds(),
        "cleanup_interval_seconds": interval_ms / 1000,
        "beyond_retain_versions": len(candidates),
    }
    if not candidates:
        return Verdict(
            VERSIONS,
            True,
            WARN,
            f"{len(ordered)} registered version(s), within retain_versions={policy.retain_versions} "
            "(tagged versions and the current one always stay).",
            figures,
        )
    created = catalog.reads.describe_table(table, with_stats=False).created_at_ms
    logged = catalog.reports.last_logged(table, {"cleanup"}, now_ms - interval_ms) or 0
    last_ms = now_ms if cleaned else max(created, logged, last_success_ms(instance, CLEANUP_JOB, table))
    figures["last_cleanup_age_seconds"] = (now_ms - last_ms) // 1000
    if now_ms - last_ms < interval_ms:
        return Verdict(
            VERSIONS,
            True,
            WARN,
            f"{len(candidates)} version(s) beyond retain_versions={policy.retain_versions} wait for the "
            f"retention of {policy.retention} or the next cleanup (last {(now_ms - last_ms) // 1000}s ago, "
            f"every {policy.cleanup_interval}).",
            figures,
        )
    return Verdict(
        VERSIONS,
        False,
        WARN,
        f"{len(candidates)} version(s) beyond retain_versions={policy.retain_versions} and no cleanup for "
        f"{(now_ms - last_ms) // 1000}s, longer than the cleanup_interval of {policy.cleanup_interval}: "
        f"due for cleanup. The cleanup_interval_sensor requests {CLEANUP_JOB}; if this stays, look at "
        "those runs (or run `lake cleanup`).",
        figures,
    )


def orphans_verdict(catalog: "Catalog", table: str) -> Verdict:
    from lake_platform.maintenance.orphans import latest_report

    report = latest_report(catalog, table)
    if report is None:
        return Verdict(ORPHANS, True, WARN, "no orphan scan yet.", {"report": "none yet"})
    at = datetime.fromtimestamp(report.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    figures = {
        "orphans": report.orphan_count,
        "orphan_bytes": report.orphan_bytes,
        "unknown_branches": dg.MetadataValue.json(report.unknown_branches),
        "at_ms": report.at_ms,
    }
    if report.empty and not report.unknown_branches:
        return Verdict(
            ORPHANS,
            True,
            WARN,
            f"the orphan scan of {at} found no orphan files or unknown branches.",
            figures,
        )
    found = []
    if not report.empty:
        listed = ", ".join(o.path for o in report.orphans[:5]) + (", ..." if report.orphan_count > 5 else "")
        found.append(
            f"{report.orphan_count} orphan file(s), {report.orphan_bytes} bytes, under the table's location "
            f"that no live version references: {listed}"
        )
    if report.unknown_branches:
        found.append(
            f"{len(report.unknown_branches)} Lance branch(es) no registry record names (a branch create "
            f"killed before its registry commit): {', '.join(report.unknown_branches)}"
        )
    oldest_h = max((o.age_seconds for o in report.orphans), default=report.min_age_seconds) / 3600
    return Verdict(
        ORPHANS,
        False,
        WARN,
        f"the orphan scan of {at} found {'; and '.join(found)}. Nothing was deleted. After checking them, "
        f"reclaim with `lake orphans reclaim {table} --older-than <age>` (oldest is {oldest_h:.0f} h).",
        figures,
    )


def schema_verdict(catalog: "Catalog", table: str) -> Verdict:
    info = catalog.reads.describe_table(table, with_stats=False)
    figures = {"version": info.current_version, "columns": len(info.schema)}
    if not info.schema:
        return Verdict(
            SCHEMA,
            False,
            ERROR,
            f"the registry holds no schema for {table} (version {info.current_version}): discovery and SQL "
            "planning cannot see its columns. `lake repair` registers it from the engine.",
            figures,
        )
    return Verdict(
        SCHEMA, True, ERROR, f"the registry holds the schema ({len(info.schema)} columns).", figures
    )


def verdicts(
    catalog: "Catalog",
    instance: dg.DagsterInstance,
    table: str,
    now_ms: int,
    checks: Iterable[str] = CHECKS,
    *,
    cleaned: bool = False,
) -> list[Verdict]:
    """The named checks of ``table``, evaluated at ``now_ms`` (``cleaned``: by a cleanup run)."""
    wanted = set(checks)
    found = []
    if FRAGMENTS in wanted:
        found.append(fragments_verdict(catalog, table))
    if VERSIONS in wanted:
        found.append(versions_verdict(catalog, instance, table, now_ms, cleaned=cleaned))
    if ORPHANS in wanted:
        found.append(orphans_verdict(catalog, table))
    if SCHEMA in wanted:
        found.append(schema_verdict(catalog, table))
    return found


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Evaluates each table's health checks (fragments, versions, orphans, schema) from the "
    "registry and reports them on the table's asset: tables whose head moved, plus a few others per tick.",
)
def table_checks_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    events: list[dg.AssetCheckEvaluation] = []
    now_ms = int(time.time() * 1000)
    with lake.catalog() as catalog:
        tick = TickTables.of(catalog, context.cursor, EVALUATED_PER_TICK, SWEEP_PER_TICK)
        for table in tick.visit():
            try:
                found = verdicts(catalog, context.instance, table, now_ms)
            except TableNotFound:
                continue  # dropped since the scan
            key = key_for_table(table, lake.namespaces)
            events += [v.evaluation(key) for v in found]
    cursor = tick.cursor()
    if not events:
        return dg.SensorResult(skip_reason=dg.SkipReason("no tables"), cursor=cursor)
    return dg.SensorResult(asset_events=events, cursor=cursor)


def table_checks(
    specs: Sequence[dg.AssetSpec | dg.AssetsDefinition], name: str = "lake_table_checks"
) -> dg.AssetChecksDefinition:
    """The health checks of the tables ``specs`` declare (``table_specs``, or a user's own assets
    written through the IO manager), declared so the UI lists them on each table's page and can
    run them: the same evaluation as ``table_checks_sensor``, whose results land on the same checks."""

    @dg.multi_asset_check(
        name=name,
        specs=[
            dg.AssetCheckSpec(check, asset=spec.key, blocking=False) for spec in specs for check in CHECKS
        ],
        can_subset=True,
        description="Table health from the registry: fragments, versions, orphans, schema.",
    )
    def lake_table_checks(
        context: dg.AssetCheckExecutionContext, lake: LakeResource
    ) -> Iterator[dg.AssetCheckResult]:
        now_ms = int(time.time() * 1000)
        selected: dict[dg.AssetKey, list[str]] = {}
        for check_key in context.selected_asset_check_keys:
            selected.setdefault(check_key.asset_key, []).append(check_key.name)
        with lake.catalog() as catalog:
            for key, names in selected.items():
                table = table_for_key(key, lake.namespaces)
                for verdict in verdicts(catalog, context.instance, table, now_ms, names):
                    yield verdict.result(key)

    return lake_table_checks

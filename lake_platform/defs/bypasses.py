"""Commits made around the registry, caught within one tick: the bypass sensor looks at every
table's newest manifests (up to ``TABLES_PER_TICK`` per tick, round-robin beyond), moves any
version no registry commit made to quarantine and reports it (``catalog/bypasses.py``: a
``bypass`` entry in the table's history, the metric), then runs the
``no_versions_beyond_registry`` check for that table, which fails naming the table and version.
"""

from __future__ import annotations

import dagster as dg

from lake_platform.defs.checks import no_versions_beyond_registry
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import LakeResource

#: Tables looked at per tick: one registry read and one small listing each (``_versions/``'
#: newest names), so a tick of 1,000 tables stays within seconds on S3.
TABLES_PER_TICK = 1000

bypass_check_job = dg.define_asset_job(
    "bypass_check",
    selection=dg.AssetSelection.checks(no_versions_beyond_registry),
    description="Runs no_versions_beyond_registry for a table the bypass sensor caught.",
)


@dg.sensor(
    job=bypass_check_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Finds versions committed around the registry (a manifest no registry commit made), "
    "moves them to quarantine, records them in the table's history and runs the table's "
    "no_versions_beyond_registry check, which then fails naming the table and versions.",
)
def bypass_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    from lake_platform.errors import ConcurrentModification, TableNotFound

    known = sorted(context.instance.get_dynamic_partitions(tables.name))
    after = context.cursor or ""
    ring = [t for t in known if t > after] + [t for t in known if t <= after]
    todo = ring[:TABLES_PER_TICK]
    requests, caught = [], []
    with lake.catalog() as catalog:
        for table in todo:
            try:
                versions = catalog.manifests.catch_bypasses(table)
            except (TableNotFound, ConcurrentModification):
                continue  # gone, or its lease is busy: the next tick looks again
            if versions:
                listed = ",".join(str(v) for v in versions)
                caught.append(f"{table} (version(s) {listed})")
                requests.append(
                    # A check-only run of one table: tagged with its partition, as the run
                    # queue serializes runs per table (a checks-only job has no partitions).
                    dg.RunRequest(
                        tags={
                            "dagster/partition": table,
                            "lake/trigger": "bypass",
                            "lake/bypassed_versions": listed,
                        }
                    )
                )
    cursor = todo[-1] if todo and len(known) > TABLES_PER_TICK else ""
    if not requests:
        return dg.SensorResult(
            skip_reason=dg.SkipReason(f"no commit around the registry in {len(todo)} table(s)"), cursor=cursor
        )
    context.log.warning("committed around the registry, moved to quarantine: %s", "; ".join(caught))
    return dg.SensorResult(run_requests=requests, cursor=cursor)

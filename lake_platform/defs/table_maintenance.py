"""Compaction as soon as a table crosses its threshold, whoever wrote it (the Lake IO manager, a
REST or Flight client, the CLI), under the policy of its own scope.

``moved_tables_compaction_sensor`` looks every 15 s at the registry's table heads (one registry
scan, no storage I/O) and evaluates only the tables whose version moved since its last tick: each
against its effective policy (``compact_enabled``, ``compact_min_fragments``: the table's own
policy, else its namespace's, warehouse's, project's, else the defaults), so a hot table is
compacted within a tick and a run of crossing its threshold, and a table nobody writes costs
nothing. The platform's ``compaction_sensor`` still sweeps every table round-robin and follows
the inbox's ingests.
"""

from __future__ import annotations

import json

import dagster as dg

from lake_platform.defs.maintenance import compacted
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import LakeResource

#: Moved tables a tick evaluates (each one storage read of its fragment count); the rest wait for
#: the next tick, in name order.
EVALUATED_PER_TICK = 50


@dg.sensor(
    target=[compacted],
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests compaction of each table whose version moved and whose fragment count reached "
    "the threshold of its scope's policy (table, namespace, warehouse, project).",
)
def moved_tables_compaction_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource
) -> dg.SensorResult:
    from lake_platform.errors import TableNotFound
    from lake_platform.maintenance.compaction import due

    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    with lake.catalog() as catalog:
        heads = {r.name: (r.incarnation, r.current_version) for r in catalog.reads.list_tables()}
        moved = sorted(name for name, (inc, v) in heads.items() if seen.get(name) != f"{inc}:{v}")
        for table in moved[:EVALUATED_PER_TICK]:
            incarnation, version = heads[table]
            seen[table] = f"{incarnation}:{version}"
            try:
                is_due, why, _, _ = due(catalog, table)
            except TableNotFound:
                continue  # dropped since the scan
            reasons.append(f"{table}: {why}")
            if is_due:
                requests.append(
                    dg.RunRequest(
                        partition_key=table,
                        run_key=f"compact:{table}:v{version}",
                        tags={"lake/trigger": "table-moved"},
                    )
                )
    cursor = json.dumps({t: at for t, at in seen.items() if t in heads}, sort_keys=True)
    if not requests:
        return dg.SensorResult(
            skip_reason=dg.SkipReason("; ".join(reasons) or "no table moved"), cursor=cursor
        )
    known = set(context.instance.get_dynamic_partitions(tables.name))
    missing = sorted({r.partition_key for r in requests if r.partition_key not in known})
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[tables.build_add_request(missing)] if missing else [],
        cursor=cursor,
    )

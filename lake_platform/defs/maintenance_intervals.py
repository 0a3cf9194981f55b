"""Version cleanup and orphan scans by policy, per scope: each table is maintained when the
interval its own scope's policy sets (``cleanup_interval``, ``orphan_scan_interval``: the
table's policy, else its namespace's, warehouse's, project's, else the defaults) has elapsed
since its last run, so a table whose policy asks for hourly cleanup gets it and one on the
defaults is cleaned daily and scanned weekly, never more.

The runs are the table maintenance jobs ``table_cleanup`` and ``table_orphan_scan``
(``defs/maintenance.py``), partitioned by the table. A table's last run is the newest of: the
registry's commit log (a ``cleanup`` or ``orphan-scan`` entry, whoever made it: these sensors'
runs, ``lake cleanup``, another machine), the job's last successful run for the table (a cleanup
that found nothing to remove commits nothing), and the table's creation (a new table waits one
interval). The sensors keep, per table, when to look again, so a tick reads the registry only
for tables that may be due (and re-reads each at least every ``RECHECK``, to follow policy
changes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.defs.maintenance import table_cleanup_job, table_orphan_scan_job
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.table_checks import last_success_ms
from lake_platform.errors import TableNotFound

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.policies import Policy

#: Tables a tick evaluates (a policy resolution, a commit-log read since the last run, one
#: instance query each), those whose next look is soonest first; the rest wait for a later tick.
EVALUATED_PER_TICK = 100
#: The longest a table goes unevaluated: a policy change takes effect within it.
RECHECK = timedelta(minutes=15)


@dataclass(frozen=True)
class Routine:
    """One kind of interval maintenance: what it runs and what counts as its last run."""

    kind: str
    job: dg.JobDefinition
    #: Commit-log operations that are a run of it.
    operations: frozenset[str]
    interval: Callable[[Policy], timedelta]


CLEANUP = Routine("cleanup", table_cleanup_job, frozenset({"cleanup"}), lambda p: p.cleanup_interval)
ORPHAN_SCAN = Routine(
    "orphans", table_orphan_scan_job, frozenset({"orphan-scan"}), lambda p: p.orphan_scan_interval
)


@dataclass
class Look:
    """What a sensor remembers of one table between ticks."""

    incarnation: str
    #: The newest run found (epoch ms), or the table's creation.
    last_ms: int
    #: When to evaluate the table again (epoch ms).
    next_ms: int


def due_runs(
    routine: Routine,
    catalog: Catalog,
    instance: dg.DagsterInstance,
    cursor: str | None,
    now_ms: int,
) -> dg.SensorResult:
    """The run requests of ``routine`` due at ``now_ms``, and the cursor for the next tick."""
    looks = {t: Look(*v) for t, v in json.loads(cursor).items()} if cursor else {}
    heads = {r.name: r for r in catalog.reads.list_tables()}
    waiting = sorted(
        (look.next_ms if look and look.incarnation == r.incarnation else 0, name)
        for name, r in heads.items()
        for look in [looks.get(name)]
    )
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    for next_ms, table in waiting[:EVALUATED_PER_TICK]:
        if next_ms > now_ms:
            break
        record = heads[table]
        known = looks.get(table)
        last_ms = known.last_ms if known and known.incarnation == record.incarnation else record.created_at_ms
        try:
            policy = catalog.policies.effective_policy(table).policy
        except TableNotFound:
            continue  # dropped since the scan
        interval_ms = int(routine.interval(policy).total_seconds() * 1000)
        last_ms = _last_run(routine, catalog, instance, table, last_ms, now_ms - interval_ms)
        due_ms = last_ms + interval_ms
        if due_ms <= now_ms:
            requests.append(
                dg.RunRequest(
                    job_name=routine.job.name,
                    partition_key=table,
                    # One request per interval window: a run that fails is asked for again in the next.
                    run_key=f"{routine.kind}:{table}:{record.incarnation}:{now_ms // interval_ms}",
                    tags={"lake/trigger": f"{routine.kind}-interval"},
                )
            )
            reasons.append(f"{table}: due (last run {(now_ms - last_ms) // 1000}s ago)")
        else:
            reasons.append(f"{table}: next in {(due_ms - now_ms) // 1000}s")
        recheck_ms = now_ms + int(RECHECK.total_seconds() * 1000)
        looks[table] = Look(
            record.incarnation, last_ms, recheck_ms if due_ms <= now_ms else min(due_ms, recheck_ms)
        )
    state = json.dumps(
        {t: [v.incarnation, v.last_ms, v.next_ms] for t, v in looks.items() if t in heads}, sort_keys=True
    )
    if not requests:
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(reasons) or "no table due"), cursor=state)
    known_partitions = set(instance.get_dynamic_partitions(tables.name))
    missing = sorted({r.partition_key for r in requests if r.partition_key not in known_partitions})
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[tables.build_add_request(missing)] if missing else [],
        cursor=state,
    )


def _last_run(
    routine: Routine,
    catalog: Catalog,
    instance: dg.DagsterInstance,
    table: str,
    known_ms: int,
    window_ms: int,
) -> int:
    """The newest of ``known_ms`` and the runs since: the commit log's entries read only from
    the later of ``known_ms`` and the interval's window (an older run makes the table due
    whatever it was), and the routine's job's last successful run for the table."""
    logged = catalog.reports.last_logged(table, routine.operations, max(known_ms + 1, window_ms))
    return max(known_ms, logged or 0, last_success_ms(instance, routine.job.name, table))


def _interval_sensor(routine: Routine, name: str, description: str) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        jobs=[routine.job],
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=description,
    )
    def interval_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
        with lake.catalog() as catalog:
            return due_runs(routine, catalog, context.instance, context.cursor, int(time.time() * 1000))

    return interval_sensor


cleanup_interval_sensor = _interval_sensor(
    CLEANUP,
    "cleanup_interval_sensor",
    "Requests version cleanup of each table whose scope's policy cleanup_interval (table, namespace, "
    "warehouse, project) has elapsed since its last cleanup.",
)
orphan_scan_interval_sensor = _interval_sensor(
    ORPHAN_SCAN,
    "orphan_scan_interval_sensor",
    "Requests an orphan scan (report only) of each table whose scope's policy orphan_scan_interval has "
    "elapsed since its last scan.",
)

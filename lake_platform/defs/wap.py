"""Write-audit-publish: a run's tables written on a branch named after the run, audited by the
assets' checks there, published to main only when the run succeeded.

- Write: with ``wap`` (the IO manager's setting, or an asset's metadata), ``handle_output``
  writes on branch ``run_<run id>`` of the table (made from main's head on the run's first
  write of it; a table that does not exist yet is created empty on main first, so there is a
  main to branch from: a run that finds another run created it meanwhile branches from that
  one). Every mode the IO manager writes on main is written on the branch
  (``asset_tables.plan_write``): append, overwrite, merge (``branch_changes.merge_insert``) and
  a partitioned output's exact replacement of its partitions (``branch_writes.replace_where``),
  each one version of the branch. An append or a merge of no rows makes no branch (nothing to
  audit or publish): its materialization records main's head, and the publish leaves the table
  out.
- Audit: the materialization records the branch, so the asset's checks (and downstream assets)
  in the same run load the branch's version through the IO manager; main does not move.
- Publish: ``wap_publish_sensor`` (a run-status sensor on success) fast-forwards main to the
  branch version the run's latest materialization of each table recorded, in ONE registry
  transaction
  (``catalog.branch_publish.publish_branches``: every main moves or none does, and a reader
  never holds one table published and another not), and observes each table's new main version.
  A blocking check that failed fails the run, so nothing is published: main is as it
  was and the branch stays for inspection (``lake branch list``, ``lake table history``;
  ``lake branch delete`` moves it to the trash). The sensor refuses too when any blocking
  check evaluation of the run failed. A failed run re-executed from failure (its checks fixed)
  runs only the failed steps: when it succeeds, the branches the failed run wrote are published
  (with those its own steps wrote: one transaction per branch).
- What is published of a table is what the chain's LATEST materialization of it recorded
  (``run_branches``): a re-execution whose write of the table made no branch (no rows, None)
  leaves it out, never the failed run's older rows still on that run's branch; a branch
  written past the recorded version since (by hand, a restore) fails the publish with
  InvalidTableState and nothing of the run is published (compactions since are published
  with it: ``branch_publish``). A multi-asset step's ``step_<hash>`` branch, published by
  its step, is none of the sensor's.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, NamedTuple

import dagster as dg

from lake_platform.defs.asset_tables import BRANCH, TABLE, VERSION, WritePlan, Written, table_metadata
from lake_platform.defs.errors import lake_errors
from lake_platform.defs.resources import ACTOR, LakeResource
from lake_platform.errors import TableAlreadyExists, TableBranchAlreadyExists, TableNotFound

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.provenance import Provenance


def run_branch(run_id: str) -> str:
    """The branch a run writes on: ``run_`` and the run id (a UUID: hex digits and dashes)."""
    return "run_" + run_id.lower().replace("-", "_")


def write_on_branch(
    catalog: Catalog, table: str, branch: str, data: pa.RecordBatchReader, plan: WritePlan, by: Provenance
) -> Written:
    """One commit of ``data`` by ``plan`` on ``branch`` of ``table`` (see the module
    docstring), or the answer of the commit ``by.commit_id`` already made."""
    from lake_platform.catalog.arrow_io import holds_rows
    from lake_platform.catalog.provenance import Provenance

    assert by.commit_id is not None
    landed = catalog.ctx.replayed(by.commit_id, table=table, operation=None, branch=branch)
    if landed is not None:
        return Written(landed.operation, landed.to_version or 0, replayed=True, branch=branch)
    change = None
    if plan.operation != "overwrite":  # refused by the table's schema policy before a branch is made
        try:
            change = catalog.schemas.plan_input(table, [data.schema])
        except TableNotFound:
            pass
    setup = Provenance(actor=by.actor, run_id=by.run_id, commit_id=f"{by.commit_id}-main")
    # An append, or a merge (matched rows updated, the others inserted), of no rows changes nothing.
    if plan.operation in ("append", "merge") and not change:
        holds, data = holds_rows(data)
        if not holds:  # nothing to audit or publish: no branch, main's head answered
            return Written(plan.operation, _main_head(catalog, table, data.schema, setup), replayed=False)
    try:
        catalog.branches.create_branch(table, branch, by=Provenance(actor=by.actor, run_id=by.run_id))
    except TableBranchAlreadyExists:
        pass  # this run wrote the table before (or this step is a retry)
    except TableNotFound:
        _main_head(catalog, table, data.schema, setup)
        catalog.branches.create_branch(table, branch, by=Provenance(actor=by.actor, run_id=by.run_id))
    if plan.operation == "replace":
        assert plan.predicate is not None
        result = catalog.branch_writes.replace_where(table, branch, plan.predicate, data, by=by)
        return Written("replace", result.to_version or 0, result.replayed, branch)
    if plan.operation == "merge":
        merged = catalog.branch_changes.merge_insert(
            table, branch, data, list(plan.key_columns), update_matched=True, insert_unmatched=True, by=by
        )
        return Written("merge", merged.version, replayed=False, branch=branch)
    write = catalog.branch_writes.overwrite if plan.operation == "overwrite" else catalog.branch_writes.append
    result = write(table, branch, data, by=by)
    return Written(plan.operation, result.to_version or 0, result.replayed, branch)


def _main_head(catalog: Catalog, table: str, schema: pa.Schema, by: Provenance) -> int:
    """Main's head version of ``table``, created empty with ``schema`` when it does not exist
    yet (there is a main to branch from; a run that finds another run created it meanwhile
    takes the table that one made)."""
    import pyarrow as pa

    from lake_platform.naming import TableName

    try:
        return catalog.reads.head(TableName.parse(table)).current_version
    except TableNotFound:
        pass
    try:
        catalog.tables.create_table(table, pa.RecordBatchReader.from_batches(schema, []), by=by)
    except TableAlreadyExists:
        pass  # another run created it since: this run branches from the table it made
    return catalog.reads.head(TableName.parse(table)).current_version


def publish_commit_id(run_id: str, branch: str) -> str:
    """The commit id of publishing the run's ``branch`` of all its tables (each table's is this
    with ``-t<i>``)."""
    return "dg-" + hashlib.sha256(f"{run_id}\0publish\0{branch}".encode()).hexdigest()[:48]


class RunWrite(NamedTuple):
    """A table's latest write in a run's chain, on a run's branch: what its publish takes."""

    key: dg.AssetKey
    branch: str
    #: The branch version the materialization recorded (what the run's checks audited).
    version: int


def run_branches(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dict[str, RunWrite]:
    """The tables the run wrote on branches: table -> its latest write. A re-execution also
    owns what the runs before it in its chain wrote, back to the last one that succeeded (whose
    publish took what came before): a run re-executed from failure does not run again the steps
    that wrote, so their branches are the failed run's. A table written again takes the newer
    materialization, and one that made no branch (no rows, None, written on main) takes the
    table out: the failed run's rows on its branch are not what the run ended with."""
    chain = [run.run_id]
    parent = instance.get_run_by_id(run.parent_run_id) if run.parent_run_id else None
    while parent is not None and parent.status != dg.DagsterRunStatus.SUCCESS:
        chain.append(parent.run_id)
        parent = instance.get_run_by_id(parent.parent_run_id) if parent.parent_run_id else None
    found: dict[str, RunWrite | None] = {}
    for run_id in reversed(chain):  # oldest first: a newer run's write wins
        _latest_writes(instance, run_id, found)
    return {table: write for table, write in found.items() if write is not None}


def _latest_writes(instance: dg.DagsterInstance, run_id: str, found: dict[str, RunWrite | None]) -> None:
    """Each table's materializations in ``run_id``, in order, over ``found``: a write on the
    run's branch, or None (it made none)."""
    ours = run_branch(run_id)
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    for rec in records:  # ascending: the run's last materialization of a table wins
        event = rec.asset_materialization
        if event is None or TABLE not in event.metadata:
            continue  # not the Lake IO manager's
        table = str(event.metadata[TABLE].value)
        branch = event.metadata.get(BRANCH)
        if branch is None or str(branch.value) != ours:  # main's, or a multi-asset step's (published)
            found[table] = None
            continue
        found[table] = RunWrite(event.asset_key, ours, int(event.metadata[VERSION].value))


def failed_blocking_checks(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
    failed = []
    for rec in records:
        data = (
            rec.event_log_entry.dagster_event.event_specific_data
            if rec.event_log_entry.dagster_event
            else None
        )
        if isinstance(data, dg.AssetCheckEvaluation) and data.blocking and not data.passed:
            failed.append(f"{data.asset_key.to_user_string()}:{data.check_name}")
    return failed


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Publishes the branches a successful run wrote in write-audit-publish mode: every "
    "table's main fast-forwarded in one atomic commit.",
)
def wap_publish_sensor(context: dg.RunStatusSensorContext, lake: LakeResource) -> dg.SkipReason | None:
    from lake_platform.catalog.provenance import Provenance

    run_id = context.dagster_run.run_id
    written = run_branches(context.instance, context.dagster_run)
    if not written:
        return dg.SkipReason("the run wrote no branch")
    failed = failed_blocking_checks(context.instance, run_id)
    if failed:
        return dg.SkipReason(f"blocking checks failed ({', '.join(failed)}): nothing published")
    by_branch: dict[str, dict[str, int]] = {}
    for table, write in written.items():
        by_branch.setdefault(write.branch, {})[table] = write.version
    with lake_errors(), lake.catalog() as catalog:
        # A re-execution publishes the failed run's branch and its own in turn: each is checked
        # before either lands, so a refusal publishes nothing of the run (bar a race).
        publishes = [
            (
                branch,
                tables,
                Provenance(actor=ACTOR, run_id=run_id, commit_id=publish_commit_id(run_id, branch)),
            )
            for branch, tables in sorted(by_branch.items())
        ]
        for branch, tables, by in publishes:
            catalog.branch_publish.check_publishable(sorted(tables), branch, expect=tables, by=by)
        for branch, tables, by in publishes:
            # All of the run's tables in one registry transaction: main moves for every one of
            # them or for none; a retry of a publish that landed replays it. Each branch at the
            # version the run recorded (and audited), or nothing is published.
            catalog.branch_publish.publish_branches(sorted(tables), branch, by=by, expect=tables)
        for table, (key, branch, _) in sorted(written.items()):
            snapshot = catalog.reads.open_table(table)
            metadata = table_metadata(table, snapshot.version, snapshot.schema, snapshot.count_rows())
            context.instance.report_runless_asset_event(
                dg.AssetObservation(asset_key=key, metadata={**metadata, "lake/published_from": branch})
            )
            context.log.info("%s: published %s, main at version %s", table, branch, metadata[VERSION])
    return None

"""LakeIOManager: a user's asset written as ONE governed commit of the table its key names, and
read back at the version its materialization recorded.

Writes (``handle_output``), by the asset's definition metadata, else the manager's config:

- ``write_mode``: ``append`` (default), ``overwrite`` or ``merge`` (merge-insert on
  ``key_columns``: matched rows updated, the others inserted);
- a partitioned asset names its partition column in ``partition_expr`` and always replaces
  exactly its partitions (``asset_tables.plan_write``): one ``rows.replace_where`` that deletes
  the rows of the partition predicate and appends the output in ONE commit, so readers see the
  partition old or new, never half, and every row of the output lands (identical rows too);
  ``key_columns`` change nothing there. A row of another partition fails the step unwritten;
- the first write of a table creates it (same commit id); when another writer creates it
  meanwhile, the output is written to that table (a stream, which cannot be read twice, fails
  retryably instead: ``write``);
- with ``wap``, the same plan is written on the run's branch (``wap.write_on_branch``).
- a multi-asset's outputs (two or more of a step's outputs through this manager) are written on
  the step attempt's branch and all published in one registry transaction at its last
  (``step_outputs``): a reader never sees one of its tables new and another old.

The commit id comes from the run, the step, the asset and its partitions
(``asset_tables.step_commit_id``): a retried step finds its first commit's marker and writes
nothing again. For a re-execution the run is the earliest of its chain in which the step never
succeeded (``commit_run_id``): a step whose process died after its commit landed (kill -9, a
lost pod), re-executed from failure in a new run, applies once too, while a step that succeeded
and is re-executed writes anew. (A write-audit-publish write uses the run itself: each run
writes its own branch.)

Each materialization records the table, its new version (what downstream inputs pin to), the
rows and bytes written and Dagster's standard table metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal

import dagster as dg
import pyarrow as pa

from lake_platform.defs.asset_tables import (
    BRANCH,
    COMMIT_ID,
    TABLE,
    WritePlan,
    Written,
    column_names,
    flag,
    plan_write,
    step_commit_id,
    table_for_key,
    table_metadata,
)
from lake_platform.defs.errors import lake_errors
from lake_platform.defs.io_frames import (
    Tally,
    annotation_kind,
    as_kind,
    as_reader,
    checked_whole,
    conformed,
    counted,
)
from lake_platform.defs.io_reads import BranchPins, Pin, ReadPlan, never_published, plan_read, scan_options
from lake_platform.defs.partition_rows import context_rows
from lake_platform.defs.resources import ACTOR, LakeResource
from lake_platform.defs.step_outputs import publish_group, step_group
from lake_platform.defs.wap import run_branch, write_on_branch
from lake_platform.errors import (
    ConcurrentModification,
    InvalidInput,
    TableAlreadyExists,
    TableBranchNotFound,
    TableNotFound,
)

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.provenance import Provenance
    from lake_platform.catalog.reads import TableSnapshot

#: The resource key the code location registers the manager under (``definitions.resources``).
IO_MANAGER_KEY = "lake_io"
WriteMode = Literal["append", "overwrite", "merge"]


class LakeIOManager(dg.ConfigurableIOManager):
    """Assets as governed Lance tables (see the module docstring). ``namespaces`` maps an asset
    key prefix (path parts joined by ``/``) to the namespace its tables live in, e.g.
    ``{"sales": "demo.main.sales"}``: asset ``sales/orders_clean`` is table
    ``demo.main.sales.orders_clean``; empty means the ``lake`` resource's ``namespaces`` (which
    the table assets use too). A key of four or more parts with no mapped prefix is the table's
    own name."""

    lake: LakeResource
    namespaces: dict[str, str] = {}  # noqa: RUF012 - a pydantic field: each instance gets a copy
    write_mode: WriteMode = "append"
    #: Write-audit-publish (``defs.wap``): write on the run's branch, publish when the run succeeds.
    wap: bool = False

    def key_map(self) -> dict[str, str]:
        return self.namespaces or self.lake.namespaces

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        with lake_errors():  # bad metadata fails the step at once, as the catalog's refusals do
            if obj is None:  # an asset with nothing to write this time: its table stays as it is
                self._nothing(context)
            else:
                self._handle_output(context, obj)

    def _nothing(self, context: dg.OutputContext) -> None:
        table = table_for_key(asset_of(context), self.key_map())
        meta = context.definition_metadata or {}
        if not flag(meta.get("wap", self.wap), "wap"):
            group = step_group(context, commit_run_id(context))
            tables = group.handled(context.name, None) if group is not None else None
            if group is not None and tables:  # the step's last output: its others land now
                with self.lake.catalog() as catalog:
                    publish_group(catalog, group, tables)
        context.log.info("%s: the asset returned None, nothing written", table)
        context.add_output_metadata({TABLE: table, "lake/written": False})

    def _handle_output(self, context: dg.OutputContext, obj: object) -> None:
        table = table_for_key(asset_of(context), self.key_map())
        meta = context.definition_metadata or {}
        partitions = list(context.asset_partition_keys) if context.has_asset_partitions else []
        rows = context_rows(context, meta.get("partition_expr"))
        if partitions and rows is None:
            raise InvalidInput(
                f"partitioned asset {context.asset_key.to_user_string()} names its partition column "
                "in its metadata (partition_expr) to be written by the Lake IO manager"
            )
        from lake_platform.catalog.provenance import Provenance

        wap = flag(meta.get("wap", self.wap), "wap")
        lineage = context.run_id if wap else commit_run_id(context)
        # A multi-asset's outputs land together: on the step's branch, published at its last.
        group = None if wap else step_group(context, lineage)
        by = Provenance(
            actor=ACTOR,
            run_id=context.run_id,
            commit_id=group.commit_id(context.asset_key, partitions)
            if group is not None
            else step_commit_id(lineage, context.step_key, context.asset_key, partitions),
        )
        tally = Tally()

        def stream() -> pa.RecordBatchReader:
            tally.rows = tally.bytes = 0
            return counted(checked_whole(obj, as_reader(obj), rows), tally, rows)

        data = stream()
        key_columns = column_names(meta.get("key_columns"), "key_columns")
        mode = str(meta.get("write_mode", self.write_mode))
        plan = plan_write(table, mode, key_columns, rows, data.schema)
        branch: str | None = None
        with self.lake.catalog() as catalog:
            data = conformed(data, table_types(catalog, table))
            published = group.published(catalog, table) if group is not None else None
            if published is not None:  # an earlier attempt of the step landed its outputs
                written = Written("publish", published.to_version or 0, replayed=True)
                snapshot = catalog.reads.open_table(table, written.version)
            elif wap or group is not None:
                on = run_branch(context.run_id) if group is None else group.branch
                written = write_on_branch(catalog, table, on, data, plan, by)
                branch = written.branch  # None: no rows appended, no branch made, nothing to publish
                snapshot = (
                    catalog.reads.open_table(table, written.version)
                    if branch is None
                    else catalog.branches.open_branch(table, branch, written.version)
                )
            else:
                # An output held in memory can be read again (a stream cannot): for a create
                # another writer overtook after this one's rows went to it.
                def again() -> pa.RecordBatchReader:
                    return conformed(stream(), table_types(catalog, table))

                once = isinstance(obj, pa.RecordBatchReader)
                written = write(catalog, table, data, plan, by, again=None if once else again)
                snapshot = catalog.reads.open_table(table, written.version)
            metadata = table_metadata(table, written.version, snapshot.schema, snapshot.count_rows())
            if written.replayed:  # nothing read this time: the rows the commit wrote
                landed = published or catalog.reads.commit(table, str(by.commit_id))
                tally.rows = landed.rows_added if landed is not None else tally.rows
            if group is not None:
                tables = group.handled(context.name, table if branch is not None else None)
                if tables:  # the step's last output: all of them land now, or none does
                    publish_group(catalog, group, tables)
        if branch is not None:
            metadata[BRANCH] = branch
        if rows is not None and len(partitions) == 1:  # a range's events would each claim all its rows
            metadata["dagster/partition_row_count"] = dg.MetadataValue.int(tally.rows)
        context.log.info(
            "%s: %s at version %s%s",
            table,
            written.operation,
            written.version,
            " (replayed)" * written.replayed,
        )
        context.add_output_metadata(
            {
                **metadata,
                COMMIT_ID: str(by.commit_id),
                "lake/operation": written.operation,
                "lake/replayed": written.replayed,
                "lake/rows_written": dg.MetadataValue.int(tally.rows),
                # The output's Arrow bytes, counted as it streams: a replay reads none of it.
                **({} if written.replayed else {"lake/bytes_written": dg.MetadataValue.int(tally.bytes)}),
            }
        )

    def load_input(self, context: dg.InputContext) -> object:
        kind = annotation_kind(context.dagster_type.typing_type)
        with lake_errors(), self.lake.catalog() as catalog:
            table = table_for_key(asset_of(context), self.key_map())
            plan = plan_read(context, table, BranchPins(catalog, table))
            snapshot = open_pinned(catalog, plan, context.asset_key)
            reader = snapshot.to_reader(**scan_options(plan, snapshot.schema))
            value = as_kind(reader, kind)
        context.log.info("%s: read version %s", table, snapshot.version)
        return value


def asset_of(context: dg.OutputContext | dg.InputContext) -> dg.AssetKey:
    """The asset ``context``'s output (or input) is; an op's output that is none (a DynamicOut's
    mapped output, a plain op's) is refused: it names no table, and a fan-out's pieces are no
    governed commits of their own."""
    if context.has_asset_key:
        return context.asset_key
    mapping = getattr(context, "mapping_key", None)
    what = f"dynamic output {mapping}" if mapping else "output"
    where = context.step_key if isinstance(context, dg.OutputContext) else "an upstream op"
    raise InvalidInput(
        f"{where}: the Lake IO manager writes and reads assets' tables, and this {what} is no "
        "asset: give the op's intermediate outputs another IO manager (the default fs_io_manager), "
        "and write what they are collected into as an asset through the Lake IO manager"
    )


def commit_run_id(context: dg.OutputContext) -> str:
    """The run a step's commit id derives from: the earliest run of ``context``'s re-execution
    chain back to which the step never succeeded (the run itself when it is no re-execution).
    A step that died after its commit landed (kill -9, a lost pod) and is re-executed from
    failure finds that commit; a step that succeeded, its write recorded, and is re-executed
    again ("Re-execute all", the step selected) writes anew, as a new run would."""
    try:
        run = context.step_context.dagster_run
        instance = context.step_context.instance
    except Exception:  # noqa: BLE001 - a context built outside a run has none
        return context.run_id
    base = run
    while base.parent_run_id:
        parent = instance.get_run_by_id(base.parent_run_id)
        if parent is None or context.step_key in succeeded_steps(instance, parent.run_id):
            break
        base = parent
    return base.run_id


def succeeded_steps(instance: dg.DagsterInstance, run_id: str) -> set[str]:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS).records
    return {rec.event_log_entry.step_key for rec in records if rec.event_log_entry.step_key}


def table_types(catalog: Catalog, table: str) -> pa.Schema:
    """The registered schema of ``table`` (empty while the table does not exist yet)."""
    from lake_platform.catalog.arrow_io import schema_from_ipc
    from lake_platform.naming import TableName

    try:
        ipc = catalog.reads.head(TableName.parse(table)).schema_ipc
    except TableNotFound:
        return pa.schema([])
    return schema_from_ipc(ipc) if ipc else pa.schema([])


def open_pinned(catalog: Catalog, plan: ReadPlan, key: dg.AssetKey) -> TableSnapshot:
    """The table at the plan's version: on its branch while it is there; once published (the
    branch consumed meanwhile), main holds that version under the same number, made by the same
    commit. A branch deleted unpublished meanwhile is refused (never main's other commit)."""
    if plan.branch is None:
        return catalog.reads.open_table(plan.table, plan.version)
    try:
        return catalog.branches.open_branch(plan.table, plan.branch, plan.version)
    except TableBranchNotFound:
        assert plan.version is not None
        pin = Pin(plan.version, plan.branch, plan.commit_id)
        if not BranchPins(catalog, plan.table).on_main(pin):
            raise never_published(key, pin) from None
    return catalog.reads.open_table(plan.table, plan.version)


def write(
    catalog: Catalog,
    table: str,
    data: pa.RecordBatchReader,
    plan: WritePlan,
    by: Provenance,
    again: Callable[[], pa.RecordBatchReader] | None = None,
) -> Written:
    """One commit of ``data`` to ``table`` by ``plan`` (the table created by it when missing),
    or the answer of the commit ``by.commit_id`` already made.

    A create overtaken by another writer's (a backfill's runs of a new table started together)
    fails only once it has streamed ``data``: the rows are then written to the table made by
    the other from ``again()`` (the output read anew); without ``again`` (a stream, read once)
    the write fails with the retryable ConcurrentModification, nothing of it committed."""
    assert by.commit_id is not None
    # Any operation: a retried step may have created the table or written to it.
    landed = catalog.ctx.replayed(by.commit_id, table=table, operation=None)
    if landed is not None:
        return Written(landed.operation, landed.to_version or 0, replayed=True)
    try:
        return _write_existing(catalog, table, data, plan, by)
    except TableNotFound:
        pass
    read = Touched(data)
    try:
        result = catalog.tables.create_table(table, read.reader, by=by)
    except TableAlreadyExists:  # another step created it meanwhile: write to it after all
        if read.touched:  # the rows went to the create that lost
            if again is None:
                raise ConcurrentModification(
                    f"table {table} was created by another writer while this output streamed into its "
                    "create: nothing of it was written; a retry of the step writes it"
                ) from None
            data = again()
        return _write_existing(catalog, table, data, plan, by)
    return Written("create", result.to_version or 0, result.replayed)


class Touched:
    """``reader`` passed through, noting whether a batch of it was read."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self.touched = False

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in reader:
                self.touched = True
                yield batch

        self.reader = pa.RecordBatchReader.from_batches(reader.schema, batches())


def _write_existing(
    catalog: Catalog, table: str, data: pa.RecordBatchReader, plan: WritePlan, by: Provenance
) -> Written:
    if plan.operation == "replace":
        assert plan.predicate is not None
        version = catalog.rows.replace_where(table, plan.predicate, data, by=by).version
    elif plan.operation == "merge":
        version = catalog.rows.merge_insert(
            table, data, list(plan.key_columns), update_matched=True, insert_unmatched=True, by=by
        ).version
    else:
        write_rows = catalog.tables.overwrite if plan.operation == "overwrite" else catalog.tables.append
        version = write_rows(table, data, by=by).to_version or 0
    return Written(plan.operation, version, replayed=False)

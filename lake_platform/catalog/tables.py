"""Tables: the write path (create, append, overwrite, delete, declare). The read path is
``reads``; binding a namespace, resolving a failed engine call and results are
``engine_commits``'.

Each write takes the table's lease, binds a namespace to the table incarnation and the pending
commit, and lets Lance commit *through* the registry (see ``namespace``): the commit-log entry
lands in the same registry transaction as the version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lake_platform.catalog.column_names import check_schema
from lake_platform.catalog.commit_ids import landed_meanwhile
from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line, input_error
from lake_platform.catalog.declare import declare_table, table_location
from lake_platform.catalog.empty_appends import appended_nothing
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.lease import Lease, LeaseRaced
from lake_platform.catalog.no_ops import nothing_committed
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.schemas import Schemas
from lake_platform.catalog.transaction_unacquired import SMALL_APPEND_BATCHES, free_lease
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import ConcurrentModification, InvalidInput, LakeError, TableAlreadyExists
from lake_platform.lru import BoundedLRU
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    CommitMarker,
    TableRecord,
    VersionRecord,
    decode,
    new_id,
)
from lake_platform.registry.store import ABSENT, Check, Item, Put

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.arrow_io import StreamCounter
    from lake_platform.catalog.evolution import SchemaChange

log = logging.getLogger(__name__)

#: Tables whose last landed version a catalog remembers (a name and two values each).
_WRITTEN_TABLES = 4096


class Tables:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits, schemas: Schemas) -> None:
        self.ctx = ctx
        self.commits = commits
        self.manifests = commits.manifests
        self.reads = commits.reads
        self.schemas = schemas
        #: (incarnation, version) of the last version this process landed, by table name.
        self._written: BoundedLRU[str, tuple[str, int]] = BoundedLRU(_WRITTEN_TABLES)

    # Writes count rows and read Lance's transactions through snapshots, and ``Versions`` opens
    # its snapshots through this service: both go to the read path.
    def create_table(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        from lake_platform.catalog.arrow_io import StreamCounter, as_reader, schema_to_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        data = as_reader(data)
        commit_id = check_commit_id(by.commit_id)
        # What the checks below read, in one registry request instead of four in a row.
        parent_item, marker_item, table_item, warehouse_item = self.ctx.store.get_many(
            [
                self.ctx.parent_key(tname),
                keys.commit_marker(commit_id),
                keys.table(tname),
                keys.warehouse(tname.warehouse_name),
            ]
        )
        ns_item = self.ctx.require_parent(tname, parent_item, who=who)
        who.require(tname.project, "write", f"create tables in {tname.namespace_name}")
        replay = self.ctx.replayed(commit_id, table=str(tname), operation="create", marker=marker_item)
        if replay is not None:
            return replay
        if table_item is not None:
            raise TableAlreadyExists(f"table {tname} already exists")
        check_schema(data.schema, str(tname))
        warehouse = self.ctx.warehouse(tname.warehouse_name, warehouse_item)
        incarnation = new_id()
        self.ctx.gate.unheld(incarnation)  # new: its lease is taken without a read first
        location = table_location(warehouse.root, tname, incarnation)
        record = TableRecord(
            name=str(tname),
            incarnation=incarnation,
            location=location,
            current_version=0,
            schema_ipc_b64=TableRecord.encode_schema(schema_to_ipc(data.schema)),
            created_by=self.ctx.actor(by.actor, who),
        )
        counter = StreamCounter()
        pending = PendingCommit(
            commit_id=commit_id,
            operation="create",
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            schema_ipc=schema_to_ipc(data.schema),
            stream_totals=counter.totals,
            extra_ops=[Check(ns_item.key, ns_item.revision)],
            detail=dict(detail or {}),
            release_lease=True,  # its one registry commit releases the new table's lease too
        )
        try:
            self._write(tname, record, ABSENT, pending, counter.wrap(data), "create", counter=counter)
        except LakeError:
            # The location is unique to this attempt and unregistered: nobody else can see it.
            if self.ctx.store.get(keys.commit_marker(commit_id)) is None:
                try:
                    engine.remove_table(location, self.ctx.storage(location))
                except OSError:  # the create's own error is the answer; the orphan scan takes the rest
                    log.warning(
                        "could not remove the files of %s's failed create at %s",
                        tname,
                        location,
                        exc_info=True,
                    )
            raise
        return self._landed(tname, record, pending)

    def append(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        detail: dict[str, object] | None = None,
        markers: Sequence[CommitMarker] = (),
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Append a stream. ``commit_id`` makes it idempotent; ``detail`` goes into the log entry
        (e.g. the identities of ingested files); ``markers`` land in the same registry transaction
        as the version (an ingest's per-file markers: never one without the other). No rows
        (and no schema change) commit nothing and answer the current version (``empty_appends``).

        Columns are matched by name and converted only losslessly; new columns or wider types
        are taken when the table's ``schema_evolution`` policy allows (``evolution``), in the
        same registry transaction as the rows; anything else is TableSchemaValidationError
        before a byte is written."""
        return self._write_existing(name, data, "append", by, detail, markers)

    def overwrite(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        return self._write_existing(name, data, "overwrite", by, detail, ())

    def _write_existing(
        self,
        name: str,
        data: pa.RecordBatchReader,
        mode: str,
        by: Provenance,
        detail: dict[str, object] | None,
        markers: Sequence[CommitMarker],
    ) -> CommitResult:
        from lake_platform.catalog.arrow_io import (
            StreamCounter,
            as_reader,
            holds_rows,
            read_small,
            schema_from_ipc,
            schema_to_ipc,
        )

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        data = as_reader(data)
        given = by.commit_id is not None
        commit_id = check_commit_id(by.commit_id)
        # The parent and the table in one registry request, checked in the usual order; with
        # them, when this process wrote the table last, its lease and current version records
        # and the key above (what an append under an unacquired lease needs, below).
        last = self._written.get(str(tname)) if mode == "append" else None
        wanted = [self.ctx.parent_key(tname), keys.table(tname)]
        if last is not None:
            wanted += [keys.lease(last[0]), keys.version(*last), keys.version(last[0], last[1] + 1)]
        parent_item, table_item, *ahead_items = self.ctx.store.get_many(wanted)
        self.ctx.require_parent(tname, parent_item, who=who)
        who.require(tname.project, "write", f"write to {tname}")
        # Only a caller's own commit id can have landed before; a fresh one cannot (one get less).
        replay = self.ctx.replayed(commit_id, table=str(tname), operation=mode) if given else None
        if replay is not None:
            return replay
        record, table_revision = self.ctx.table(tname, item=table_item)
        change: SchemaChange | None = None
        target: pa.Schema | None = None
        if mode == "append":
            change = self.schemas.plan_schema(tname, schema_from_ipc(record.schema_ipc), [data.schema])
            target = change.target
            schema_ipc = schema_to_ipc(change.target) if change else None
            if change or change.filled:
                detail = {**(detail or {}), **change.describe()}
        else:
            check_schema(data.schema, str(tname))
            schema_ipc = schema_to_ipc(data.schema)
        if mode == "append" and not change:  # no rows and no schema change: nothing to commit
            holds, data = holds_rows(data)
            if not holds:
                head = self.reads.head(tname)
                return appended_nothing(
                    self.ctx,
                    tname,
                    head.incarnation,
                    head.current_version,
                    commit_id,
                    markers,
                    detail=detail,
                    given=given,
                )

        def pending_commit() -> tuple[StreamCounter, PendingCommit]:
            counter = StreamCounter()
            return counter, PendingCommit(
                commit_id=commit_id,
                operation=mode,
                actor=self.ctx.actor(by.actor, who),
                run_id=by.run_id,
                schema_ipc=schema_ipc,
                stream_totals=counter.totals,
                detail=dict(detail or {}),
                extra_ops=[Put(keys.commit_marker(m.commit_id), m.encode(), ABSENT) for m in markers],
                hold=change.steps if change else [],
                # One registry commit (held schema steps land with it): it releases the lease too.
                release_lease=True,
            )

        if last is not None and not change and last[0] == record.incarnation:
            rows, data = read_small(data, self.ctx.settings.small_append_bytes, SMALL_APPEND_BATCHES)
            if rows is not None:
                done = self._append_unacquired(
                    tname, record, table_revision, ahead_items, data.schema, target, rows, pending_commit
                )
                if done is not None:
                    return done
                # Not tried, or refused: ``data`` (unread) carries the same rows to the lease.
        counter, pending = pending_commit()
        stream = counter.wrap(data, target)
        self.schemas.check_fits(record, pending.schema_ipc)  # before the lease is taken
        planned_on = record.schema_ipc_b64
        with self.ctx.gate.hold(record.incarnation) as lease:
            # Re-read under the lease with the record the settle needs, in one registry request;
            # a multi-table commit's version above the head is completed first, and the write
            # goes on from the head it finds, as from any commit that landed meanwhile.
            record, revision, ahead = self.manifests.leased_head(tname, record)
            if mode == "append" and record.schema_ipc_b64 != planned_on:
                raise ConcurrentModification(
                    f"the schema of {tname} changed while this append was being prepared; "
                    "nothing was written, retry"
                )
            self.manifests.settle(tname, record, pending, current_item=ahead)
            if mode == "overwrite":
                pending.rows_removed = self.reads.snapshot(tname, record, record.current_version).count_rows()
            self._write(tname, record, revision, pending, stream, mode, lease, counter=counter, change=change)
        return self._landed(tname, record, pending)

    def _append_unacquired(
        self,
        tname: TableName,
        record: TableRecord,
        revision: int,
        ahead_items: list[Item | None],
        schema: pa.Schema,
        target: pa.Schema | None,
        rows: list[pa.RecordBatch],
        pending_commit: Callable[[], tuple[StreamCounter, PendingCommit]],
    ) -> CommitResult | None:
        """A small append (``rows``, in memory) on a table this process wrote last, under an
        unacquired lease: no acquire, no re-read under it, no settle (architecture.md, "Small
        appends without acquiring the lease"). None when it cannot be tried (the lease is held,
        or moved on since the read; a version above the head, a multi-table commit's, is
        completed under the lease) or was refused for want of an acquired lease (LeaseRaced:
        nothing landed); the caller then writes ``rows`` again the ordinary way."""
        import pyarrow as pa

        lease_item, version_item, above_item = ahead_items
        held = free_lease(lease_item, version_item, above_item)
        if held is None:
            return None
        assert lease_item is not None and version_item is not None
        base = decode(VersionRecord, version_item.value, version_item.key)
        if base.version != record.current_version:
            return None  # the table moved on since this process wrote it
        with self.ctx.gate.hold_unacquired(record.incarnation, held.token, lease_item.revision) as lease:
            if lease is None:
                return None
            counter, pending = pending_commit()
            pending.base = base
            stream = counter.wrap(pa.RecordBatchReader.from_batches(schema, rows), target)
            try:
                self._write(tname, record, revision, pending, stream, "append", lease, counter=counter)
            except LeaseRaced as exc:
                log.info("%s: %s; writing the append again under the lease", tname, exc.message)
                return None
        return self._landed(tname, record, pending)

    def _landed(self, tname: TableName, record: TableRecord, pending: PendingCommit) -> CommitResult:
        """The result of a write that landed; remembered, so this process's next append can
        read the lease and version records along with the table's."""
        result = self.commits.result(pending, str(tname))
        if not result.replayed:  # another caller's commit under this id: its version is not ours
            self._written.put(str(tname), (record.incarnation, result.to_version))
        return result

    def _write(
        self,
        tname: TableName,
        record: TableRecord,
        revision: int,
        pending: PendingCommit,
        stream: pa.RecordBatchReader,
        mode: str,
        lease: Lease | None = None,
        *,
        counter: StreamCounter,
        change: SchemaChange | None = None,
    ) -> None:
        self.schemas.check_fits(record, pending.schema_ipc)
        if lease is None:
            with self.ctx.gate.hold(record.incarnation) as held:
                return self._write(tname, record, revision, pending, stream, mode, held, counter=counter)
        ns = self.commits.bind(tname, record, revision, pending, lease)
        lease.check()
        try:
            self.ctx.at(f"{mode}:before-write")  # inside: an injected failure is an engine failure
            if change:
                # The schema steps are Lance commits the namespace holds back: they are
                # registered in one transaction with the append, or not at all.
                ds = engine.open_version(
                    namespace=ns,
                    table_id=tname.parts,
                    version=record.current_version,
                    storage_options=self.ctx.storage(record.location),
                )
                engine.evolve_schema(ds, widened=change.widened, added=change.added)
                self.ctx.at(f"{mode}:after-evolve")
            engine.write(
                stream,
                namespace=ns,
                table_id=tname.parts,
                mode=mode,
                storage_options=self.ctx.storage(record.location),
            )
        except Exception as exc:  # noqa: BLE001 - every failure is resolved below, never guessed
            if counter.error is not None and not pending.landed:
                raise input_error(counter.error) from None
            self.commits.resolve_failure(pending, ns, exc)
        self.ctx.at(f"{mode}:after-write")
        self.manifests.finalize(record, pending)
        self.commits.enrich(tname, record, pending)

    def delete_rows(
        self,
        name: str,
        predicate: str,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        if not isinstance(predicate, str) or not predicate.strip():
            raise InvalidInput("a delete needs a non-empty predicate")
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"delete from {tname}")
        commit_id = check_commit_id(by.commit_id)
        replay = self.ctx.replayed(commit_id, table=str(tname), operation="delete")
        if replay is not None:
            return replay
        record, _ = self.ctx.table(tname)
        pending = PendingCommit(
            commit_id=commit_id,
            operation="delete",
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            detail={**(detail or {}), "predicate": predicate},
        )
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision, _ = self.manifests.leased_head(tname, record)  # as the write path's
            if by.commit_id is not None and (replay := landed_meanwhile(self.ctx, pending, str(tname))):
                return replay  # landed while this waited: the same delete sent twice at once
            ns, ds = self.commits.open_bound(tname, record, revision, pending, lease)
            before, selected = int(ds.count_rows()), -1
            try:
                self.ctx.at("delete:before-write")  # inside: an injected failure is an engine failure
                selected = engine.delete_rows(ds, predicate)
            except Exception as exc:  # noqa: BLE001
                if not pending.landed and ns.failure is None and isinstance(exc, (ValueError, OSError)):
                    if "conflict" not in str(exc).lower():
                        raise InvalidInput(f"cannot delete from {tname}: {first_line(exc)}") from None
                self.commits.resolve_failure(pending, ns, exc)
            self.manifests.finalize(record, pending)
            if pending.landed and not pending.replayed:
                after = self.reads.snapshot(tname, ns.record, pending.landed[-1][0]).count_rows()
                self.ctx.patch_log(pending.landed[0][1], {"rows_removed": before - after})
            if not selected:  # no row to delete: no version, as for an empty append (``no_ops``)
                given, version = by.commit_id is not None, record.current_version
                table = str(tname)
                return nothing_committed(self.ctx, pending, table, record.incarnation, version, given=given)
        return self.commits.result(pending, str(tname))

    def declare_table(self, name: str, *, by: Provenance = UNSTATED) -> TableRecord:
        """Reserve a name and a unique location with no version yet (``declare``)."""
        return declare_table(self.ctx, name, by=by)

"""Changes to existing rows: update (set columns by SQL expressions where a predicate holds),
merge-insert (upsert a batch on key columns) and replace-where (delete the rows a predicate
selects and append a batch). Each is one Lance commit on the table's registered version, opened
through the namespace bound to the pending commit, so it lands as one registry transaction under
the table's lease with its commit-log entry (``update``, ``merge``, ``replace``), exactly as
``Tables.delete_rows`` does for deletes: all of it or nothing. Lance commits a version even when
no row matched; should it make none, the answer names the current version and no commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.commit_ids import landed_meanwhile
from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line, input_error
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.schemas import Schemas
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import ConcurrentModification, InvalidInput
from lake_platform.naming import TableName
from lake_platform.registry.records import CommitLogEntry, decode

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.namespace import BoundTableNamespace
    from lake_platform.catalog.results import CommitResult
    from lake_platform.registry.records import TableRecord

#: What a row change does on the opened dataset: (dataset, its bound namespace, the table's
#: record under the lease, the pending commit) -> the counts it reports.
Change = Callable[[Any, "BoundTableNamespace", "TableRecord", PendingCommit], dict[str, int]]


@dataclass(frozen=True)
class RowChange:
    table: str
    version: int  # the version it made, or the current one when it changed nothing
    commit_id: str | None  # None: nothing was committed
    counts: dict[str, int]

    @classmethod
    def logged(cls, entry: CommitLogEntry) -> RowChange:
        """The change a landed commit made, as its log entry tells it (a replay's answer)."""
        counts = {k: v for k, v in entry.detail.items() if k in COUNTS and isinstance(v, int)}
        return cls(entry.target, entry.to_version or 0, entry.commit_id, counts)


#: What a row change's log entry counts (its detail, patched on once the commit landed).
COUNTS = frozenset(
    {
        "updated_rows",
        "num_inserted_rows",
        "num_updated_rows",
        "num_deleted_rows",
        "deleted_rows",
        "added_rows",
    }
)


def replayed_change(ctx: CatalogContext, replay: CommitResult) -> RowChange:
    """A replayed commit's answer, counts from its log entry (empty when it has none)."""
    marker = ctx.commit_landed(replay.commit_id)
    item = ctx.store.get(marker.log_key) if marker is not None and marker.log_key else None
    if item is None:
        return RowChange(replay.table, replay.to_version or 0, replay.commit_id, {})
    return RowChange.logged(decode(CommitLogEntry, item.value, item.key))


def replayed_into(ctx: CatalogContext, pending: PendingCommit, replay: CommitResult) -> dict[str, int]:
    """``pending`` answered by ``replay`` (its id landed: nothing of it is written); the counts
    the first commit logged."""
    pending.landed.append((replay.to_version or 0, ""))
    pending.from_version, pending.replayed = replay.from_version, True
    return replayed_change(ctx, replay).counts


class RowChanges:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits, schemas: Schemas) -> None:
        self.ctx = ctx
        self.commits = commits
        self.schemas = schemas

    def update_rows(
        self,
        name: str,
        updates: dict[str, str],
        predicate: str | None = None,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> RowChange:
        """Set each column of ``updates`` to its SQL expression on the rows ``predicate``
        selects (every row without one). ``detail`` goes into the log entry (an idempotent
        request's digest)."""
        if not isinstance(updates, dict) or not updates:
            raise InvalidInput("an update sets at least one column")
        for column, expression in updates.items():
            if not isinstance(column, str) or not column or not isinstance(expression, str) or not expression:
                raise InvalidInput("updates map column names to SQL expressions")
        if predicate is not None:
            check_predicate(predicate)

        schema = self.commits.reads.open_table(name, by=by).schema  # refused before the lease
        unknown = [c for c in updates if c not in schema.names]
        if unknown:
            raise InvalidInput(f"{name} has no column {unknown[0]!r} to update")

        def change(ds: Any, *_: object) -> dict[str, int]:
            return {"updated_rows": changes.update_rows(ds, updates, predicate)}

        logged = {**(detail or {}), "columns": sorted(updates), "set": updates, "predicate": predicate}
        return self._change(name, "update", logged, lambda *_: change, by)

    def merge_insert(
        self,
        name: str,
        data: pa.RecordBatchReader,
        on: Sequence[str],
        *,
        update_matched: bool = False,
        update_matched_if: str | None = None,
        insert_unmatched: bool = False,
        delete_unmatched_by_source: bool = False,
        delete_unmatched_by_source_if: str | None = None,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> RowChange:
        """Merge ``data`` on the key columns ``on``: matched rows updated (where
        ``update_matched_if`` holds), unmatched ones inserted, target rows the data does not
        match deleted (where ``delete_unmatched_by_source_if`` holds), as asked. ``detail``
        goes into the log entry (an idempotent request's digest)."""
        check_merge_insert(on, data, update_matched or insert_unmatched or delete_unmatched_by_source)

        def change(ds: Any, *_: object) -> dict[str, int]:
            return changes.merge_insert(
                ds,
                data,
                on,
                update_matched=update_matched,
                update_matched_if=update_matched_if,
                insert_unmatched=insert_unmatched,
                delete_unmatched_by_source=delete_unmatched_by_source,
                delete_unmatched_by_source_if=delete_unmatched_by_source_if,
            )

        logged = {**(detail or {}), "on": list(on), "update": update_matched, "insert": insert_unmatched}
        return self._change(name, "merge", logged, lambda *_: change, by)

    def replace_where(
        self,
        name: str,
        predicate: str,
        data: pa.RecordBatchReader,
        *,
        by: Provenance = UNSTATED,
    ) -> RowChange:
        """Delete the rows ``predicate`` selects and append ``data``: ONE Lance version and one
        registry commit (logged ``replace``, with the rows deleted and added), so a reader sees
        the rows before or after, never between, and every row of ``data`` lands (identical
        ones too). Rows outside the predicate are untouched. ``data``'s columns go in as an
        append's do: by name, lossless casts only, new or wider columns when the table's
        ``schema_evolution`` policy allows (registered with the rows, in the same
        transaction)."""
        from lake_platform.catalog.arrow_io import StreamCounter, as_reader, schema_from_ipc, schema_to_ipc

        check_predicate(predicate)
        data = as_reader(data)
        tname = TableName.parse(name)

        def prepare(record: TableRecord, pending: PendingCommit) -> Change:
            planned = self.schemas.plan_schema(tname, schema_from_ipc(record.schema_ipc), [data.schema])
            if planned:
                pending.schema_ipc = schema_to_ipc(planned.target)
                pending.hold = planned.steps
            if planned or planned.filled:
                pending.detail.update(planned.describe())
            counter = StreamCounter()
            stream = counter.wrap(data, planned.target)
            pending.stream_totals = counter.totals
            pending.release_lease = True  # its one registry commit releases the lease too
            planned_on = record.schema_ipc_b64

            def replace(
                ds: Any, ns: BoundTableNamespace, held: TableRecord, pending: PendingCommit
            ) -> dict[str, int]:
                if held.schema_ipc_b64 != planned_on:
                    raise ConcurrentModification(
                        f"the schema of {tname} changed while this replace was being prepared; "
                        "nothing was written, retry"
                    )
                storage = self.ctx.storage(held.location)
                try:
                    if planned:
                        engine.evolve_schema(ds, widened=planned.widened, added=planned.added)
                    staged = changes.stage_replace(ds, predicate, stream, storage)
                except Exception:
                    if counter.error is not None:
                        raise input_error(counter.error) from None
                    raise
                counts = {"deleted_rows": staged.deleted_rows, "added_rows": counter.rows}
                pending.rows_removed = staged.deleted_rows
                pending.detail.update(counts)  # the stream is drained: the entry lands with them
                changes.commit_staged(ds, staged, namespace=ns, table_id=tname.parts, storage_options=storage)
                return counts

            return replace

        return self._change(name, "replace", {"predicate": predicate}, prepare, by)

    def _change(
        self,
        name: str,
        operation: str,
        detail: dict[str, object],
        prepare: Callable[[TableRecord, PendingCommit], Change],
        by: Provenance,
    ) -> RowChange:
        """``prepare`` (given the table's record and the pending commit, before the lease: it may
        refuse) returns the change to run on the registered version under the lease."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"{operation} rows of {tname}")
        commit_id = check_commit_id(by.commit_id)
        replay = self.ctx.replayed(commit_id, table=str(tname), operation=operation)
        if replay is not None:
            return replayed_change(self.ctx, replay)
        record, _ = self.ctx.table(tname)
        pending = PendingCommit(
            commit_id=commit_id,
            operation=operation,
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            detail=dict(detail),
        )
        change = prepare(record, pending)
        counts: dict[str, int] = {}
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision, _ = self.commits.manifests.leased_head(tname, record)
            if by.commit_id is not None:  # it may have landed while this waited (sent twice at once)
                replay = landed_meanwhile(self.ctx, pending, str(tname))
                if replay is not None:
                    return replayed_change(self.ctx, replay)
            ns, ds = self.commits.open_bound(tname, record, revision, pending, lease)
            try:
                self.ctx.at(f"{operation}:before-write")  # inside: an injected failure is an engine failure
                counts = change(ds, ns, record, pending)
            except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
                refused = (
                    isinstance(exc, (ValueError, OSError, TypeError)) and "conflict" not in str(exc).lower()
                )
                if not pending.landed and ns.failure is None and refused:
                    raise InvalidInput(f"cannot {operation} {tname}: {first_line(exc)}") from None
                self.commits.resolve_failure(pending, ns, exc)
            # Known only once it landed; logged under the lease, before finalizing, so a request
            # resent while this one finishes answers them (none only while Lance's commit call,
            # landed, has not returned).
            if pending.landed and any(pending.detail.get(k) != v for k, v in counts.items()):
                self.ctx.patch_log(pending.landed[0][1], {"detail": {**pending.detail, **counts}})
            self.commits.manifests.finalize(record, pending)
        if not pending.landed:
            return RowChange(str(tname), record.current_version, None, counts)
        result = self.commits.result(pending, str(tname))
        if result.replayed:  # the same change, sent at once by another caller, landed
            return replayed_change(self.ctx, result)
        return RowChange(str(tname), result.to_version or 0, result.commit_id, counts)


def check_predicate(predicate: object) -> None:
    """A predicate is a non-empty SQL filter (Lance parses it under the lease; a bad one is
    refused there, before anything is written)."""
    if not isinstance(predicate, str) or not predicate.strip():
        raise InvalidInput("the predicate must be a SQL filter")


def check_merge_insert(on: Sequence[str], data: pa.RecordBatchReader, acts: bool) -> None:
    """A merge-insert's request, refused before anything is read: key columns named and in
    ``data``, and something to do (``acts``: it updates, inserts or deletes)."""
    if not on or not all(isinstance(c, str) and c for c in on):
        raise InvalidInput("merge_insert needs the key columns (on)")
    if not acts:
        raise InvalidInput("merge_insert must update, insert or delete something")
    missing = [c for c in on if c not in data.schema.names]
    if missing:
        raise InvalidInput(f"the data has no key column {missing[0]!r}")

"""Changes to a branch beyond appends and overwrites: updates, merge-inserts and deletes of its
rows, schema changes (computed columns added, columns renamed or dropped) and changes to its
schema metadata and its columns' field metadata. A Lance client's staged manifest committed as
the branch's next version is ``branch_versions``.

Each is main's same change on the branch's own line: under the branch's lease (its chain id),
the branch record read again (``Branches.held``) and a namespace bound to it
(``Branches.writer_namespace``), so the Lance commit is ONE registry transaction that
compare-and-swaps the branch's head, with its commit-log entry (``detail.branch``) and commit
marker; main never moves. The same rules as main's apply: every argument checked before the
lease (bad input changes nothing, with main's checks: ``schemas.check_schema_metadata`` and the
rest), renames and drops take admin and a drop is refused on a protected table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.alter import check_expressions, dropping, renaming
from lake_platform.catalog.branches import Branches
from lake_platform.catalog.commit_ids import landed_meanwhile
from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.no_ops import nothing_committed
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Action
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.row_changes import RowChange, check_merge_insert, replayed_into
from lake_platform.catalog.schemas import (
    FieldMetadataUpdates,
    check_field_metadata,
    check_schema_metadata,
    schema_metadata_detail,
    with_field_metadata,
    with_schema_metadata,
)
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    InvalidInput,
    Protected,
    TableSchemaValidationError,
)
from lake_platform.naming import TableName
from lake_platform.registry.records import BranchRecord

if TYPE_CHECKING:
    import pyarrow as pa

#: What a change does to the branch's schema (None: the schema stays).
SchemaChange = Callable[["pa.Schema"], "pa.Schema"] | None


class BranchChanges:
    def __init__(self, ctx: CatalogContext, branches: Branches, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.branches = branches
        self.commits = commits

    # -- rows ------------------------------------------------------------------------------------

    def update_rows(
        self,
        name: str,
        branch: str,
        updates: dict[str, str],
        predicate: str | None = None,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> RowChange:
        """Set each column of ``updates`` to its SQL expression on the branch's rows
        ``predicate`` selects (every row without one); logged ``update``, with ``detail``."""
        if not isinstance(updates, dict) or not updates:
            raise InvalidInput("an update sets at least one column")
        for column, expression in updates.items():
            if not isinstance(column, str) or not column or not isinstance(expression, str) or not expression:
                raise InvalidInput("updates map column names to SQL expressions")
        if predicate is not None and (not isinstance(predicate, str) or not predicate.strip()):
            raise InvalidInput("the predicate must be a SQL filter")

        def check(schema: pa.Schema) -> pa.Schema:
            unknown = [c for c in updates if c not in schema.names]
            if unknown:
                raise InvalidInput(f"branch {branch} of {name} has no column {unknown[0]!r} to update")
            return schema

        return self._rows(
            name,
            branch,
            "update",
            {**(detail or {}), "columns": sorted(updates), "set": updates, "predicate": predicate},
            lambda ds: {"updated_rows": changes.update_rows(ds, updates, predicate)},
            check,
            by,
        )

    def merge_insert(
        self,
        name: str,
        branch: str,
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
        """Merge ``data`` into the branch on the key columns ``on`` (as ``rows.merge_insert``
        does into main); logged ``merge``, with ``detail``."""
        check_merge_insert(on, data, update_matched or insert_unmatched or delete_unmatched_by_source)

        def check(schema: pa.Schema) -> pa.Schema:
            absent = [c for c in [*on, *data.schema.names] if c not in schema.names]
            if absent:
                raise InvalidInput(f"branch {branch} of {name} has no column {absent[0]!r}")
            return schema

        def merge(ds: Any) -> dict[str, int]:
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
        return self._rows(name, branch, "merge", logged, merge, check, by)

    def delete_rows(
        self,
        name: str,
        branch: str,
        predicate: str,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Delete the branch's rows ``predicate`` selects; logged ``delete`` with the rows
        removed. ``detail`` goes into the log entry (an idempotent request's digest)."""
        if not isinstance(predicate, str) or not predicate.strip():
            raise InvalidInput("a delete needs a non-empty predicate")

        def delete(ds: Any) -> dict[str, int]:
            return {"rows_removed": engine.delete_rows(ds, predicate)}  # under the lease: all selected go

        logged = {**(detail or {}), "predicate": predicate}
        pending, fresh, _ = self._commit(
            name, branch, "delete", logged, delete, None, by, counts_in_detail=False
        )
        if not pending.landed:  # no row to delete: no version, as for an empty append (``no_ops``)
            given, version = by.commit_id is not None, fresh.current_version
            return nothing_committed(self.ctx, pending, fresh.name, fresh.incarnation, version, given=given)
        return self.commits.result(pending, fresh.name)

    def _rows(
        self,
        name: str,
        branch: str,
        operation: str,
        detail: dict[str, object],
        apply: Callable[[Any], dict[str, int]],
        check: SchemaChange,
        by: Provenance,
    ) -> RowChange:
        pending, fresh, counts = self._commit(name, branch, operation, detail, apply, check, by)
        if not pending.landed:  # Lance made no version (nothing matched)
            return RowChange(fresh.name, fresh.current_version, None, counts)
        result = self.commits.result(pending, fresh.name)
        return RowChange(fresh.name, result.to_version or 0, result.commit_id, counts)

    # -- columns ---------------------------------------------------------------------------------

    def add_computed_columns(
        self,
        name: str,
        branch: str,
        expressions: dict[str, str],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Add columns whose values are SQL expressions over each of the branch's rows (writer
        role); logged ``add-columns``, with ``detail`` (an idempotent request's digest, as for
        each change here)."""
        check_expressions(expressions)
        fields: list[pa.Field] = []

        def add(ds: Any) -> dict[str, int]:
            changes.add_computed_columns(ds, expressions)
            return {}

        def plan(schema: pa.Schema) -> pa.Schema:
            for field in fields:
                if field.name in schema.names:
                    raise TableSchemaValidationError(f"column {field.name} already exists")
                schema = schema.append(field)
            return schema

        # The new columns' types are what the expressions yield over the branch's head.
        snap = self.branches.open_branch(name, branch, by=by)
        taken = [c for c in expressions if c in snap.schema.names]
        if taken:
            raise TableSchemaValidationError(f"column {taken[0]} already exists")
        try:
            fields.extend(changes.expression_schema(snap.dataset, expressions))
        except Exception as exc:  # noqa: BLE001 - Lance's planner refuses a bad expression
            raise InvalidInput(
                f"cannot add columns to branch {branch} of {name}: {first_line(exc)}"
            ) from None
        logged = {
            **(detail or {}),
            "columns": {f.name: str(f.type) for f in fields},
            "expressions": dict(expressions),
        }
        return self._columns(name, branch, "add-columns", logged, add, plan, by, "write")

    def rename_columns(
        self,
        name: str,
        branch: str,
        renames: dict[str, str],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Rename the branch's columns (old -> new) in one commit (admin, as on main)."""
        plan = renaming(renames, "branch")

        def rename(ds: Any) -> dict[str, int]:
            changes.rename_columns(ds, renames)
            return {}

        logged = {**(detail or {}), "renames": dict(renames)}
        return self._columns(name, branch, "rename-column", logged, rename, plan, by, "admin")

    def drop_columns(
        self,
        name: str,
        branch: str,
        columns: list[str],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Drop the branch's ``columns`` in one commit (admin, and refused on a protected table,
        as on main: publishing would hide them from main's readers)."""
        plan = dropping(columns, "branch")

        def drop(ds: Any) -> dict[str, int]:
            engine.drop_columns(ds, columns)
            return {}

        logged = {**(detail or {}), "columns": list(columns)}
        return self._columns(name, branch, "drop-column", logged, drop, plan, by, "admin")

    def _columns(
        self,
        name: str,
        branch: str,
        operation: str,
        detail: dict[str, object],
        apply: Callable[[Any], dict[str, int]],
        plan: SchemaChange,
        by: Provenance,
        role: Action,
        *,
        on_dataset: bool = False,
    ) -> CommitResult:
        pending, fresh, _ = self._commit(
            name,
            branch,
            operation,
            detail,
            apply,
            plan,
            by,
            role=role,
            schema_changes=True,
            on_dataset=on_dataset,
        )
        return self.commits.result(pending, fresh.name)

    # -- metadata --------------------------------------------------------------------------------

    def update_schema_metadata(
        self,
        name: str,
        branch: str,
        values: dict[str, str | None],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> tuple[CommitResult, dict[str, str]]:
        """Merge keys into the branch's schema metadata, a None value deleting its key (writer
        role, as on main), in one commit logged ``schema-metadata`` with ``detail``; returns the
        metadata (none for a replayed ``by.commit_id``: its caller reads the first commit's)."""
        check_schema_metadata(values)
        merged: dict[str, str] = {}

        def update(ds: Any) -> dict[str, int]:
            merged.update(engine.update_schema_metadata(ds, values))
            return {}

        def plan(schema: pa.Schema) -> pa.Schema:
            return with_schema_metadata(schema, values)

        logged = {**(detail or {}), **schema_metadata_detail(values)}
        result = self._columns(
            name, branch, "schema-metadata", logged, update, plan, by, "write", on_dataset=True
        )
        return result, merged

    def update_field_metadata(
        self,
        name: str,
        branch: str,
        updates: FieldMetadataUpdates,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> tuple[CommitResult, dict[str, dict[str, str]]]:
        """Change the branch's top-level columns' field metadata as ``Schemas.update_field_metadata``
        changes main's (writer role), in one commit logged ``field-metadata``; returns each
        column's metadata."""
        check_field_metadata(updates)
        merged: dict[str, dict[str, str]] = {}

        def plan(schema: pa.Schema) -> pa.Schema:
            after, fields = with_field_metadata(schema, updates, f"branch {branch} of {name}")
            merged.clear()  # the plan made under the lease, last, is the one committed
            merged.update(fields)
            return after

        def replace(ds: Any) -> dict[str, int]:
            changes.replace_field_metadata(ds, merged)  # each column's whole metadata, one commit
            return {}

        logged = {**(detail or {}), "columns": sorted(updates)}
        result = self._columns(
            name, branch, "field-metadata", logged, replace, plan, by, "write", on_dataset=True
        )
        return result, merged

    # -- the commit ------------------------------------------------------------------------------

    def _commit(
        self,
        name: str,
        branch: str,
        operation: str,
        detail: dict[str, object],
        apply: Callable[[Any], dict[str, int]],
        plan: SchemaChange,
        by: Provenance,
        *,
        role: Action = "write",
        schema_changes: bool = False,
        on_dataset: bool = False,
        counts_in_detail: bool = True,
    ) -> tuple[PendingCommit, BranchRecord, dict[str, int]]:
        """One Lance change on the branch's head, under its lease: identity, shape, parent,
        permission, then ``plan`` (the schema after the change; raises on bad input) on the
        branch as listed and again under the lease: on its registered schema, or with
        ``on_dataset`` on the schema Lance holds at the head (metadata changes: Lance merges
        into its own metadata, so the registry must too). ``apply``'s counts are logged once it
        landed, in the entry's detail (or, without ``counts_in_detail``, as its fields), under the
        lease: a request resent while this one finishes answers them. A replayed commit id lands
        nothing; its counts are those the first commit logged."""
        from lake_platform.catalog.arrow_io import schema_from_ipc, schema_to_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, role, f"{operation.replace('-', ' ')} on branch {branch} of {tname}")
        commit_id = check_commit_id(by.commit_id)
        rec, _ = self.branches.branch(tname, branch)
        pending = PendingCommit(
            commit_id=commit_id,
            operation=operation,
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            detail={**detail, "branch": branch},
        )
        replay = None
        if by.commit_id is not None:
            replay = self.ctx.replayed(commit_id, table=str(tname), operation=operation, branch=branch)
        if replay is not None:
            return pending, rec, replayed_into(self.ctx, pending, replay)
        if plan is not None:
            plan(schema_from_ipc(rec.schema_ipc))  # refused before the lease
        self._require_unprotected(tname, operation)
        counts: dict[str, int] = {}
        with self.ctx.gate.hold(rec.incarnation) as lease:
            fresh, item = self.branches.held(tname, branch, rec.incarnation, pending, at=rec.current_version)
            if by.commit_id is not None:  # it may have landed while this waited (sent twice at once)
                replay = landed_meanwhile(self.ctx, pending, str(tname))
                if replay is not None:
                    return pending, fresh, replayed_into(self.ctx, pending, replay)
            after = plan(schema_from_ipc(fresh.schema_ipc)) if plan is not None and not on_dataset else None
            self._require_unprotected(tname, operation)
            ns = self.branches.writer_namespace(tname, fresh, item, pending, lease, operation, held=True)
            ds = engine.open_version(
                namespace=ns,
                table_id=tname.parts,
                version=fresh.current_version,
                storage_options=self.ctx.storage(fresh.location),
            )
            if plan is not None and on_dataset:
                after = plan(engine.schema_of(ds))
            if after is not None and schema_changes:
                pending.schema_ipc = schema_to_ipc(after)  # read by the namespace when Lance commits
            lease.check()
            try:
                self.ctx.at(
                    f"branch-{operation}:before-write"
                )  # inside: an injected failure is an engine one
                counts = apply(ds)
            except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
                refused = (
                    isinstance(exc, (ValueError, OSError, TypeError)) and "conflict" not in str(exc).lower()
                )
                if not pending.landed and ns.failure is None and refused:
                    raise InvalidInput(
                        f"cannot {operation} branch {branch} of {tname}: {first_line(exc)}"
                    ) from None
                self.commits.resolve_failure(pending, ns, exc)
            if counts and pending.landed:
                patch = {"detail": {**pending.detail, **counts}} if counts_in_detail else dict(counts)
                self.ctx.patch_log(pending.landed[0][1], patch)
            self.commits.manifests.finalize(fresh, pending)
        return pending, fresh, counts

    def _require_unprotected(self, tname: TableName, operation: str) -> None:
        if operation == "drop-column" and self.ctx.table(tname)[0].protected:
            raise Protected(f"table {tname} is protected; unprotect it to drop a column (on any branch)")

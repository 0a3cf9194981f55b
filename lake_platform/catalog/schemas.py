"""Schemas: a table's registered schema, what appending inputs of other schemas does to it
under its ``schema_evolution`` policy (checked before any byte is written), changes to its
schema metadata and to its columns' field metadata (one commit each), and the backfill of a
registration stored without a schema."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lake_platform.catalog.context import (
    CatalogContext,
    Log,
    check_commit_id,
)
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    TableColumnNotFound,
    TableSchemaValidationError,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord
from lake_platform.registry.store import Put

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.evolution import SchemaChange


@dataclass(frozen=True)
class SchemaRepair:
    """What ``repair_schema`` did: the version the schema was read at, and its columns."""

    table: str
    version: int
    repaired: bool
    columns: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "version": self.version,
            "repaired": self.repaired,
            "columns": list(self.columns),
        }


class Schemas:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.commits = commits

    def check_fits(self, record: TableRecord, schema_ipc: bytes | None) -> None:
        """Refuse (RecordTooLarge) a schema the registry could not store in ``record``, the
        table record a write would commit, before its lease is taken or any file written."""
        if schema_ipc is not None:
            grown = record.model_copy(update={"schema_ipc_b64": TableRecord.encode_schema(schema_ipc)})
            self.ctx.store.check_record(keys.table(TableName.parse(record.name)), grown.encode())

    def table_schema(self, name: str, *, by: Provenance = UNSTATED) -> pa.Schema:
        """The table's registered Arrow schema (from the registry; no engine call)."""
        from lake_platform.catalog.arrow_io import schema_from_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "read", f"read {tname}")
        record, _ = self.ctx.table(tname)
        return schema_from_ipc(record.schema_ipc)

    def plan_input(
        self,
        name: str,
        schemas: Sequence[pa.Schema],
        *,
        labels: Sequence[str] | None = None,
        by: Provenance = UNSTATED,
    ) -> SchemaChange:
        """``plan_schema`` against the table's registered schema: what an ingest of inputs with
        ``schemas`` will do, checked before any file is read (the append checks it again)."""
        from lake_platform.catalog.arrow_io import schema_from_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"write to {tname}")
        record, _ = self.ctx.table(tname)
        return self.plan_schema(tname, schema_from_ipc(record.schema_ipc), schemas, labels)

    def plan_schema(
        self,
        tname: TableName,
        table: pa.Schema,
        schemas: Sequence[pa.Schema],
        labels: Sequence[str] | None = None,
    ) -> SchemaChange:
        """How inputs of ``schemas`` go into the table in one commit: as they are (lossless casts
        only), or, when the table's ``schema_evolution`` policy allows, with added or widened
        columns; TableSchemaValidationError before any write otherwise. The policy is read only
        when the inputs do not fit as they are."""
        from lake_platform.catalog.evolution import SchemaChange, plan_batch
        from lake_platform.catalog.policies import Policies

        if schemas and all(s.equals(table) for s in schemas):
            # The common small append: the input is the table's schema (names, types,
            # nullability), so the plan is "as it is" (what plan_batch returns for it).
            return SchemaChange(table)
        try:
            return plan_batch(table, list(schemas), "strict", str(tname), labels)
        except TableSchemaValidationError:
            mode = Policies(self.ctx).effective_policy(str(tname)).policy.schema_evolution
            if mode == "strict":
                raise
        return plan_batch(table, list(schemas), mode, str(tname), labels)

    def repair_schema(self, name: str, *, by: Provenance = UNSTATED) -> SchemaRepair:
        """Backfill the stored schema of a registration that has none (registered before
        schemas were stored: describe shows no columns, GetTables(include_schema) and appends
        refuse it) from the schema Lance recorded at the registered version. Under the table's
        lease, one logged registry commit; nothing when a schema is stored. Changes no data."""
        from lake_platform.catalog.arrow_io import schema_to_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"repair {tname}")
        record, _ = self.ctx.table(tname)
        if record.schema_ipc:
            return SchemaRepair(str(tname), record.current_version, repaired=False)
        with self.ctx.gate.hold(record.incarnation):
            record, revision = self.ctx.table(tname, incarnation=record.incarnation)
            if record.schema_ipc:  # repaired meanwhile
                return SchemaRepair(str(tname), record.current_version, repaired=False)
            snapshot = self.commits.reads.snapshot(tname, record, record.current_version)
            schema = engine.schema_of(snapshot.dataset)
            updated = record.model_copy(
                update={"schema_ipc_b64": TableRecord.encode_schema(schema_to_ipc(schema))}
            )
            try:
                self.ctx.commit(
                    [Put(keys.table(tname), updated.encode(), revision)],
                    log=Log(
                        str(tname),
                        "repair schema",
                        self.ctx.actor(by.actor, who),
                        incarnation=record.incarnation,
                        detail={"version": record.current_version, "columns": schema.names},
                    ),
                )
            except ConditionFailed:
                raise ConcurrentModification(
                    f"{tname} changed while its schema was read; nothing was changed, retry"
                ) from None
        return SchemaRepair(str(tname), record.current_version, repaired=True, columns=tuple(schema.names))

    def update_schema_metadata(
        self,
        name: str,
        values: dict[str, str | None],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> tuple[CommitResult, dict[str, str]]:
        """Merge keys into the table's schema metadata; a None value deletes its key. One commit,
        ``detail`` in its log entry; returns the metadata. ``by.commit_id`` that already landed
        as this change is answered (the metadata at its version), nothing written."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_schema_metadata(values)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"change the schema metadata of {tname}")
        commit_id = check_commit_id(by.commit_id)
        landed = self._landed(commit_id, tname, "schema-metadata", by)
        if landed is not None:
            return landed[0], schema_metadata_of(landed[1])
        record, _ = self.ctx.table(tname)
        pending = PendingCommit(
            commit_id=commit_id,
            operation="schema-metadata",
            actor=self.ctx.actor(by.actor, who),
            detail={**(detail or {}), **schema_metadata_detail(values)},
        )
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision, _ = self.commits.manifests.leased_head(tname, record)
            if by.commit_id is not None:  # it may have landed while this waited (sent twice at once)
                landed = self._landed(commit_id, tname, "schema-metadata", by)
                if landed is not None:
                    return landed[0], schema_metadata_of(landed[1])
            ns, ds = self.commits.open_bound(tname, record, revision, pending, lease)
            from lake_platform.catalog.arrow_io import schema_to_ipc

            pending.schema_ipc = schema_to_ipc(with_schema_metadata(engine.schema_of(ds), values))
            try:
                merged = engine.update_schema_metadata(ds, values)
            except Exception as exc:  # noqa: BLE001
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(record, pending)
        return self.commits.result(pending, str(tname)), merged

    def update_field_metadata(
        self,
        name: str,
        updates: FieldMetadataUpdates,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> tuple[CommitResult, dict[str, dict[str, str]]]:
        """Change top-level columns' field metadata: ``updates`` maps a column to (values,
        replace); values merge into its metadata (a None value deletes its key) or, with
        replace, become all of it. One commit for every column, ``detail`` in its log entry;
        returns each column's metadata. ``by.commit_id`` that already landed as this change is
        answered (the columns' metadata at its version), nothing written."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_field_metadata(updates)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"change the field metadata of {tname}")
        commit_id = check_commit_id(by.commit_id)
        landed = self._landed(commit_id, tname, "field-metadata", by)
        if landed is not None:
            return landed[0], field_metadata_of(landed[1], updates)
        record, _ = self.ctx.table(tname)
        from lake_platform.catalog.arrow_io import schema_from_ipc

        # Refused before the lease; checked again under it.
        with_field_metadata(schema_from_ipc(record.schema_ipc), updates, str(tname))
        pending = PendingCommit(
            commit_id=commit_id,
            operation="field-metadata",
            actor=self.ctx.actor(by.actor, who),
            detail={**(detail or {}), "columns": sorted(updates)},
        )
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision, _ = self.commits.manifests.leased_head(tname, record)
            if by.commit_id is not None:  # it may have landed while this waited (sent twice at once)
                landed = self._landed(commit_id, tname, "field-metadata", by)
                if landed is not None:
                    return landed[0], field_metadata_of(landed[1], updates)
            ns, ds = self.commits.open_bound(tname, record, revision, pending, lease)
            from lake_platform.catalog.arrow_io import schema_to_ipc

            schema, merged = with_field_metadata(engine.schema_of(ds), updates, str(tname))
            pending.schema_ipc = schema_to_ipc(schema)
            try:
                # One Lance commit for all columns: each column's whole metadata, replaced.
                changes.replace_field_metadata(ds, merged)
            except Exception as exc:  # noqa: BLE001
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(record, pending)
        return self.commits.result(pending, str(tname)), merged

    def _landed(
        self, commit_id: str, tname: TableName, operation: str, by: Provenance
    ) -> tuple[CommitResult, pa.Schema] | None:
        """The commit ``commit_id`` made as ``operation`` of ``tname``, with the schema at its
        version (what a replay answers from), or None if it never landed."""
        replay = self.ctx.replayed(commit_id, table=str(tname), operation=operation)
        if replay is None:
            return None
        return replay, self.commits.reads.open_table(str(tname), replay.to_version, by=by).schema


#: Field metadata changes: column -> (values, replace); a None value deletes its key.
FieldMetadataUpdates = dict[str, tuple[dict[str, str | None], bool]]


def check_schema_metadata(values: object) -> None:
    """InvalidInput unless ``values`` is a non-empty map of keys to strings or None."""
    if not isinstance(values, dict) or not values:
        raise InvalidInput("schema metadata updates must be a non-empty map of keys to strings or null")
    for key, value in values.items():
        if not isinstance(key, str) or not key or (value is not None and not isinstance(value, str)):
            raise InvalidInput(f"schema metadata {key!r}: keys are strings, values strings or null")


def schema_metadata_detail(values: dict[str, str | None]) -> dict[str, object]:
    """The log entry's detail of a schema metadata change: the keys set and the keys removed."""
    return {
        "set": sorted(k for k, v in values.items() if v is not None),
        "removed": sorted(k for k, v in values.items() if v is None),
    }


def schema_metadata_of(schema: pa.Schema) -> dict[str, str]:
    """The schema's metadata as strings: what a schema metadata change answers."""
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


def with_schema_metadata(schema: pa.Schema, values: dict[str, str | None]) -> pa.Schema:
    """``schema`` with ``values`` merged into its metadata (a None value deletes its key), as
    Lance's ``update_schema_metadata`` merges them."""
    merged = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    merged.update({k: v for k, v in values.items() if v is not None})
    for key in [k for k, v in values.items() if v is None]:
        merged.pop(key, None)
    return schema.with_metadata(merged)


def check_field_metadata(updates: object) -> None:
    """InvalidInput unless ``updates`` maps at least one column to (values, replace), values
    mapping keys to strings or None."""
    if not isinstance(updates, dict) or not updates:
        raise InvalidInput("field metadata updates must name at least one column")
    for column, (values, _replace) in updates.items():
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and k and (v is None or isinstance(v, str)) for k, v in values.items()
        ):
            raise InvalidInput(f"metadata of {column!r}: keys are strings, values strings or null")


def field_metadata_of(schema: pa.Schema, columns: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each of ``columns``' field metadata in ``schema`` (a replayed change's answer)."""
    return {
        c: {k.decode(): v.decode() for k, v in (schema.field(c).metadata or {}).items()}
        for c in columns
        if c in schema.names
    }


def with_field_metadata(
    schema: pa.Schema, updates: FieldMetadataUpdates, owner: str
) -> tuple[pa.Schema, dict[str, dict[str, str]]]:
    """``schema`` with each column's field metadata merged (or, with replace, replaced), and
    each changed column's whole metadata; TableColumnNotFound names ``owner`` (the table, or a
    branch of it) when a column is missing."""
    merged: dict[str, dict[str, str]] = {}
    for column, (values, replace) in updates.items():
        if column not in schema.names:
            raise TableColumnNotFound(f"{owner} has no column {column!r}")
        field = schema.field(column)
        kept = {} if replace else {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
        kept.update({k: v for k, v in values.items() if v is not None})
        for key in [k for k, v in values.items() if v is None]:
            kept.pop(key, None)
        merged[column] = kept
        schema = schema.set(schema.get_field_index(column), field.with_metadata(kept))
    return schema, merged

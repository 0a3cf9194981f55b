"""Explicit schema changes: add, drop and rename a column (``lake table alter``).

Each is one Lance commit that the registry accepts by compare-and-swap under the table's write
lease, like every other write (``tables``): the version, the new schema in the table record and
the commit-log entry (with the actor) land in one registry transaction. Every argument is
checked against the registered schema before the lease is taken, and again under it.

Adding a column needs the writer role (an append may do as much under ``add_columns``);
dropping and renaming need admin, like dropping a table: they change or hide what readers see.

- ``add-column NAME TYPE``: a nullable column (the rows already there read as null); metadata
  only, no data is rewritten.
- ``drop-column NAME``: metadata only; older versions still have the column (time travel), the
  bytes go when a compaction rewrites the files and cleanup removes the old versions. Refused on
  a protected table (it hides data), and for the last column.
- ``rename-column OLD NEW``: metadata only.

Over REST (the Lance Namespace's AlterTable* operations) several columns change in one commit
(``drop_columns``, ``rename_columns``), and ``add_computed_columns`` adds columns whose values
are SQL expressions over each row (Lance writes their data; writer role, like an add).

Only top-level columns are addressed: Lance reads a dot in a column path as nesting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Action, Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    InvalidInput,
    Protected,
    TableColumnNotFound,
    TableSchemaValidationError,
)
from lake_platform.naming import TableName

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.engine_commits import EngineCommits

#: The type names ``add-column`` accepts (Arrow's own spelling, and a few common aliases).
TYPE_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "double",
    "string",
    "large_string",
    "binary",
    "large_binary",
    "date32",
    "date64",
    "timestamp[s]",
    "timestamp[ms]",
    "timestamp[us]",
    "timestamp[ns]",
    "timestamp[us, tz=UTC]",
)


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name; InvalidInput naming the accepted ones otherwise."""
    import pyarrow as pa

    name = text.strip().lower() if isinstance(text, str) else ""
    aliases = {"boolean": "bool", "float": "float32", "double": "float64", "utf8": "string"}
    name = aliases.get(name, name)
    if name not in TYPE_NAMES:
        raise InvalidInput(f"unknown column type {text!r}: use one of {', '.join(TYPE_NAMES)}")
    if name.startswith("timestamp["):
        unit, _, tz = name[len("timestamp[") : -1].partition(", tz=")
        return pa.timestamp(unit, tz="UTC" if tz else None)
    return pa.type_for_alias(name)


def check_column_name(name: str, what: str = "column name") -> str:
    if not isinstance(name, str) or not name or name != name.strip() or len(name) > 255:
        raise InvalidInput(f"invalid {what} {name!r}: non-empty, at most 255 characters, no outer spaces")
    if "." in name:
        raise InvalidInput(f"invalid {what} {name!r}: a dot means a nested column; only top-level columns")
    return name


class Alter:
    """``lake table alter``: one registry commit per change, under the table's lease."""

    def __init__(self, ctx: CatalogContext, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.commits = commits

    def add_column(
        self,
        name: str,
        column: str,
        type_name: str,
        *,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        import pyarrow as pa

        check_column_name(column)
        field = pa.field(column, parse_type(type_name), nullable=True)

        def change(schema: pa.Schema) -> pa.Schema:
            if column in schema.names:
                raise TableSchemaValidationError(f"column {column} already exists")
            return schema.append(field)

        return self._alter(
            name,
            "add-column",
            {"column": column, "type": str(field.type)},
            change,
            lambda ds: engine.evolve_schema(ds, added=[field]),
            by.principal,
            by.actor,
        )

    def add_computed_columns(
        self,
        name: str,
        expressions: dict[str, str],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Add columns whose values are SQL expressions over each row (the Lance Namespace's
        AlterTableAddColumns): one commit; Lance writes the new columns' data. Each column's
        type is what the expression yields over the current version. ``detail`` goes into the
        log entry (an idempotent request's digest), as for a rename or drop; ``by.commit_id``
        that already landed as this change is answered, nothing written."""
        check_expressions(expressions)
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"add columns to {tname}")
        if by.commit_id is not None:  # a retry: its columns are there, answer the first commit
            replay = self.ctx.replayed(
                check_commit_id(by.commit_id), table=str(tname), operation="add-columns"
            )
            if replay is not None:
                return replay
        snap = self.commits.reads.open_table(name, by=Provenance(principal=who))
        taken = [c for c in expressions if c in snap.schema.names]
        if taken:
            raise TableSchemaValidationError(f"column {taken[0]} already exists")
        try:
            fields = list(changes.expression_schema(snap.dataset, expressions))
        except Exception as exc:  # noqa: BLE001 - Lance's planner refuses a bad expression
            raise InvalidInput(f"cannot add columns to {name}: {first_line(exc)}") from None

        def change(schema: pa.Schema) -> pa.Schema:
            for field in fields:
                if field.name in schema.names:
                    raise TableSchemaValidationError(f"column {field.name} already exists")
                schema = schema.append(field)
            return schema

        return self._alter(
            name,
            "add-columns",
            {
                **(detail or {}),
                "columns": {f.name: str(f.type) for f in fields},
                "expressions": dict(expressions),
            },
            change,
            lambda ds: changes.add_computed_columns(ds, expressions),
            by.principal,
            by.actor,
            commit_id=by.commit_id,
        )

    def drop_column(self, name: str, column: str, *, by: Provenance = UNSTATED) -> CommitResult:
        return self.drop_columns(name, [column], by=by)

    def drop_columns(
        self,
        name: str,
        columns: list[str],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Drop ``columns`` in one commit (all or none), ``detail`` in its log entry."""
        change = dropping(columns)
        return self._alter(
            name,
            "drop-column",
            {
                **(detail or {}),
                **({"column": columns[0]} if len(columns) == 1 else {"columns": list(columns)}),
            },
            change,
            lambda ds: engine.drop_columns(ds, columns),
            by.principal,
            by.actor,
            destructive=True,
            role="admin",
            commit_id=by.commit_id,
        )

    def rename_column(
        self,
        name: str,
        old: str,
        new: str,
        *,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        return self.rename_columns(name, {old: new}, by=by)

    def rename_columns(
        self,
        name: str,
        renames: dict[str, str],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Rename columns (old -> new) in one commit (all or none), ``detail`` in its log entry."""
        change = renaming(renames)
        logged: dict[str, object] = (
            {"column": next(iter(renames)), "new_name": next(iter(renames.values()))}
            if len(renames) == 1
            else {"renames": dict(renames)}
        )
        return self._alter(
            name,
            "rename-column",
            {**(detail or {}), **logged},
            change,
            lambda ds: changes.rename_columns(ds, renames),
            by.principal,
            by.actor,
            role="admin",
            commit_id=by.commit_id,
        )

    def _alter(
        self,
        name: str,
        operation: str,
        detail: dict[str, object],
        change: Callable[[pa.Schema], pa.Schema],
        apply: Callable[[object], None],
        principal: Principal | None,
        actor: str | None,
        *,
        destructive: bool = False,
        role: Action = "write",
        commit_id: str | None = None,
    ) -> CommitResult:
        """One schema change under the lease; ``commit_id`` (the caller's, for a retry) that
        already landed as this change is answered, nothing written."""
        from lake_platform.catalog.arrow_io import schema_from_ipc, schema_to_ipc

        who = self.ctx.who(principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, role, f"{operation.replace('-', ' ')} on {tname}")
        if commit_id is not None:
            replay = self.ctx.replayed(check_commit_id(commit_id), table=str(tname), operation=operation)
            if replay is not None:
                return replay
        record, _ = self.ctx.table(tname)
        change(schema_from_ipc(record.schema_ipc))  # refuse bad input before taking the lease
        if destructive and record.protected:
            raise Protected(f"table {tname} is protected; unprotect it to drop a column")
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision, _ = self.commits.manifests.leased_head(tname, record)
            if commit_id is not None:  # it may have landed while this waited (sent twice at once)
                replay = self.ctx.replayed(commit_id, table=str(tname), operation=operation)
                if replay is not None:
                    return replay
            if destructive and record.protected:
                raise Protected(f"table {tname} is protected; unprotect it to drop a column")
            schema = change(schema_from_ipc(record.schema_ipc))
            pending = PendingCommit(
                commit_id=check_commit_id(commit_id),
                operation=operation,
                actor=self.ctx.actor(actor, who),
                schema_ipc=schema_to_ipc(schema),
                detail=detail,
            )
            ns, ds = self.commits.open_bound(tname, record, revision, pending, lease)
            lease.check()
            try:
                self.ctx.at(f"{operation}:before-write")
                apply(ds)
            except Exception as exc:  # noqa: BLE001 - resolved by commit id, never guessed
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(record, pending)
        return self.commits.result(pending, str(tname))


def check_expressions(expressions: dict[str, str]) -> None:
    """Computed columns' request (column name -> SQL expression), refused before anything is
    read: at least one, each a valid column name with a non-empty expression."""
    if not isinstance(expressions, dict) or not expressions:
        raise InvalidInput("name at least one column to add, each with its SQL expression")
    for column, expression in expressions.items():
        check_column_name(column)
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidInput(f"column {column}: the expression must be a non-empty SQL expression")


def dropping(columns: list[str], owner: str = "table") -> Callable[[pa.Schema], pa.Schema]:
    """The schema change dropping ``columns`` (all or none) from a table's or a branch's
    (``owner``) schema; bad names are refused here, before anything is read."""
    if not isinstance(columns, list) or not columns:
        raise InvalidInput("name at least one column to drop")
    for column in columns:
        check_column_name(column)
    if len(set(columns)) != len(columns):
        raise InvalidInput("a column is named twice")

    def change(schema: pa.Schema) -> pa.Schema:
        for column in columns:
            _require(schema, column, owner)
        if len(schema) == len(columns):
            raise TableSchemaValidationError(
                f"cannot drop {', '.join(columns)}: that is the table's only column, or all of them"
            )
        for column in columns:
            schema = schema.remove(schema.get_field_index(column))
        return schema

    return change


def renaming(renames: dict[str, str], owner: str = "table") -> Callable[[pa.Schema], pa.Schema]:
    """The schema change renaming columns (old -> new, all or none) in a table's or a branch's
    (``owner``) schema; bad names are refused here, before anything is read."""
    if not isinstance(renames, dict) or not renames:
        raise InvalidInput("name at least one column to rename")
    for old, new in renames.items():
        check_column_name(old)
        check_column_name(new, "new column name")
    if len(set(renames.values())) != len(renames):
        raise InvalidInput("two columns cannot take the same new name")

    def change(schema: pa.Schema) -> pa.Schema:
        for old in renames:
            _require(schema, old, owner)
        kept = set(schema.names) - set(renames)
        for old, new in renames.items():
            if new in kept:
                raise TableSchemaValidationError(f"cannot rename {old} to {new}: column {new} already exists")
        for old, new in renames.items():
            i = schema.get_field_index(old)
            schema = schema.set(i, schema.field(i).with_name(new))
        return schema

    return change


def _require(schema: pa.Schema, column: str, owner: str = "table") -> None:
    if column not in schema.names:
        raise TableColumnNotFound(f"no column {column} (the {owner} has {', '.join(schema.names)})")

"""Schema evolution, governed: which incoming schemas a table accepts, and how it changes.

One rule for every write path (``Catalog.append``, ``lake ingest``, the inbox): an incoming
column is either the table's column with the same type, or a type that converts to it without
loss and without parsing (``widens``: a narrower integer, float32 into float64, string into
large_string, ...). Anything else is refused before a byte is written: a narrowing conversion
(int64 into int32, which used to start and then fail on the first large value), and any
conversion between kinds (a string column is never parsed into numbers).

What else a write may do to the table is the table's ``schema_evolution`` policy:

- ``strict`` (default): nothing. A new column, a wider type or a missing column is refused.
- ``add_columns``: columns the table lacks are added, nullable (the rows already there read
  as null), in the same registry commit as the rows that bring them. A column the file declares
  non-nullable is added as nullable too: existing rows have no value for it, and every value
  the file brings fits a nullable column. A nullable table column the input lacks is filled
  with nulls for its rows (``filled``), as Lance itself appends a subset of the columns: an
  older producer keeps working the day a newer one adds a field.
- ``widen``: ``add_columns``, and a table column whose incoming type is a safe widening of the
  table's (``TABLE_WIDENINGS``: int8/16/32 → int64 and the other wider integers of the same
  signedness, float16/32 → float64, string → large_string, binary → large_binary) changes type,
  again in the same commit. Old rows are rewritten column-wise by Lance.

Never: narrowing, parsing, dropping a column (a write never changes the table's columns but to
add or widen them), leaving out a non-nullable column (refused by name under every policy).
Renaming is ``lake table alter``: a file that renamed a column looks like one missing and one
new column, refused under ``strict``; under ``add_columns`` the new name is added and the old
column is null for the file's rows when it is nullable (refused when it is not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lake_platform.catalog.column_names import check_columns
from lake_platform.catalog.conform import int_bits as _int_bits
from lake_platform.catalog.conform import widens as widens
from lake_platform.errors import TableSchemaValidationError

if TYPE_CHECKING:
    import pyarrow as pa

MODES = ("strict", "add_columns", "widen")


@dataclass(frozen=True)
class SchemaChange:
    """What a write does to the table's schema; empty when it fits as it is."""

    target: pa.Schema  # the schema the rows are written with (and the table's afterwards)
    added: tuple[pa.Field, ...] = ()
    widened: tuple[tuple[str, pa.DataType], ...] = ()
    #: Columns the target has that a given input may lack (added by another file of the batch,
    #: or filled).
    optional: frozenset[str] = field(default_factory=frozenset)
    #: Nullable table columns an input lacks: its rows read null there (no schema change).
    filled: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.widened)

    @property
    def steps(self) -> list[str]:
        """The Lance commits the change takes, in order, as commit-log operations."""
        return (["widen-columns"] if self.widened else []) + (["add-columns"] if self.added else [])

    def describe(self) -> dict[str, object]:
        """What the commit log records of the change (``filled_columns`` only when some are)."""
        described: dict[str, object] = {
            "added_columns": {f.name: str(f.type) for f in self.added},
            "widened_columns": {name: str(t) for name, t in self.widened},
        }
        if self.filled:
            described["filled_columns"] = list(self.filled)
        return described


def table_widens(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a table column of type ``src`` may change to ``dst`` under ``widen``: a lossless
    widening within one kind (Lance's column cast does integers to integers, floats to floats,
    strings to their large variant)."""
    import pyarrow as pa

    if src == dst or not widens(src, dst):
        return False
    s, d = _int_bits(src), _int_bits(dst)
    if s and d:
        return s[0] == d[0]
    return (pa.types.is_floating(src) and pa.types.is_floating(dst)) or not (s or d)


def _kind(t: pa.DataType) -> str:
    import pyarrow as pa

    for name, test in [
        ("integer", pa.types.is_integer),
        ("floating point", pa.types.is_floating),
        ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
        ("binary", lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x)),
    ]:
        if test(t):
            return name
    return str(t)


def plan(table: pa.Schema, incoming: pa.Schema, mode: str, table_name: str) -> SchemaChange:
    """How rows of schema ``incoming`` go into a table of schema ``table`` under ``mode``;
    TableSchemaValidationError naming every refused column otherwise. No I/O."""
    import pyarrow as pa

    if mode not in MODES:
        raise TableSchemaValidationError(f"unknown schema_evolution mode {mode!r}")
    if len(set(incoming.names)) != len(incoming.names):
        raise TableSchemaValidationError(f"data for {table_name} has duplicate column names")
    problems: list[str] = []
    missing = [f for f in table if f.name not in incoming.names]
    required = [f.name for f in missing if not f.nullable]
    filled = tuple(f.name for f in missing if f.nullable and mode != "strict")
    if required:
        problems.append(
            f"missing non-nullable column(s) {', '.join(required)} "
            "(only a nullable column may be left out, filled with nulls under add_columns or widen)"
        )
    if mode == "strict" and len(required) < len(missing):
        problems.append(
            f"missing column(s) {', '.join(f.name for f in missing if f.nullable)} "
            "(the table's schema_evolution policy is strict; under add_columns or widen a "
            "missing nullable column is filled with nulls)"
        )
    fields: list[pa.Field] = []
    widened: list[tuple[str, pa.DataType]] = []
    for tf in table:
        if tf.name not in incoming.names:
            fields.append(tf)
            continue
        src = incoming.field(tf.name).type
        if widens(src, tf.type):
            fields.append(tf)
        elif mode == "widen" and table_widens(tf.type, src):
            fields.append(tf.with_type(src))
            widened.append((tf.name, src))
        elif widens(tf.type, src):
            problems.append(
                f"column {tf.name} is {src}, wider than the table's {tf.type}: "
                + (
                    "the table's schema_evolution policy does not allow widening"
                    if mode != "widen"
                    else "not a widening the table can take"
                )
                + " (never narrowed)"
            )
        else:
            problems.append(
                f"column {tf.name} is {src} ({_kind(src)}), the table has {tf.type} ({_kind(tf.type)}): "
                "no lossless conversion (values are never parsed or narrowed)"
            )
    # An input's own column names are its content (a file's header line): messages count them
    # and name only the table's columns.
    added: list[pa.Field] = []
    new = [f for f in incoming if f.name not in table.names]
    if new and mode == "strict":
        problems.append(
            f"{len(new)} unknown column(s) the table does not have "
            f"(its schema_evolution policy is strict; the table has {', '.join(table.names)})"
        )
    elif new:
        untyped = [f for f in new if pa.types.is_null(f.type)]
        badly_named = [f for f in new if not f.name or f.name != f.name.strip()]
        if untyped:
            problems.append(
                f"{len(untyped)} new column(s) without a type (every value empty): cannot add them"
            )
        if badly_named:
            problems.append(f"{len(badly_named)} new column(s) with an empty or space-padded name")
        if len({f.name for f in new}) != len(new):
            problems.append("duplicate new column names")
        try:
            check_columns([f for f in new if f not in badly_named], table_name)
        except TableSchemaValidationError:
            problems.append("a new column with a name Lance reserves, or with two struct fields of one name")
        added = [pa.field(f.name, f.type, nullable=True) for f in new]
    if problems:
        raise TableSchemaValidationError(
            f"data does not match the schema of {table_name}: " + "; ".join(problems)
        )
    target = pa.schema(fields + added, metadata=table.metadata)
    return SchemaChange(target, tuple(added), tuple(widened), frozenset(filled), filled)


def plan_batch(
    table: pa.Schema,
    schemas: list[pa.Schema],
    mode: str,
    table_name: str,
    labels: Sequence[str] | None = None,
) -> SchemaChange:
    """One change for several inputs written in one commit: each input is planned against the
    table as the inputs before it left it; an input may lack the columns the others add. A
    refusal names the input (its label, e.g. the file name) when labels are given."""
    change = SchemaChange(table)
    added: dict[str, pa.Field] = {}
    widened: dict[str, pa.DataType] = {}
    filled: dict[str, None] = {}  # ordered: the table's column order, first seen first
    for i, schema in enumerate(schemas):
        current = change.target
        fill = [f for f in current if f.name in added and f.name not in schema.names]
        if fill:
            import pyarrow as pa

            schema = pa.schema(list(schema) + fill)
        try:
            step = plan(current, schema, mode, table_name)
        except TableSchemaValidationError as exc:
            if labels is None:
                raise
            raise TableSchemaValidationError(f"{labels[i]}: {exc.message}") from None
        filled.update(dict.fromkeys(step.filled))
        for f in step.added:
            added[f.name] = f
        for name, t in step.widened:
            if name in added:  # a column this batch adds: it is added with the wider type
                added[name] = added[name].with_type(t)
            else:
                widened[name] = t
        change = SchemaChange(step.target)
    return SchemaChange(
        change.target,
        tuple(added.values()),
        tuple(widened.items()),
        frozenset(added) | frozenset(filled),
        tuple(filled),
    )

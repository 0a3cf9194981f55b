"""The names of a new table's columns (create, overwrite) and of the columns an append adds:
refused as TableSchemaValidationError, before anything is written, when Lance would refuse them
only mid-write (a 500 instead of a typed error) or, worse, accept them and write a table that
does not read.

- a name that is empty or has surrounding white space;
- Lance's reserved names (its row-address and row-version columns: ``_rowid``, ``_rowaddr``,
  ``_rowoffset``, ``_row_last_updated_at_version``, ``_row_created_at_version``), which Lance
  refuses only once its write has begun;
- the same name twice among one struct's children, at any depth (in a list's or a map's values
  too): Lance writes such a table, and every scan of it then fails (its planner cannot tell the
  two fields apart), as does a field path naming either;
- the same name twice among the top-level columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from lake_platform.errors import TableSchemaValidationError

if TYPE_CHECKING:
    import pyarrow as pa

#: The columns Lance computes for every row and refuses in a dataset's schema.
RESERVED = frozenset(
    {"_rowid", "_rowaddr", "_rowoffset", "_row_last_updated_at_version", "_row_created_at_version"}
)


def check_schema(schema: pa.Schema, table: str) -> None:
    """A new table's schema (or an overwrite's): at least one column, each named as above."""
    if len(schema) == 0:
        raise TableSchemaValidationError(f"cannot create {table} without columns")
    check_columns(schema, table)
    if len(set(schema.names)) != len(schema.names):
        raise TableSchemaValidationError(f"duplicate column names in {table}")


def check_columns(fields: Iterable[pa.Field], table: str) -> None:
    """Top-level ``fields`` (all of a schema, or those an append adds) named as above; the
    duplicates among them are the caller's to check (its message names its operation)."""
    for f in fields:
        if not f.name or f.name != f.name.strip():
            raise TableSchemaValidationError(f"invalid column name {f.name!r} in {table}")
        if f.name in RESERVED:
            raise TableSchemaValidationError(
                f"column {f.name} of {table}: {f.name} is a name Lance reserves for its own row columns"
            )
        _check_children(f, f.name, table)


def _check_children(field: pa.Field, path: str, table: str) -> None:
    """No two children of one struct share a name, anywhere under ``field`` (iterative)."""
    import pyarrow as pa

    stack = [(field.type, path)]
    while stack:
        kind, at = stack.pop()
        if pa.types.is_struct(kind):
            names = [kind.field(i).name for i in range(kind.num_fields)]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise TableSchemaValidationError(
                    f"struct column {at} of {table} has two fields named {twice[0]!r}: "
                    "a struct's fields need distinct names"
                )
            stack.extend((kind.field(i).type, f"{at}.{kind.field(i).name}") for i in range(kind.num_fields))
        elif pa.types.is_map(kind):
            stack.extend([(kind.key_type, f"{at}.key"), (kind.item_type, f"{at}.value")])
        elif hasattr(kind, "value_type") and not pa.types.is_dictionary(kind):  # list kinds
            stack.append((kind.value_type, f"{at}.item"))

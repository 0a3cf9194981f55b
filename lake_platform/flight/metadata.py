"""The Flight SQL catalog commands: GetCatalogs, GetDbSchemas, GetTables, GetTableTypes,
GetSqlInfo, and the key and type-info commands (answered empty).

Each command has a fixed result schema (what GetFlightInfo and GetSchema advertise) and a small
table DoGet returns. The catalog commands read the caller's project in the cached catalog
snapshot: catalog = warehouse, db_schema = namespace path joined by ".", table = table. A
table's schema (GetTables with ``include_schema``) carries Flight SQL's column metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lake_platform.auth.tokens import Identity
from lake_platform.errors import InvalidInput, InvalidTableState, Unsupported
from lake_platform.flight import proto, schemas, xdbc
from lake_platform.flight.sqlinfo import sql_info_table
from lake_platform.query.columns import Origin, table_schema
from lake_platform.query.snapshot import CachedTable, ProjectView

TABLE_TYPES = ("TABLE",)
#: The commands that read the catalog snapshot (the others answer from constants).
CATALOG_COMMANDS = frozenset({"CommandGetCatalogs", "CommandGetDbSchemas", "CommandGetTables"})
#: Commands whose result schema does not depend on the request.
_FIXED_SCHEMAS = {
    "CommandGetCatalogs": schemas.CATALOGS,
    "CommandGetDbSchemas": schemas.DB_SCHEMAS,
    "CommandGetTableTypes": schemas.TABLE_TYPES,
    "CommandGetSqlInfo": schemas.SQL_INFO,
    "CommandGetPrimaryKeys": schemas.PRIMARY_KEYS,
    "CommandGetExportedKeys": schemas.FOREIGN_KEYS,
    "CommandGetImportedKeys": schemas.FOREIGN_KEYS,
    "CommandGetCrossReference": schemas.FOREIGN_KEYS,
    "CommandGetXdbcTypeInfo": schemas.XDBC_TYPE_INFO,
}
#: Commands with nothing to report here: always an empty result.
_EMPTY = {
    "CommandGetPrimaryKeys": schemas.PRIMARY_KEYS,
    "CommandGetExportedKeys": schemas.FOREIGN_KEYS,
    "CommandGetImportedKeys": schemas.FOREIGN_KEYS,
    "CommandGetCrossReference": schemas.FOREIGN_KEYS,
}


def unsupported(name: str) -> Unsupported:
    """The error for a Flight SQL command this endpoint refuses (one that writes, or a Substrait
    plan), saying why."""
    return Unsupported(proto.UNSUPPORTED_COMMANDS[name])


class Metadata:
    """Answers the catalog commands. ``view``: the caller's project in the current snapshot."""

    def __init__(self, sql_info: dict[int, tuple[int, Any]], view: Callable[[Identity], ProjectView]) -> None:
        self.sql_info = sql_info
        self._view = view

    def schema(self, name: str, payload: bytes) -> pa.Schema:
        """The result schema of command ``name``; a malformed payload is refused now, not at DoGet."""
        if name == "CommandGetTables":
            cmd = proto.parse(proto.CommandGetTables, payload)
            return schemas.TABLES_WITH_SCHEMA if cmd.include_schema else schemas.TABLES
        if name in _FIXED_SCHEMAS:
            proto.parse(getattr(proto, name), payload)
            return _FIXED_SCHEMAS[name]
        if name in proto.UNSUPPORTED_COMMANDS:
            raise unsupported(name)
        if name == "TicketStatementQuery":
            raise InvalidInput("TicketStatementQuery is a ticket for DoGet, not a command")
        raise InvalidInput(f"unknown Flight SQL command {name!r}")

    def table(self, identity: Identity, name: str, payload: bytes) -> pa.Table:
        """The result of command ``name`` (checked by :meth:`schema` first)."""
        self.schema(name, payload)
        if name == "CommandGetSqlInfo":
            cmd = proto.parse(proto.CommandGetSqlInfo, payload)
            return sql_info_table(self.sql_info, list(cmd.info))
        if name == "CommandGetTableTypes":
            return pa.Table.from_pylist([{"table_type": t} for t in TABLE_TYPES], schema=schemas.TABLE_TYPES)
        if name == "CommandGetXdbcTypeInfo":
            return xdbc.type_info(proto.opt(proto.parse(proto.CommandGetXdbcTypeInfo, payload), "data_type"))
        if name in _EMPTY:
            return _EMPTY[name].empty_table()
        view = self._view(identity)
        if name == "CommandGetCatalogs":
            return pa.Table.from_pylist(
                [{"catalog_name": w} for w in view.warehouses], schema=schemas.CATALOGS
            )
        if name == "CommandGetDbSchemas":
            cmd = proto.parse(proto.CommandGetDbSchemas, payload)
            catalog = proto.opt(cmd, "catalog")
            match = like(proto.opt(cmd, "db_schema_filter_pattern"))
            rows = [
                {"catalog_name": wh, "db_schema_name": ns}
                for wh, ns in view.namespaces
                if (catalog is None or catalog == wh) and match(ns)
            ]
            return pa.Table.from_pylist(rows, schema=schemas.DB_SCHEMAS)
        return _tables(view, proto.parse(proto.CommandGetTables, payload))


def _tables(view: ProjectView, cmd: Any) -> pa.Table:
    catalog = proto.opt(cmd, "catalog")
    match_schema = like(proto.opt(cmd, "db_schema_filter_pattern"))
    match_table = like(proto.opt(cmd, "table_name_filter_pattern"))
    types = [t.upper() for t in cmd.table_types]
    schema = schemas.TABLES_WITH_SCHEMA if cmd.include_schema else schemas.TABLES
    if types and not set(types) & set(TABLE_TYPES):
        return schema.empty_table()
    rows = []
    # Namespace by namespace: a filtered call reads only the namespaces it matches.
    for wh, ns in view.tables.groups():
        if (catalog is not None and catalog != wh) or not match_schema(ns):
            continue
        in_ns = view.tables.in_namespace(wh, ns)
        for table in sorted(t for t in in_ns if match_table(t)):
            rows.append(_table_row(wh, ns, table, in_ns[table], cmd.include_schema))
    return pa.Table.from_pylist(rows, schema=schema)


def _table_row(wh: str, ns: str, table: str, cached: CachedTable, include_schema: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "catalog_name": wh,
        "db_schema_name": ns,
        "table_name": table,
        "table_type": "TABLE",
    }
    if include_schema:
        if not cached.schema_ipc:
            raise InvalidTableState(
                f"table {wh}.{ns}.{table} has no recorded schema; "
                "ask an operator to run `lake table repair --schema` on it"
            )
        row["table_schema"] = typed_table_schema(cached.schema_ipc, Origin(wh, ns, table))
    return row


def typed_table_schema(schema_ipc: bytes, origin: Origin) -> bytes:
    """A table's recorded schema as GetTables(include_schema) answers it: each column with its
    Flight SQL column metadata (SQL type name, precision, scale, the table's names), which
    ADBC's ``adbc_get_objects`` reports as ``xdbc_type_name`` and SQLAlchemy reflects."""
    schema = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
    plain = pa.schema([f.remove_metadata() for f in schema])
    return bytes(table_schema(plain, origin).serialize().to_pybytes())


def like(pattern: str | None) -> Callable[[str], bool]:
    """A matcher for a SQL LIKE pattern (``%``, ``_``, backslash escapes); None matches all.

    The pattern is the caller's text: it is matched by a wildcard scan that costs at most the
    pattern's length times the name's, never by a backtracking regular expression (``%`` five
    hundred times over a five-letter name took hours, holding the interpreter's lock, so every
    other caller of the process waited)."""
    if pattern is None or pattern == "%":
        return lambda _: True
    tokens: list[str | None] = []  # a character to match, _ANY_ONE, or None for any run (%)
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            tokens.append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            if not tokens or tokens[-1] is not None:  # a run of % is one %
                tokens.append(None)
        else:
            tokens.append(_ANY_ONE if c == "_" else c)
        i += 1
    return lambda s: _like_match(tokens, s)


#: The token of ``_``: longer than one character, so no character of a name equals it.
_ANY_ONE = "_any_one_"


def _like_match(tokens: list[str | None], name: str) -> bool:
    """Whether ``name`` matches ``tokens``: the greedy wildcard scan, which on a mismatch goes
    back only to the last ``%`` (letting it take one more character), so at most
    len(tokens) * len(name) steps."""
    t = i = 0
    star, star_at = -1, 0
    while i < len(name):
        token = tokens[t] if t < len(tokens) else ""
        if token is None:
            star, star_at = t, i
            t += 1
        elif token == name[i] or token is _ANY_ONE:
            t += 1
            i += 1
        elif star >= 0:
            star_at += 1
            t, i = star + 1, star_at
        else:
            return False
    while t < len(tokens) and tokens[t] is None:
        t += 1
    return t == len(tokens)


__all__ = ["CATALOG_COMMANDS", "TABLE_TYPES", "Metadata", "like", "typed_table_schema", "unsupported"]

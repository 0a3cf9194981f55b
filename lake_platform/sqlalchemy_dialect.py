"""A SQLAlchemy 2 dialect for the lake's Flight SQL endpoint, over ADBC's Flight SQL driver.

URL: ``lake+flightsql://USER:PASSWORD@HOST:PORT/WAREHOUSE`` (or ``?token=SERVICE_TOKEN`` instead
of a password; ``?schema=NS`` for a default namespace; ``?tls=true`` for ``grpc+tls``;
``?max_msg_size=BYTES`` for results with a single row above ADBC's 16 MiB receive limit). The
warehouse is the session's default catalog, so SQLAlchemy's ``schema.table`` names (what
``Table(..., schema=...)`` and the inspector use) resolve as ``warehouse.schema.table``;
SQLAlchemy's schemas are the warehouse's namespaces (nested ones joined by "."). Without a
warehouse in the URL, reflection uses the project's only one.

Reflection reads the endpoint's catalog commands through ADBC (``adbc_get_objects``,
``adbc_get_table_schema``): namespaces, tables (there are no views), and columns typed from
each table's Arrow schema; tables have no primary keys, foreign keys, indexes or constraints.
``create_engine`` finds the dialect through the ``sqlalchemy.dialects`` entry point
``lake.flightsql`` (pyproject.toml). The endpoint is read-only: nothing here writes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import types as sqltypes
from sqlalchemy.engine import default
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError
from sqlalchemy.sql import compiler

from lake_platform.sqlalchemy_types import INTERVAL, sqlalchemy_type

DEFAULT_PORT = 50051
#: ADBC Flight SQL options this dialect sets.
AUTHORIZATION = "adbc.flight.sql.authorization_header"
#: The session (default catalog and schema) lives in a cookie the driver must send back.
COOKIES = "adbc.flight.sql.rpc.with_cookie_middleware"
#: The largest message the driver receives (its default: 16 MiB). A row is never split across
#: messages, so one wider row needs it raised; SQLAlchemy's ``connect_args`` would replace the
#: whole ``db_kwargs`` (credentials, cookies), so the URL's ``max_msg_size`` sets it.
MAX_MSG_SIZE = "adbc.flight.sql.client_option.with_max_msg_size"
#: How often a new connection sets its session defaults before giving up (``on_connect_url``).
SESSION_ATTEMPTS = 3
#: What starts a table name's time-travel or branch selector (``t@v3``): no lake name has it.
SELECTOR = "@"


class LakeCompiler(compiler.SQLCompiler):
    """ANSI SQL as DataFusion reads it; LIMIT and OFFSET are written as numbers, since DataFusion
    takes no placeholder there."""

    def limit_clause(self, select: Any, **kw: Any) -> str:
        text = ""
        if select._limit_clause is not None:
            text += "\n LIMIT " + self.process(select._limit_clause, literal_binds=True, **kw)
        if select._offset_clause is not None:
            text += "\n OFFSET " + self.process(select._offset_clause, literal_binds=True, **kw)
        return text


class LakeTypeCompiler(compiler.GenericTypeCompiler):
    """Type names DataFusion takes in a CAST, which tools also show as a column's type
    (Superset compiles each reflected type with the engine's dialect). The generic compiler
    writes DATETIME and BLOB, which DataFusion refuses, and cannot name an ARRAY at all."""

    def visit_datetime(self, type_: Any, **kw: Any) -> str:
        return "TIMESTAMP"

    def visit_DATETIME(self, type_: Any, **kw: Any) -> str:
        return "TIMESTAMP"

    def visit_large_binary(self, type_: Any, **kw: Any) -> str:
        return "BYTEA"

    def visit_BLOB(self, type_: Any, **kw: Any) -> str:
        return "BYTEA"

    def visit_ARRAY(self, type_: Any, **kw: Any) -> str:
        return f"{self.process(type_.item_type, **kw)}[]"

    def visit_INTERVAL(self, type_: Any, **kw: Any) -> str:
        return "INTERVAL"

    def visit_STRUCT(self, type_: Any, **kw: Any) -> str:
        return "STRUCT"

    def visit_MAP(self, type_: Any, **kw: Any) -> str:
        return "MAP"


class LakeIdentifierPreparer(compiler.IdentifierPreparer):
    """Double quotes; lake names are lower case, so only names that need it are quoted."""


class LakeDialect(default.DefaultDialect):
    """``lake+flightsql://``: the lake's read-only Flight SQL endpoint through ADBC."""

    name = "lake"
    driver = "flightsql"
    supports_statement_cache = True
    statement_compiler = LakeCompiler
    type_compiler_cls = LakeTypeCompiler
    preparer = LakeIdentifierPreparer
    default_paramstyle = "qmark"
    supports_native_boolean = True
    supports_native_decimal = True
    supports_alter = False
    supports_sequences = False
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False
    postfetch_lastrowid = False
    implicit_returning = False
    supports_multivalues_insert = False
    supports_is_distinct_from = True
    requires_name_normalize = False
    #: ``sa.Interval`` columns declared by hand bind and read ``timedelta`` as durations.
    colspecs = {sqltypes.Interval: INTERVAL}

    @classmethod
    def import_dbapi(cls) -> Any:
        import adbc_driver_flightsql.dbapi as dbapi

        return dbapi

    def create_connect_args(self, url: URL) -> tuple[list[Any], dict[str, Any]]:
        query = {k: v if isinstance(v, str) else v[-1] for k, v in url.query.items()}
        tls = query.get("tls", "false").lower() in ("1", "true", "yes")
        uri = f"{'grpc+tls' if tls else 'grpc'}://{url.host or '127.0.0.1'}:{url.port or DEFAULT_PORT}"
        db_kwargs = {COOKIES: "true"}
        if "token" in query:
            db_kwargs[AUTHORIZATION] = f"Bearer {query['token']}"
        elif url.username:
            db_kwargs["username"] = url.username
            db_kwargs["password"] = url.password or ""
        if "max_msg_size" in query:
            size = query["max_msg_size"]
            if not (size.isascii() and size.isdigit() and 0 < int(size) < 1 << 31):
                raise ArgumentError(f"max_msg_size must be a number of bytes below 2 GiB, not {size[:20]!r}")
            db_kwargs[MAX_MSG_SIZE] = size
        return [uri], {"db_kwargs": db_kwargs, "autocommit": True}

    def on_connect_url(self, url: URL) -> Any:
        """Set each new connection's session defaults: the URL's warehouse and ``schema``."""
        warehouse = url.database or None
        schema = url.query.get("schema")
        schema = schema if isinstance(schema, str) or schema is None else schema[-1]

        def connect(dbapi_connection: Any) -> None:
            set_session_defaults(self.loaded_dbapi, dbapi_connection, warehouse, schema)

        return connect

    # -- a read-only, autocommit endpoint ---------------------------------------------------

    def do_rollback(self, dbapi_connection: Any) -> None:
        """Nothing to roll back (there are no transactions)."""

    def do_commit(self, dbapi_connection: Any) -> None:
        """Nothing to commit (there are no transactions)."""

    def get_isolation_level(self, dbapi_connection: Any) -> Any:
        return "AUTOCOMMIT"

    def get_default_isolation_level(self, dbapi_conn: Any) -> Any:
        return "AUTOCOMMIT"

    def _get_server_version_info(self, connection: Any) -> tuple[int, ...]:
        info = _adbc(connection).adbc_get_info()
        version = str(info.get("vendor_version", "0"))
        return tuple(int(p) for p in version.split(".") if p.isdigit()) or (0,)

    def _get_default_schema_name(self, connection: Any) -> str | None:
        try:
            return str(_adbc(connection).adbc_current_db_schema) or None
        except Exception:  # noqa: BLE001 - no default schema set: the driver reports "not found"
            return None

    def do_ping(self, dbapi_connection: Any) -> bool:
        with dbapi_connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
        return True

    # -- reflection ---------------------------------------------------------------------------

    def _warehouse(self, connection: Any) -> str:
        """The URL's warehouse; without one, the project's only warehouse (as the endpoint
        resolves ``ns.t``), else an error that says to name one."""
        adbc = _adbc(connection)
        try:
            return str(adbc.adbc_current_catalog)
        except self.loaded_dbapi.Error:  # no default catalog: the driver reports "not found"
            pass
        rows = adbc.adbc_get_objects(depth="catalogs").read_all().to_pylist()
        warehouses = sorted(row["catalog_name"] for row in rows)
        if len(warehouses) == 1:
            return str(warehouses[0])
        from sqlalchemy.exc import InvalidRequestError

        raise InvalidRequestError(
            f"the project has {len(warehouses)} warehouses: name one in the URL "
            f"(lake+flightsql://USER:PASSWORD@HOST:PORT/WAREHOUSE): {', '.join(warehouses)}"
        )

    def _objects(self, connection: Any, depth: str, schema: str | None = None) -> list[dict[str, Any]]:
        """The default catalog's namespaces (with their tables, at depth ``tables``)."""
        catalog = self._warehouse(connection)
        reader = _adbc(connection).adbc_get_objects(depth=depth, catalog_filter=catalog)
        rows = reader.read_all().to_pylist()
        namespaces = [
            ns for row in rows if row["catalog_name"] == catalog for ns in row["catalog_db_schemas"]
        ]
        return [ns for ns in namespaces if schema is None or ns["db_schema_name"] == schema]

    def get_schema_names(self, connection: Any, **kw: Any) -> list[str]:
        return sorted(ns["db_schema_name"] for ns in self._objects(connection, "db_schemas"))

    def get_table_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        schema = schema or self.default_schema_name
        if schema is None:
            return []
        return sorted(
            t["table_name"]
            for ns in self._objects(connection, "tables", schema)
            for t in ns["db_schema_tables"]
        )

    def get_view_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return []

    def has_table(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> bool:
        if SELECTOR in table_name:
            return self._selected_schema(connection, table_name, schema) is not None
        return table_name in self.get_table_names(connection, schema)

    def _selected_schema(self, connection: Any, table_name: str, schema: str | None) -> Any:
        """The Arrow schema of a time-travel or branch name (``t@v3``, ``t@branch:dev``): the
        selected version's columns, from a query's GetSchema (nothing runs). The catalog
        commands list tables, not their versions. None when the table, version or branch does
        not exist; a malformed selector is the driver's ProgrammingError, saying what to write."""
        from adbc_driver_manager import AdbcStatusCode

        schema = schema or self.default_schema_name
        parts = [self._warehouse(connection), schema, table_name] if schema else [table_name]
        name = ".".join(self.identifier_preparer.quote_identifier(p) for p in parts)
        cursor = _adbc(connection).cursor()
        try:
            return cursor.adbc_execute_schema(f"SELECT * FROM {name}")
        except self.loaded_dbapi.Error as exc:
            if exc.status_code == AdbcStatusCode.NOT_FOUND:
                return None
            raise
        finally:
            cursor.close()

    def get_columns(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[dict[str, Any]]:
        schema = schema or self.default_schema_name
        if SELECTOR in table_name:
            arrow = self._selected_schema(connection, table_name, schema)
            if arrow is None:
                from sqlalchemy.exc import NoSuchTableError

                raise NoSuchTableError(f"{schema}.{table_name}" if schema else table_name)
            return _columns(arrow)
        try:
            arrow = _adbc(connection).adbc_get_table_schema(
                table_name, catalog_filter=self._warehouse(connection), db_schema_filter=schema
            )
        except Exception as exc:
            from sqlalchemy.exc import NoSuchTableError

            raise NoSuchTableError(f"{schema}.{table_name}" if schema else table_name) from exc
        return _columns(arrow)

    def get_pk_constraint(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[Any]:
        return []

    def get_indexes(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[Any]:
        return []

    def get_unique_constraints(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[Any]:
        return []

    def get_check_constraints(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[Any]:
        return []

    def get_table_comment(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        return {"text": None}


def _columns(arrow: Any) -> list[dict[str, Any]]:
    """SQLAlchemy's column records of an Arrow schema."""
    return [
        {
            "name": f.name,
            "type": sqlalchemy_type(f.type),
            "nullable": f.nullable,
            "default": None,
            "autoincrement": False,
        }
        for f in arrow
    ]


def _adbc(connection: Any) -> Any:
    """The ADBC DB-API connection under a SQLAlchemy ``Connection``."""
    return connection.connection.dbapi_connection


def set_session_defaults(dbapi: Any, connection: Any, catalog: str | None, schema: str | None) -> None:
    """Make ``catalog`` and then ``schema`` (where given) the ADBC ``connection``'s session
    defaults, each read back and set again while it did not hold: the driver's cookie middleware
    now and then loses a SetSessionOptions answer's cookie (a race in arrow-go: 4 times in 1,500
    connects on a loaded machine). ``dbapi``: the driver's DB-API module, for its errors; a name
    the endpoint refuses raises its error at once."""
    for attribute, value in (("adbc_current_catalog", catalog), ("adbc_current_db_schema", schema)):
        if not value:
            continue
        for _ in range(SESSION_ATTEMPTS):
            setattr(connection, attribute, value)
            try:
                if getattr(connection, attribute) == value:
                    break
            except dbapi.Error:  # unset (its cookie lost): the driver reports "not found"
                continue
        else:
            raise dbapi.OperationalError(
                f"the session default {value!r} did not hold after {SESSION_ATTEMPTS} attempts: "
                "the driver did not keep the endpoint's session cookie"
            )


dialect = LakeDialect

__all__ = [
    "LakeDialect",
    "dialect",
    "set_session_defaults",
    "sqlalchemy_type",
]  # sqlalchemy_type: re-exported

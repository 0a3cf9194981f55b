"""Read-only SQL over registered table versions, planned through a request-local catalog.

Every request gets its own DataFusion ``SessionContext`` whose catalogs are Python providers
over one tenant's part of the cached snapshot (catalog = warehouse, schema = namespace path
joined by ".", table = table). A table is resolved only when the planner asks for it, and each
resolution *captures* an immutable :class:`TableRef` (location, incarnation, version, manifest):
the plan's table versions. Executing later (DoGet, maybe on another replica) plans the same SQL
against exactly those refs and nothing else, never the registry's current pointer.

Nothing here reads the registry: the snapshot carries the registrations, the refs carry the
manifests, and :class:`PinnedNamespace` answers Lance from them.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions
from datafusion.catalog import CatalogProvider, SchemaProvider, Table

from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    Internal,
    InvalidInput,
    LakeError,
    ServiceUnavailable,
    TableNotFound,
    TableVersionNotFound,
    Throttling,
)
from lake_platform.naming import SEGMENT
from lake_platform.query.namespace import PinnedNamespace
from lake_platform.query.snapshot import ProjectView, TableRef
from lake_platform.query.sql import check_query, qualify_nested, rewrite_placeholders
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

#: Plan roots a reader may execute (checked after DataFusion's own SQLOptions).
_ALLOWED_ROOTS = frozenset({
    "Projection", "Filter", "Window", "Aggregate", "Sort", "Join", "Repartition", "Union", "TableScan",
    "EmptyRelation", "SubqueryAlias", "Limit", "Values", "Explain", "Analyze", "Distinct", "Unnest",
    "RecursiveQuery", "Subquery",
})
_READ_ONLY = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)


@dataclass(frozen=True)
class QueryLimits:
    memory_limit_bytes: int = 1 << 30
    spill_dir: Path | None = None
    batch_size: int = 8192
    target_partitions: int = 0
    max_sql_bytes: int = 256 * 1024
    max_message_bytes: int = 8 << 20
    dataset_cache_size: int = 256


@dataclass
class PlannedQuery:
    sql: str
    df: Any  # datafusion.DataFrame
    schema: pa.Schema  # what FlightInfo advertises and the stream carries, exactly
    refs: tuple[TableRef, ...]  # the captured table versions, in name order
    parameters: int


class _Resolver:
    """Resolves (warehouse, db_schema, table) for one request and records what it captured."""

    def __init__(self, engine_: QueryEngine, lookup: Callable[[str, str, str], TableRef | None],
                 schemas: Callable[[str], list[str]], tables: Callable[[str, str], list[str]]) -> None:
        self._engine = engine_
        self._lookup = lookup
        self.schema_names = schemas
        self.table_names = tables
        self.captured: dict[str, TableRef] = {}
        self.failure: LakeError | None = None

    def table(self, warehouse: str, db_schema: str, table: str) -> Any:
        try:
            ref = self._lookup(warehouse, db_schema, table)
            if ref is None:
                return None
            provider = self._engine.provider(ref)
        except LakeError as exc:
            self.failure = self.failure or exc
            return None
        self.captured[ref.name] = ref
        return Table(provider)


class _Schema(SchemaProvider):
    def __init__(self, resolver: _Resolver, warehouse: str, name: str) -> None:
        self._r, self._wh, self._name = resolver, warehouse, name

    def table_names(self) -> set[str]:
        return set(self._r.table_names(self._wh, self._name))

    def table(self, name: str) -> Table | None:
        return self._r.table(self._wh, self._name, name)

    def table_exist(self, name: str) -> bool:
        return name in self._r.table_names(self._wh, self._name)


class _Catalog(CatalogProvider):
    def __init__(self, resolver: _Resolver, warehouse: str) -> None:
        self._r, self._wh = resolver, warehouse

    def schema_names(self) -> set[str]:
        return set(self._r.schema_names(self._wh))

    def schema(self, name: str) -> _Schema | None:
        return _Schema(self._r, self._wh, name) if name in self._r.schema_names(self._wh) else None


class QueryEngine:
    """Plans and streams read-only SQL. Thread-safe; one per process."""

    def __init__(self, settings: LakeSettings, limits: QueryLimits | None = None) -> None:
        self.settings = settings
        self.limits = limits or QueryLimits()
        self._datasets: OrderedDict[tuple[str, int, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        spill = self.limits.spill_dir or settings.home / "spill"
        self._spill_dir = Path(spill).expanduser()

    # -- opening table versions ------------------------------------------------------------

    def dataset(self, ref: TableRef) -> Any:
        """The Lance dataset of exactly ``ref``'s version (cached: a version never changes)."""
        key = (ref.location, ref.version, ref.manifest_path)
        with self._lock:
            ds = self._datasets.get(key)
            if ds is not None:
                self._datasets.move_to_end(key)
                return ds
        if ref.engine != "lance":
            raise Internal(f"table {ref.name} uses engine {ref.engine!r}, which this server cannot read")
        storage = self.settings.storage_options(ref.location)
        try:
            ds = engine.open_version(namespace=PinnedNamespace(ref, storage), table_id=ref.table_name.parts,
                                     version=ref.version, storage_options=storage)
        except Exception as exc:  # noqa: BLE001
            text = str(exc).lower()
            if "not found" in text or "no such file" in text or "does not exist" in text:
                raise TableVersionNotFound(
                    f"version {ref.version} of {_sql_name(ref)} is no longer available") from None
            log.warning("cannot open %s version %s: %s", ref.name, ref.version, exc)
            raise ServiceUnavailable(f"cannot open {_sql_name(ref)} version {ref.version} right now") from None
        if self.limits.dataset_cache_size > 0:
            with self._lock:
                self._datasets[key] = ds
                while len(self._datasets) > self.limits.dataset_cache_size:
                    self._datasets.popitem(last=False)
        return ds

    def provider(self, ref: TableRef) -> Any:
        return engine.table_provider(self.dataset(ref))

    # -- planning ------------------------------------------------------------------------

    def context(self) -> SessionContext:
        self._spill_dir.mkdir(parents=True, exist_ok=True)
        runtime = (RuntimeEnvBuilder().with_fair_spill_pool(self.limits.memory_limit_bytes)
                   .with_disk_manager_specified(str(self._spill_dir)))
        config = (SessionConfig().with_batch_size(self.limits.batch_size).with_information_schema(False)
                  .with_create_default_catalog_and_schema(True))
        if self.limits.target_partitions:
            config = config.with_target_partitions(self.limits.target_partitions)
        return SessionContext(config, runtime)

    def plan(self, sql: str, view: ProjectView, params: pa.RecordBatch | None = None, *,
             prepare: bool = False) -> PlannedQuery:
        """Plan against the snapshot's current versions, capturing each table it reads.

        ``prepare``: parameters may stay unbound (a prepared statement's first planning)."""

        def lookup(wh: str, ns: str, table: str) -> TableRef | None:
            cached = view.table(wh, ns, table)
            if cached is None:
                return None
            if cached.ref is None:
                raise ServiceUnavailable(f"table {wh}.{ns}.{table} is being registered; retry shortly")
            return cached.ref

        resolver = _Resolver(self, lookup, view.namespaces_of, view.tables_in)
        namespaces = set(view.namespaces)
        return self._plan(sql, list(view.warehouses), resolver, params, prepare,
                          lambda wh, ns: (wh, ns) in namespaces)

    def plan_pinned(self, sql: str, refs: tuple[TableRef, ...], params: pa.RecordBatch | None = None) -> PlannedQuery:
        """Plan against exactly ``refs`` (from a ticket): nothing else is visible."""
        by_key = {(r.table_name.warehouse, ".".join(r.table_name.namespace), r.table_name.table): r for r in refs}
        warehouses = sorted({k[0] for k in by_key})
        resolver = _Resolver(
            self, lambda wh, ns, t: by_key.get((wh, ns, t)),
            lambda wh: sorted({k[1] for k in by_key if k[0] == wh}),
            lambda wh, ns: sorted(k[2] for k in by_key if k[0] == wh and k[1] == ns),
        )
        pinned_namespaces = {(k[0], k[1]) for k in by_key}
        planned = self._plan(sql, warehouses, resolver, params, False,
                             lambda wh, ns: (wh, ns) in pinned_namespaces)
        if set(planned.refs) != set(refs):
            raise InvalidInput("the ticket's pinned tables do not match its query")
        return planned

    def _plan(self, sql: str, warehouses: list[str], resolver: _Resolver, params: pa.RecordBatch | None,
              prepare: bool, is_namespace: Callable[[str, str], bool]) -> PlannedQuery:
        check_query(sql, self.limits.max_sql_bytes)
        text, count = rewrite_placeholders(qualify_nested(sql, is_namespace))
        values = None if prepare and params is None else bind_values(params, count)
        ctx = self.context()
        for wh in warehouses:
            ctx.register_catalog_provider(wh, _Catalog(resolver, wh))
        try:
            df = ctx.sql_with_options(text, _READ_ONLY, param_values=values) if values else \
                ctx.sql_with_options(text, _READ_ONLY)
            root = type(df.logical_plan().to_variant()).__name__
        except LakeError:
            raise
        except RecursionError:
            raise InvalidInput("the query is nested too deeply") from None
        except Exception as exc:  # noqa: BLE001 - DataFusion reports every planning problem this way
            if resolver.failure is not None:
                raise resolver.failure from None
            raise planning_error(exc) from None
        if resolver.failure is not None:
            raise resolver.failure
        if root not in _ALLOWED_ROOTS:
            raise InvalidInput(f"only read-only queries are allowed (this statement plans to {root})")
        schema = advertised_schema(df.schema())
        refs = tuple(sorted(resolver.captured.values(), key=lambda r: r.name))
        return PlannedQuery(sql=sql, df=df, schema=schema, refs=refs, parameters=count)

    # -- execution -----------------------------------------------------------------------

    def stream(self, planned: PlannedQuery, cancelled: Callable[[], bool] = lambda: False) -> Iterator[pa.RecordBatch]:
        """Batches of the result, each conforming to ``planned.schema`` and small enough for
        one IPC message. Nothing is collected: one batch at a time, straight from DataFusion."""
        try:
            reader = pa.RecordBatchReader.from_stream(planned.df)
        except Exception as exc:  # noqa: BLE001
            raise execution_error(exc) from None
        conform = conformer(reader.schema, planned.schema)
        limit = self.limits.max_message_bytes
        try:
            while True:
                if cancelled():
                    return
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except Exception as exc:  # noqa: BLE001
                    raise execution_error(exc) from None
                if batch.num_rows == 0:
                    continue
                yield from split_batch(conform(batch), limit)
        finally:
            reader.close()


# == helpers ===================================================================================


def bind_values(params: pa.RecordBatch | None, count: int) -> dict[str, Any] | None:
    if params is None or params.num_columns == 0:
        if count:
            raise InvalidInput(f"the query takes {count} parameter(s) and none were bound")
        return None
    if params.num_rows != 1:
        raise InvalidInput(f"bind exactly one row of parameters per execution (got {params.num_rows})")
    if params.num_columns != count:
        raise InvalidInput(f"the query takes {count} parameter(s), {params.num_columns} were bound")
    return {str(i + 1): params.column(i)[0] for i in range(count)}


def advertised_schema(schema: pa.Schema) -> pa.Schema:
    """The logical schema without metadata: what FlightInfo, GetSchema and DoGet all carry."""
    return pa.schema([f.remove_metadata() for f in schema])


def conformer(actual: pa.Schema, target: pa.Schema) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """Make batches of the executed plan carry exactly ``target`` (the advertised schema).

    The physical plan may disagree with the logical one on nullability (e.g. statistics turn
    MIN/MAX into non-null literals) or metadata; relabelling is zero-copy. A column the target
    declares non-null must really have no nulls, and a type difference is cast.
    """
    if actual.equals(target, check_metadata=True):
        return lambda b: b
    if len(actual) != len(target):
        raise Internal("the executed plan's columns differ from the planned ones")
    same_types = all(a.type == t.type for a, t in zip(actual, target, strict=True))
    strict = [i for i, (a, t) in enumerate(zip(actual, target, strict=True)) if a.nullable and not t.nullable]

    def conform(batch: pa.RecordBatch) -> pa.RecordBatch:
        for i in strict:
            if batch.column(i).null_count:
                raise Internal(f"column {target.field(i).name} produced nulls although the plan says it cannot")
        if same_types:
            return pa.RecordBatch.from_arrays(batch.columns, schema=target)
        return pa.RecordBatch.from_arrays(
            [c if c.type == t.type else c.cast(t.type) for c, t in zip(batch.columns, target, strict=True)],
            schema=target)

    return conform


def split_batch(batch: pa.RecordBatch, limit: int) -> Iterator[pa.RecordBatch]:
    size = batch.nbytes
    if size <= limit or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, batch.num_rows * limit // size)
    for start in range(0, batch.num_rows, rows):
        piece = batch.slice(start, rows)
        if piece.nbytes > limit and piece.num_rows > 1:
            yield from split_batch(piece, limit)
        else:
            yield piece


_PATHISH = re.compile(r"(?:[a-z][a-z0-9+.-]*://[^\s'\"]+)|(?:/[^\s'\"/]+){2,}/?", re.IGNORECASE)
_NOT_FOUND = re.compile(r"table '([^']+)' not found", re.IGNORECASE)


def clean_message(exc: BaseException, limit: int = 400) -> str:
    """First line of a DataFusion/Lance message, without prefixes, paths or URLs."""
    text = str(exc).strip()
    for prefix in ("DataFusion error: ", "Error during planning: ", "Execution error: ", "External error: ",
                   "SQL error: ", "Schema error: ", "This feature is not implemented: ", "Optimizer rule"):
        text = text.replace(prefix, "")
    text = text.splitlines()[0] if text else type(exc).__name__
    text = _PATHISH.sub("<path>", text)
    return text[:limit]


def planning_error(exc: BaseException) -> LakeError:
    text = str(exc)
    m = _NOT_FOUND.search(text)
    if m:
        name = m.group(1)
        if name.startswith(("datafusion.public.", "datafusion.information_schema.")):
            short = _PATHISH.sub("<path>", name.split(".", 2)[2])[:120]
            return InvalidInput(f"name tables as warehouse.namespace.table (got {short!r})")
        parts = name.split(".")
        if len(parts) < 3 or not all(SEGMENT.fullmatch(p) for p in parts):
            return InvalidInput(f"invalid table name {_PATHISH.sub('<path>', name)[:120]!r}")
        return TableNotFound(f"table {name} not found")
    if "Resources exhausted" in text:
        return Throttling(f"the query needs more memory than allowed: {clean_message(exc)}")
    return InvalidInput(clean_message(exc))


def execution_error(exc: BaseException) -> LakeError:
    if isinstance(exc, LakeError):
        return exc
    text = str(exc)
    if "Resources exhausted" in text:
        return Throttling(f"the query needs more memory than allowed: {clean_message(exc)}")
    if any(s in text for s in ("Arrow error: Divide by zero", "Cast error", "Invalid argument", "Compute error",
                               "Arithmetic overflow", "Overflow")):
        return InvalidInput(clean_message(exc))
    if "not found" in text.lower() and ("object" in text.lower() or "file" in text.lower()):
        return TableVersionNotFound("a table version this query reads is no longer available")
    log.warning("query failed: %s", exc)
    return Internal(f"the query failed: {clean_message(exc)}")


def _sql_name(ref: TableRef) -> str:
    n = ref.table_name
    return f"{n.warehouse}.{'.'.join(n.namespace)}.{n.table}"


__all__ = ["PlannedQuery", "QueryEngine", "QueryLimits"]

"""Planning read-only SQL through a request-local DataFusion catalog that captures what it reads.

Every request plans in a (pooled, see ``sessions``) ``SessionContext`` whose catalogs, for the
length of the planning, are Python providers over one tenant's part of the cached snapshot
(catalog = warehouse, schema = namespace path joined by ".", table = table). A table is
resolved only when the planner asks for it, once per name and request (a self-join or a
repeated reference gets the same snapshot), and each resolution *captures* an immutable
:class:`TableRef`: the plan's table versions. CTE names never reach the catalog. Planning a
ticket's SQL again sees exactly the refs it pins and nothing else.

When names the snapshot misses are read from the registry (``snapshot_miss``), a warehouse or
namespace the snapshot does not know is resolved too (its listings stay the snapshot's; the
providers: ``catalogs``), so a table created in one since the last refresh goes through the
same one read as any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from datafusion import SessionContext, SQLOptions
from datafusion.catalog import CatalogProvider, Table

from lake_platform.errors import (
    InvalidInput,
    LakeError,
    ServiceUnavailable,
    TableBranchNotFound,
    TableNotFound,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.query import columns, defaults, timetravel
from lake_platform.query.batches import advertised_schema
from lake_platform.query.catalogs import Warehouses
from lake_platform.query.errors import planning_error, timed_out
from lake_platform.query.facts import PlanFacts
from lake_platform.query.limits import QueryLimits
from lake_platform.query.relations import check_relations
from lake_platform.query.snapshot import CachedTable, ProjectView, TableRef
from lake_platform.query.sql import check_query, qualify_nested, rewrite_placeholders
from lake_platform.query.value_bounds import check_values
from lake_platform.query.volatility import is_deterministic

if TYPE_CHECKING:
    from lake_platform.query.branch_refs import BranchRefs
    from lake_platform.query.lookup import Lookup
    from lake_platform.query.snapshot_miss import SnapshotMisses

#: Plan roots a reader may execute (checked after DataFusion's own SQLOptions).
ALLOWED_ROOTS = frozenset(
    {
        "Projection",
        "Filter",
        "Window",
        "Aggregate",
        "Sort",
        "Join",
        "Repartition",
        "Union",
        "TableScan",
        "EmptyRelation",
        "SubqueryAlias",
        "Limit",
        "Values",
        "Explain",
        "Analyze",
        "Distinct",
        "Unnest",
        "RecursiveQuery",
        "Subquery",
    }
)
READ_ONLY = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
_PLANNING = "planning the query"

#: Opens exactly one snapshot as a DataFusion table (``verify``: re-check a cached one exists;
#: the third argument: the table's ``cache`` policy when planned from the catalog, else None).
OpenTable = Callable[[TableRef, bool, str | None], Table]


@dataclass(frozen=True, eq=False)
class PlannedQuery:
    """One statement planned against exact snapshots. Immutable, and equal only to itself: a
    layer that works something out per plan keeps it in a memo of its own, keyed by the plan
    (weakly, so the memo never outlives it)."""

    sql: str
    df: Any  # datafusion.DataFrame
    schema: pa.Schema  # what FlightInfo advertises and the stream carries, exactly
    refs: tuple[TableRef, ...]  # the captured table versions, in written-name order
    parameters: int
    facts: PlanFacts  # what its structure says (order, point query, row-wise, table rows)
    lookups: int = 0  # catalog lookups planning made (one per distinct table name)
    cached: bool = False  # it reads a snapshot from the snapshot cache (in-memory batches)
    #: it calls no clock or random function (``volatility``): only such a plan is kept for a
    #: later request, and only its result may be reused
    deterministic: bool = True
    #: the parameters bound when it was planned (None: none), part of its result's key
    params: pa.RecordBatch | None = field(default=None, repr=False)
    #: the snapshot cache's generation when it was planned: a kept plan is reused only while
    #: the cache has loaded and evicted nothing since (``QueryEngine``)
    cache_generation: tuple[int, int] = (0, 0)
    #: it reads one part of a split result (``split``): never a lookup, never a kept result
    part: bool = False
    #: how Lance's scanner answers it from a scalar index (``lookup``); None: DataFusion runs it
    lookup: Lookup | None = None


def deadline(limits: QueryLimits) -> float | None:
    """The monotonic time by which work started now must end (None: no limit)."""
    timeout = limits.query_timeout_seconds
    return time.monotonic() + timeout if timeout else None


def check_deadline(limits: QueryLimits, at: float | None, doing: str = "the query") -> None:
    """QueryTimeout (DEADLINE_EXCEEDED) once ``at`` has passed."""
    if at is not None and time.monotonic() >= at:
        raise timed_out(limits, doing)


class Resolver:
    """Resolves (warehouse, db_schema, table) for one request and records what it captured.

    Each name is looked up once per request: DataFusion asking again (or a self-join) gets the
    same provider, so one query can never see two versions of a table."""

    def __init__(
        self,
        open_table: OpenTable,
        limits: QueryLimits,
        lookup: Callable[[str, str, str], TableRef | None],
        schemas: Callable[[str], list[str]],
        tables: Callable[[str, str], list[str]],
        *,
        verify: bool = False,
    ) -> None:
        self._open = open_table
        self._limits = limits
        self._lookup = lookup
        self._verify = verify
        self.deadline = deadline(limits)
        self.schema_names = schemas
        self.table_names = tables
        self.captured: dict[str, TableRef] = {}
        #: written name -> the table's cache policy (planning from the catalog only)
        self.cache_modes: dict[str, str] = {}
        self.missing: list[str] = []
        self.lookups = 0
        self._resolved: dict[tuple[str, str, str], Any] = {}
        self.failure: LakeError | None = None
        #: Whether a warehouse or namespace the snapshot does not list is looked in too (the
        #: lookup reads what the snapshot misses from the registry).
        self.open_ended = False

    @classmethod
    def over_view(
        cls,
        open_table: OpenTable,
        limits: QueryLimits,
        view: ProjectView,
        branches: BranchRefs | None = None,
        misses: SnapshotMisses | None = None,
    ) -> Resolver:
        """Resolve against the snapshot's current versions (branches: read by ``branches``); a
        name the snapshot misses is read from the registry once by ``misses`` (``snapshot_miss``)."""

        modes: dict[str, str] = {}

        def lookup(wh: str, ns: str, table: str) -> TableRef | None:
            base, at = timetravel.split(table)
            cached = view.table(wh, ns, base)
            try:
                try:
                    ref = _resolve(cached, wh, ns, base, at)
                except (TableNotFound, TableVersionNotFound, TableTagNotFound, TableBranchNotFound):
                    cached = None if misses is None else misses.table(view, (wh, ns, base), at, cached)
                    if cached is None:
                        raise
                    ref = _resolve(cached, wh, ns, base, at)
            except TableNotFound:
                if at is not None:
                    raise
                return None  # DataFusion answers "table not found", as for any unknown name
            modes[ref.written] = cached.cache  # type: ignore[union-attr]
            return ref

        def _resolve(cached: CachedTable | None, wh: str, ns: str, base: str, at: str | None) -> TableRef:
            if cached is None:
                raise TableNotFound(f"table {wh}.{ns}.{base} not found")
            if at is not None:
                return timetravel.resolve(cached, at, branches)
            if cached.ref is None:
                raise ServiceUnavailable(f"table {wh}.{ns}.{base} is being registered; retry shortly")
            return cached.ref

        resolver = cls(open_table, limits, lookup, view.namespaces_of, view.tables_in)
        resolver.cache_modes = modes
        resolver.open_ended = misses is not None
        return resolver

    @classmethod
    def over_refs(
        cls, open_table: OpenTable, limits: QueryLimits, by_key: dict[tuple[str, str, str], TableRef]
    ) -> Resolver:
        """Resolve against exactly ``by_key`` (warehouse, namespace, table -> pinned ref)."""
        return cls(
            open_table,
            limits,
            lambda wh, ns, t: by_key.get((wh, ns, t)),
            lambda wh: sorted({k[1] for k in by_key if k[0] == wh}),
            lambda wh, ns: sorted(k[2] for k in by_key if k[0] == wh and k[1] == ns),
            verify=True,
        )

    def table(self, warehouse: str, db_schema: str, table: str) -> Any:
        key = (warehouse, db_schema, table)
        if key in self._resolved:
            return self._resolved[key]
        self.lookups += 1
        resolved = None
        try:
            # Opening a table is planning's slow part (storage round trips): the time limit is
            # checked before each one, as DataFusion's planner itself cannot be interrupted.
            if self.failure is not None:
                raise self.failure
            check_deadline(self._limits, self.deadline, _PLANNING)
            ref = self._lookup(warehouse, db_schema, table)
            if ref is None:
                self.missing.append(".".join(key))
            else:
                # An older version may have been cleaned up since this process opened it: check
                # (a stat) before planning on it, as DoGet does for every pinned ref.
                resolved = self._open(
                    ref, self._verify or ref.at is not None, self.cache_modes.get(ref.written)
                )
                self.captured[ref.written] = ref
        except LakeError as exc:
            self.failure = self.failure or exc
        self._resolved[key] = resolved
        return resolved


def pinned_keys(
    refs: tuple[TableRef, ...], is_dropped: Callable[[str], bool] | None
) -> dict[tuple[str, str, str], TableRef]:
    """A ticket's refs by (warehouse, namespace, table); TableVersionNotFound if one is known
    dropped (``is_dropped``, from the process's cached catalog)."""
    for ref in refs:
        if is_dropped is not None and is_dropped(ref.incarnation):
            raise TableVersionNotFound(
                f"table {ref.name} was dropped after this query was planned; the version it was planned "
                f"on (version {ref.version}) is no longer available"
            )
    return {(r.table_name.warehouse, ".".join(r.table_name.namespace), _written_table(r)): r for r in refs}


def _written_table(ref: TableRef) -> str:
    """The table part as the query wrote it (``t``, or ``t@v12`` for a time-travel ref)."""
    table = ref.table_name.table
    return table if ref.at is None else f"{table}{timetravel.SEPARATOR}{ref.at}"


#: A context whose catalogs are exactly the given ones for the length of a ``with`` block.
Session = Callable[[Mapping[str, CatalogProvider]], AbstractContextManager[SessionContext]]


def plan_in(
    session: Session,
    sql: str,
    warehouses: list[str],
    resolver: Resolver,
    limits: QueryLimits,
    params: pa.RecordBatch | None,
    prepare: bool,
    is_namespace: Callable[[str, str], bool],
) -> PlannedQuery:
    """Plan ``sql`` in a ``session`` whose catalogs are one per warehouse, all resolving through
    ``resolver`` (and nothing else: no other request's catalogs).

    ``prepare``: parameters may stay unbound (a prepared statement's first planning)."""
    check_query(sql, limits.max_sql_bytes)
    text, count = rewrite_placeholders(qualify_nested(sql, is_namespace))
    values = None if prepare and params is None else bind_values(params, count)
    # A session's default catalog and schema ride in the text (``defaults``).
    named = defaults.defaults_of(sql)
    try:
        with (
            session(Warehouses(resolver, warehouses)) as ctx,
            defaults.applied(ctx, named),
        ):
            df = (
                ctx.sql_with_options(text, READ_ONLY, param_values=values)
                if values
                else ctx.sql_with_options(text, READ_ONLY)
            )
        root = type(df.logical_plan().to_variant()).__name__
    except LakeError:
        raise
    except RecursionError:
        raise InvalidInput("the query is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - DataFusion reports every planning problem this way
        if resolver.failure is not None:
            raise resolver.failure from None
        implicit = defaults.implicit(str(exc), named, warehouses)
        if implicit:  # a shorter name in a one-warehouse project: plan it there, saying so
            text_with = defaults.with_defaults(sql, implicit)
            return plan_in(session, text_with, warehouses, resolver, limits, params, prepare, is_namespace)
        raise defaults.not_found(planning_error(exc, limits), named) from None
    if resolver.failure is not None:
        raise resolver.failure
    # Before anything optimizes the plan: the optimizer cannot be stopped (``relations``).
    check_relations(df, limits)
    # Before anything optimizes the plan: the optimizer folds a call of literals by running it.
    check_values(sql, df, limits)
    # Planning that overran answers DEADLINE_EXCEEDED rather than a ticket or a schema.
    check_deadline(limits, resolver.deadline, _PLANNING)
    if root not in ALLOWED_ROOTS:
        raise InvalidInput(f"only read-only queries are allowed (this statement plans to {root})")
    # Typed for SQL clients: Flight SQL's column metadata, with each column's table (``columns``).
    schema = columns.typed_schema(
        advertised_schema(df.schema()), columns.origins(df, named.catalog, named.schema)
    )
    refs = tuple(sorted(resolver.captured.values(), key=lambda r: r.written))
    return PlannedQuery(
        sql=sql,
        df=df,
        schema=schema,
        refs=refs,
        parameters=count,
        facts=PlanFacts(df),
        lookups=resolver.lookups,
        deterministic=is_deterministic(sql),
        params=params,
    )


def plan_pinned_in(
    session: Session,
    sql: str,
    resolver: Resolver,
    limits: QueryLimits,
    refs: tuple[TableRef, ...],
    by_key: dict[tuple[str, str, str], TableRef],
    params: pa.RecordBatch | None,
) -> PlannedQuery:
    """Plan a ticket's SQL against exactly its pinned ``refs`` (``by_key``: them by name); it
    must read exactly those."""
    namespaces = {(k[0], k[1]) for k in by_key}
    try:
        planned = plan_in(
            session,
            sql,
            sorted({k[0] for k in by_key}),
            resolver,
            limits,
            params,
            False,
            lambda wh, ns: (wh, ns) in namespaces,
        )
    except TableNotFound:
        if resolver.missing:
            raise InvalidInput("the ticket's query reads a table it does not pin") from None
        raise
    if set(planned.refs) != set(refs):
        raise InvalidInput("the ticket's pinned tables do not match its query")
    return planned


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


__all__ = [
    "ALLOWED_ROOTS",
    "READ_ONLY",
    "PlannedQuery",
    "Resolver",
    "bind_values",
    "check_deadline",
    "deadline",
    "pinned_keys",
    "plan_in",
    "plan_pinned_in",
]

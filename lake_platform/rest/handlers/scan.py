"""QueryTable's scan, built with DataFusion's DataFrame API over the one table it names: the
``filter`` is parsed by DataFusion as one SQL expression over that table's columns, never
spliced into SQL text, so it can neither read another table nor drop the row limit ``k``.

The table itself is planned as the query engine plans SQL (``SELECT * FROM <table>``, or
``<table>@v<n>`` for a ``version``: the catalog snapshot, tenant scoping and limits of Flight
SQL); the filter, the columns and the limit are then applied to that plan's frame, inside the
engine's choice of access path (``QueryEngine.access``), so that choice sees the filter: a key
filter (``id = 5``, ``id IN (...)``) on a column with a scalar index reads Lance's index, never
the snapshot cache's batches, and an ``AND`` of ``column = literal`` terms, one of them on an
indexed column, without ``k`` or ``offset`` is answered by Lance's scanner directly
(``query.lookup``), as Flight SQL answers the same lookup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from datafusion import Expr
from datafusion.common import RexType

from lake_platform.errors import InvalidInput, TableVersionNotFound
from lake_platform.naming import TableName
from lake_platform.query import planner
from lake_platform.query.batches import advertised_schema
from lake_platform.query.engine import QueryEngine
from lake_platform.query.facts import PlanFacts
from lake_platform.query.limits import QueryLimits
from lake_platform.query.lookup import lookup_of_filter
from lake_platform.query.planner import OpenTable, PlannedQuery, Resolver
from lake_platform.query.snapshot import ProjectView
from lake_platform.query.sql import check_depth
from lake_platform.query.timetravel import SEPARATOR
from lake_platform.query.value_bounds import check_values
from lake_platform.query.volatility import is_deterministic
from lake_platform.rest.handlers.field_paths import projection

#: Expression kinds a filter may not contain: each needs more than one row of this table (an
#: aggregate, a window), another query (a subquery), or a value bound elsewhere (a placeholder).
REFUSED_KINDS = {
    "AggregateFunction": "an aggregate function",
    "WindowFunction": "a window function",
    "ScalarSubquery": "a subquery",
    "InSubquery": "a subquery",
    "Exists": "a subquery",
    "SetComparison": "a subquery",
    "OuterReferenceColumn": "a reference to an outer query",
    "Placeholder": "a parameter placeholder",
    "Wildcard": "a wildcard",
    "GroupingSet": "a grouping set",
    "Unnest": "unnest",
}
#: Nodes a filter may have, at most: a bound on the work a single request can ask the walk for.
MAX_FILTER_NODES = 10_000
#: The largest ``k`` or ``offset``: Lance adds the two as a signed 64-bit count, so each stays
#: under half of that. Also the count of an offset without ``k`` (``DataFrame.limit`` needs one).
MAX_ROWS = (1 << 62) - 1


#: The largest version a time-travel name holds (``t@v<n>``: up to 18 digits); no table reaches it.
MAX_VERSION = 10**18 - 1


def check_version(table: TableName, version: int | None, branch: str | None = None) -> None:
    """TableVersionNotFound for a version past :data:`MAX_VERSION`: no such version exists, and
    the time-travel name it would make could not be parsed (a 400 about a name the client never
    wrote). Called once the table is known to exist, so it answers as any missing version does."""
    if version is not None and version > MAX_VERSION:
        on = "" if branch is None else f" on branch {branch}"
        raise TableVersionNotFound(f"version {version} of {table}{on} does not exist")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_sql(
    warehouse: str, namespace: str, table: str, version: int | None = None, branch: str | None = None
) -> str:
    """The whole table (at ``version``: time travel; of ``branch``: its head, or its
    ``version``), as the engine plans it: identifiers quoted, nothing else in the text."""
    name = table if branch is None else f"{table}{SEPARATOR}branch:{branch}"
    name = name if version is None else f"{name}{SEPARATOR}v{version}"
    return f"SELECT * FROM {_quote(warehouse)}.{_quote(namespace)}.{_quote(name)}"


def _nodes(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, depth first, without recursion (a deep filter is not a deep stack)."""
    stack = [expr]
    seen = 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_FILTER_NODES:
            raise InvalidInput(f"the filter has more than {MAX_FILTER_NODES} terms")
        yield node
        if node.rex_type() in (RexType.Call, RexType.Alias):
            try:
                stack.extend(node.rex_call_operands())
            except Exception as exc:  # noqa: BLE001 - DataFusion cannot take this kind apart
                raise InvalidInput(f"the filter may not contain {node.variant_name()}: {exc}") from None


def check_filter(expr: Expr) -> None:
    """``expr`` is made only of this table's columns, literals, operators and scalar functions."""
    for node in _nodes(expr):
        kind = node.variant_name()
        if kind in REFUSED_KINDS:
            raise InvalidInput(f"the filter may not contain {REFUSED_KINDS[kind]} ({node.canonical_name()})")
        if node.rex_type() not in (RexType.Call, RexType.Reference, RexType.Literal, RexType.Alias):
            # A subquery or anything newer DataFusion adds: not a plain expression. An alias is
            # how DataFusion names a function called by another of its names (``length`` is
            # ``character_length(x) AS length(x)``): its expression is walked like any other.
            raise InvalidInput(f"the filter may not contain {kind} ({node.canonical_name()})")


def _datafusion_error(exc: Exception) -> str:
    text = str(exc).strip()
    return text.removeprefix("DataFusion error:").strip() or type(exc).__name__


def parse_filter(df: Any, text: str, max_bytes: int) -> Expr:
    """``text`` as one SQL boolean expression over ``df``'s columns; anything else (a second
    statement, trailing tokens, a subquery, another table, an aggregate) is InvalidInput."""
    if not text.strip():
        raise InvalidInput("filter must be a SQL boolean expression")
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidInput(f"the filter is longer than {max_bytes} bytes")
    if "\x00" in text:
        raise InvalidInput("the filter contains a NUL character")
    try:
        # DataFusion parses and walks an expression recursively: a long chain of operators
        # (10,000 ORs) overflowed the thread's stack and the process died. Flight SQL's bound.
        check_depth(text)
    except InvalidInput as exc:
        raise InvalidInput(f"the filter: {exc.message}") from None
    try:
        expr = df.parse_sql_expr(text)
    except RecursionError:
        raise InvalidInput("the filter is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - DataFusion reports every parse problem this way
        raise InvalidInput(
            f"the filter is not one SQL expression over the table's columns: {_datafusion_error(exc)}"
        ) from None
    check_filter(expr)
    return expr


def _scans(plan: Any) -> int:
    count, stack = 0, [plan]
    while stack:
        node = stack.pop()
        count += type(node.to_variant()).__name__ == "TableScan"
        stack.extend(node.inputs())
    return count


def plan_scan(
    engine: QueryEngine,
    view: ProjectView,
    sql: str,
    *,
    filter_text: str | None,
    columns: list[str] | None,
    k: int | None,
    offset: int | None,
) -> PlannedQuery:
    """``sql`` (:func:`table_sql`) planned over ``view`` and :func:`shaped`, on the access path
    the engine picks for the shaped plan; a plain key lookup on an indexed column is then
    answered by Lance's scanner (the plan's ``lookup``). Not kept in the engine's plan cache:
    each request parses its own filter."""
    namespaces = set(view.namespaces)
    parsed: list[Expr] = []

    def plan(open_table: OpenTable) -> PlannedQuery:
        whole = planner.plan_in(
            engine.sessions.session,
            sql,
            list(view.warehouses),
            Resolver.over_view(open_table, engine.limits, view, engine.branches),
            engine.limits,
            None,
            False,
            lambda wh, ns: (wh, ns) in namespaces,
        )
        return shaped(
            whole,
            filter_text=filter_text,
            columns=columns,
            k=k,
            offset=offset,
            max_filter_bytes=engine.limits.max_sql_bytes,
            parsed=parsed,
            limits=engine.limits,
        )

    planned = engine.access.plan(plan)
    if planned.lookup is not None or planned.cached or not parsed or k or offset or len(planned.refs) != 1:
        return planned
    ref = planned.refs[0]
    lookup = lookup_of_filter(ref, planned.schema.names, parsed[-1], engine.dataset(ref).schema)
    if lookup is None or not lookup.keys & engine.access.indexed(ref):
        return planned
    return dataclasses.replace(planned, lookup=lookup)


def shaped(
    whole: PlannedQuery,
    *,
    filter_text: str | None,
    columns: list[str] | None,
    k: int | None,
    offset: int | None,
    max_filter_bytes: int,
    parsed: list[Expr] | None = None,
    limits: QueryLimits | None = None,
) -> PlannedQuery:
    """``whole`` (the engine's plan of the whole table) filtered, projected and limited.

    ``k``: at most this many rows (None or 0: all); ``offset``: rows skipped first. The result
    is a plan the engine streams like any other: its ``sql`` is the canonical description the
    audit trail and the result cache key use (DataFusion's rendering of the parsed filter).
    ``parsed``: gets the parsed filter."""
    df = whole.df
    description = "SELECT " + (", ".join(_quote(c) for c in columns) if columns else "*")
    description += whole.sql.removeprefix("SELECT *")
    deterministic = whole.deterministic
    try:
        if filter_text is not None:
            expr = parse_filter(df, filter_text, max_filter_bytes)
            if parsed is not None:
                parsed.append(expr)
            df = df.filter(expr)
            # Before the optimizer below folds an lpad of literals by building it.
            check_values(filter_text, df, limits or QueryLimits())
            description += f" WHERE {expr.canonical_name()}"
            deterministic = deterministic and is_deterministic(filter_text)
        if columns:
            fields = df.schema()
            df = df.select(*(projection(c, fields) for c in columns))
        if k or offset:
            df = df.limit(k or MAX_ROWS, offset or 0)
            description += f" LIMIT {k or 'ALL'} OFFSET {offset or 0}"
        schema = advertised_schema(df.schema())
        plan = df.optimized_logical_plan()
    except InvalidInput:
        raise
    except Exception as exc:  # noqa: BLE001 - a non-boolean filter, an unknown column
        raise InvalidInput(f"the query cannot be planned: {_datafusion_error(exc)}") from None
    if _scans(plan) != 1:  # what the parsed filter guarantees, checked on the plan itself
        raise InvalidInput("the filter may read only the queried table")
    return dataclasses.replace(
        whole,
        sql=description,
        df=df,
        schema=schema,
        facts=PlanFacts(df),
        deterministic=deterministic,
        lookup=None,
    )

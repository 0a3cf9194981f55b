"""Query plans and filtered counts over the pinned snapshot: ExplainTableQueryPlan,
AnalyzeTableQueryPlan, and CountTableRows with a ``predicate``.

Each is planned exactly as QueryTable plans its scan (``scan.plan_scan``: the table's registry
head, or the ``version`` asked for, read once per request; the filter parsed by DataFusion as
one expression over the table's columns, never spliced into SQL; tenant scoping and the
engine's memory pool), so a plan explained is the plan QueryTable would run. Explain answers
DataFusion's optimized logical plan and physical plan as text (a JSON string, as the reference
answers its plan); ``verbose`` adds the logical plan before optimization. Analyze runs the plan
to its end (the rows are counted, not sent) and answers the physical plan with each operator's
metrics. A plan Lance's scanner answers from a scalar index (``planned.lookup``) says so on its
first line. Counts and Analyze run within the engine's memory pool and stop at its query time
limit (checked between batches, as QueryTimeout), like QueryTable's stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from datafusion import lit

import lake_platform.rest.handlers.scan as scan
from lake_platform.errors import InvalidInput, TableNotFound
from lake_platform.query.planner import PlannedQuery, check_deadline, deadline
from lake_platform.query.snapshot_head import latest_view
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.handlers.query import ScanRequest, scan_request
from lake_platform.rest.request import RestRequest


def plan_for(request: RestRequest, asked: ScanRequest) -> PlannedQuery:
    """``asked`` planned as QueryTable plans it, over the table's head (read-your-writes)."""
    scoped(request, table=True)
    tname = asked.table
    namespace = ".".join(tname.namespace)
    service = request.service
    view = latest_view(service.snapshots, service.catalog.store, tname)
    if view.table(tname.warehouse, namespace, tname.table) is None:
        raise TableNotFound(f"table {tname} does not exist")
    scan.check_version(tname, asked.version, asked.branch)
    return scan.plan_scan(
        service.query_engine(),
        view,
        scan.table_sql(tname.warehouse, namespace, tname.table, asked.version, asked.branch),
        filter_text=asked.filter,
        columns=asked.columns,
        k=asked.k,
        offset=asked.offset,
    )


def _lookup_line(planned: PlannedQuery) -> str:
    if planned.lookup is None:
        return ""
    keys = ", ".join(sorted(planned.lookup.keys))
    return f"LanceScalarIndexLookup: keys=[{keys}], filter={planned.lookup.filter}\n"


def explain(request: RestRequest) -> Any:
    query = request.body.get("query")
    if not isinstance(query, dict):
        raise InvalidInput("query is required (the QueryTable request to explain)")
    verbose = request.body.get("verbose")
    if verbose is not None and not isinstance(verbose, bool):
        raise InvalidInput("verbose must be a boolean")
    nested = dataclasses.replace(request, body={**query, "id": request.ids})
    planned = plan_for(request, scan_request(nested))
    text = _lookup_line(planned)
    if verbose:
        text += "Logical plan:\n" + planned.df.logical_plan().display_indent() + "\n"
    # The optimized logical plan shows the filter and projection pushed into the scan, which the
    # physical plan's Lance operators (behind DataFusion's FFI) do not print.
    text += "Optimized logical plan:\n" + planned.df.optimized_logical_plan().display_indent() + "\n"
    return text + "Physical plan:\n" + planned.df.execution_plan().display_indent()


def analyze(request: RestRequest) -> Any:
    planned = plan_for(request, scan_request(request))
    rows = _drain(request, planned.df)
    lines = [_lookup_line(planned).rstrip("\n")] if planned.lookup is not None else []
    lines.append(f"AnalyzeExec: output_rows={rows}")
    stack = [(planned.df.execution_plan(), 1)]
    while stack:
        node, depth = stack.pop()
        metrics = node.metrics()
        shown = f", metrics=[{metrics}]" if metrics is not None else ""
        lines.append("  " * depth + node.display().strip() + shown)
        stack.extend((child, depth + 1) for child in reversed(node.children()))
    return "\n".join(lines) + "\n"


def count_matching(
    request: RestRequest, predicate: str, version: int | None, branch: str | None = None
) -> int:
    """Rows of the table (of ``branch``, at ``version``) for which ``predicate`` holds."""
    asked = ScanRequest(request.table_name(), None, predicate, None, None, version, branch)
    # One constant per matching row: only the predicate's columns are read.
    return _drain(request, plan_for(request, asked).df.select(lit(1).alias("one")))


def _drain(request: RestRequest, df: Any) -> int:
    """Run ``df`` to its end, counting its rows, within the engine's query time limit."""
    limits = request.service.query_engine().limits
    until = deadline(limits)
    rows = 0
    for batch in df.execute_stream():
        rows += batch.to_pyarrow().num_rows
        check_deadline(limits, until, "the count")
    return rows


HANDLERS = {
    "ExplainTableQueryPlan": explain,
    "AnalyzeTableQueryPlan": analyze,
}

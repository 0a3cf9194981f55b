"""Explain, Analyze and CountTableRows with a predicate through pylance's own RestNamespace:
planned as QueryTable plans its scan (the filter parsed, never spliced; time travel; the
table's head), refusals the spec's errors."""

from __future__ import annotations

import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import (
    AnalyzeTableQueryPlanRequest,
    CountTableRowsRequest,
    ExplainTableQueryPlanRequest,
    QueryTableRequest,
    QueryTableRequestVector,
)

from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import TP, T, append, client, problem


@pytest.fixture
def events(events: RestLake) -> RestLake:
    """Version 1: ids 1-3 (conftest's); version 2: plus 4-6 (tag ``y``)."""
    append(events, [4, 5, 6], "y")
    return events


def test_count_rows_with_a_predicate(events: RestLake) -> None:
    ns = client(events, "reader")
    assert ns.count_table_rows(CountTableRowsRequest(id=T, predicate="id > 2")).count == 4
    assert ns.count_table_rows(CountTableRowsRequest(id=T, predicate="tag = 'y' AND id < 6")).count == 2
    assert ns.count_table_rows(CountTableRowsRequest(id=T, predicate="id > 2", version=1)).count == 1
    assert ns.count_table_rows(CountTableRowsRequest(id=T)).count == 6


def test_a_predicate_is_one_expression_over_the_table(events: RestLake) -> None:
    path = f"/v1/table/{TP}/count_rows"
    for bad in [
        "1=1) UNION SELECT 1 --",
        "id > 1; DROP TABLE x",
        "nope > 1",
        "count(*) > 1",
        "id IN (SELECT 1)",
        " ",
    ]:
        assert problem(events.post(path, {"predicate": bad}, who="reader")) == (400, 13), bad
    assert problem(events.post(path, {"predicate": "id > 1", "version": 9}, who="reader"))[0] == 404
    assert problem(events.post(path, {"predicate": "id > 1"}, who="other")) == (404, 4)
    assert events.post(path, {"predicate": "id > 1"}, who="reader").text == "5"


def test_explain_is_the_plan_query_table_would_run(events: RestLake) -> None:
    query = QueryTableRequest(k=2, vector=QueryTableRequestVector(), filter="id > 4", columns=None)
    text = client(events, "reader").explain_table_query_plan(ExplainTableQueryPlanRequest(id=T, query=query))
    assert isinstance(text, str) and "id > Int64(4)" in text and "fetch=2" in text
    assert "Physical plan:" in text and "Exec" in text  # DataFusion's physical operators
    verbose = client(events, "reader").explain_table_query_plan(
        ExplainTableQueryPlanRequest(id=T, query=query, verbose=True)
    )
    assert "Logical plan:" in verbose and "Logical plan:" not in text
    resp = events.post(f"/v1/table/{TP}/explain_plan", {"query": {"filter": "id > 1) OR (1=1"}}, who="reader")
    assert problem(resp) == (400, 13)
    assert problem(events.post(f"/v1/table/{TP}/explain_plan", {}, who="reader")) == (400, 13)


def test_analyze_runs_the_plan_and_reports_its_metrics(events: RestLake) -> None:
    text = client(events, "reader").analyze_table_query_plan(
        AnalyzeTableQueryPlanRequest(id=T, k=10, vector=QueryTableRequestVector(), filter="id > 4")
    )
    assert text.startswith("AnalyzeExec: output_rows=2\n")
    assert "output_rows{partition=0}=2" in text.split("\n", 1)[1]  # operators' metrics
    with pytest.raises(ns_errors.TableNotFoundError):
        client(events, "reader").analyze_table_query_plan(
            AnalyzeTableQueryPlanRequest(
                id=["p", "w", "ns", "missing"], k=1, vector=QueryTableRequestVector()
            )
        )

"""The query layer stands on its own: it imports nothing from the Flight layer, knows none of its
setting names, and names a limit in an error by the label its configurer gave it."""

from __future__ import annotations

import ast
from pathlib import Path

import lake_platform.query
from lake_platform.errors import Throttling
from lake_platform.query.errors import execution_error, timed_out, too_large
from lake_platform.query.limits import QueryLimits

QUERY = Path(lake_platform.query.__file__).parent


def test_query_imports_nothing_from_flight_and_knows_no_flight_setting() -> None:
    offenders = []
    for path in sorted(QUERY.glob("*.py")):
        text = path.read_text()
        if "LAKE_FLIGHT" in text:
            offenders.append(f"{path.name} names a LAKE_FLIGHT_ setting")
        for node in ast.walk(ast.parse(text)):  # every import, under TYPE_CHECKING or in a function too
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [f"{path.name} imports {n}" for n in names if n.startswith("lake_platform.flight")]
    assert len(list(QUERY.glob("*.py"))) > 5 and offenders == []


def test_a_limit_is_named_by_its_label_or_else_its_field() -> None:
    labelled = QueryLimits(
        max_result_bytes=10,
        query_timeout_seconds=2.5,
        memory_limit_bytes=1 << 24,
        labels={
            "max_result_bytes": "RESULT_CAP",
            "query_timeout_seconds": "TIME_CAP",
            "memory_limit_bytes": "POOL",
        },
    )
    assert (
        too_large(labelled).message
        == "the result is larger than RESULT_CAP=10; narrow the query or add a LIMIT"
    )
    assert timed_out(labelled).message == "the query ran longer than TIME_CAP=2.5 and was stopped"
    assert timed_out(labelled, "planning the query").message.startswith(
        "planning the query took longer than TIME_CAP"
    )
    oom = execution_error(RuntimeError("Resources exhausted: Failed to allocate"), labelled)
    assert isinstance(oom, Throttling)
    assert "POOL=16777216 allows" in oom.message
    assert too_large(QueryLimits(max_result_bytes=7)).message.startswith(
        "the result is larger than max_result_bytes=7;"
    )
    assert (
        timed_out(QueryLimits()).message
        == "the query ran longer than query_timeout_seconds=300 and was stopped"
    )

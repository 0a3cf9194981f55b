"""Which queries give the same rows on every run over the same snapshots (``query.volatility``)."""

from __future__ import annotations

import pytest

from lake_platform.query.volatility import is_deterministic, nondeterministic_functions


def test_the_names_are_datafusions_own_including_aliases() -> None:
    names = nondeterministic_functions()
    assert {"now", "current_timestamp", "current_date", "current_time", "today", "random", "uuid"} <= names
    assert "abs" not in names and "count" not in names


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT now()",
        "SELECT count(*) FROM t WHERE ts > NOW() - INTERVAL '1 hour'",
        "SELECT CURRENT_TIMESTAMP",
        "SELECT current_date",
        "SELECT today()",
        "SELECT random() AS r FROM t",
        "SELECT uuid()",
        "SELECT x FROM t WHERE s = 'now'",  # a false alarm costs only the kept plan
    ],
)
def test_a_query_naming_a_clock_or_random_function_is_not_deterministic(sql: str) -> None:
    assert not is_deterministic(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, count(*) FROM w.ns.t GROUP BY k",
        "SELECT snow, known, now_ms, my_random FROM t",  # the names only as parts of other words
        "SELECT date_trunc('day', ts) FROM t",
    ],
)
def test_other_queries_are_deterministic(sql: str) -> None:
    assert is_deterministic(sql)

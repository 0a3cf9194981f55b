"""``repeat`` under a cap (issue 44, row 3): DataFusion's answers below it, a typed refusal
above it, whatever the count (negative, NULL, near 2**63)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionContext

from lake_platform.query.capped import capped_functions
from lake_platform.query.errors import ValueTooLarge, execution_error
from lake_platform.query.limits import QueryLimits

CAP = 1 << 20
ROWS = pa.record_batch(
    {
        "s": pa.array(["ab", None, "c", "", "é"]),
        "n": pa.array([2, 3, -1, 5, None], pa.int64()),
    }
)
QUERIES = (
    "SELECT repeat(s, n) AS r FROM t",
    "SELECT repeat(s, 3) AS r FROM t",
    "SELECT repeat('xy', n) AS r FROM t",
    "SELECT repeat(arrow_cast(s, 'LargeUtf8'), 2) AS r FROM t",
    "SELECT repeat(arrow_cast(s, 'Utf8View'), 2) AS r FROM t",
    "SELECT repeat('x', 0) AS r",
)


def context(capped: bool) -> SessionContext:
    ctx = SessionContext()
    if capped:
        for function in capped_functions(CAP):
            ctx.register_udf(function)
    ctx.register_record_batches("t", [[ROWS]])
    return ctx


@pytest.mark.parametrize("sql", QUERIES)
def test_below_the_cap_repeat_answers_what_datafusion_answers(sql: str) -> None:
    ours = context(capped=True).sql(sql).to_arrow_table().column("r").to_pylist()
    theirs = context(capped=False).sql(sql).to_arrow_table().column("r").to_pylist()
    assert ours == theirs


@pytest.mark.parametrize(
    ("sql", "built"),
    [
        ("SELECT repeat('x', 2000000000) AS r", "2000000000 bytes"),
        ("SELECT repeat(s, 400000) AS r FROM t", "2000000 bytes"),  # each value fits, the batch does not
    ],
)
def test_past_the_cap_repeat_is_refused_naming_the_setting(sql: str, built: str) -> None:
    with pytest.raises(Exception) as raised:
        context(capped=True).sql(sql).to_arrow_table()
    limits = QueryLimits(max_value_bytes=CAP, labels={"max_value_bytes": "LAKE_FLIGHT_MAX_VALUE_BYTES"})
    error = execution_error(raised.value, limits)
    assert isinstance(error, ValueTooLarge)
    assert f"repeat would build {built} in one batch, more than LAKE_FLIGHT_MAX_VALUE_BYTES={CAP}" in str(
        error
    )


def test_a_count_that_would_overflow_is_refused_not_wrapped() -> None:
    with pytest.raises(Exception, match="overflow") as raised:
        context(capped=True).sql("SELECT repeat('xyz', 9223372036854775807) AS r").to_arrow_table()
    assert not isinstance(execution_error(raised.value), ValueTooLarge)  # InvalidInput: overflow

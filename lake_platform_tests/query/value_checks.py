"""What the value tests (``test_value_*``) share: a table ``t`` of 20 rows (``x`` 1 to 20, ``s``
its text), the limits they check under, and ``check_values`` asked to refuse a query or to let it
run."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.query.capped import capped_functions
from lake_platform.query.errors import ValueTooLarge
from lake_platform.query.limits import QueryLimits
from lake_platform.query.value_bounds import check_values

LIMITS = QueryLimits(labels={"max_value_bytes": "LAKE_FLIGHT_MAX_VALUE_BYTES"})


def table_context(*, capped: bool = False) -> SessionContext:
    """A session holding ``t``; ``capped``: with the endpoint's capped functions registered."""
    ctx = SessionContext()
    if capped:
        for function in capped_functions(LIMITS.max_value_bytes):
            ctx.register_udf(function)
    ctx.sql("CREATE TABLE t AS SELECT value AS x, CAST(value AS VARCHAR) s FROM range(1, 21)").collect()
    return ctx


def encoded(levels: int, inner: str = "s") -> str:
    """``inner`` hex-encoded ``levels`` times: twice its bytes a level."""
    for _ in range(levels):
        inner = f"encode({inner}, 'hex')"
    return inner


def refused(ctx: SessionContext, sql: str, refusal: str) -> str:
    """The message of the ValueTooLarge ``check_values`` must raise for ``sql`` at planning,
    matching ``refusal`` (the test fails when it answers or says something else)."""
    with pytest.raises(ValueTooLarge, match=refusal) as raised:
        check_values(sql, ctx.sql(sql), LIMITS)
    return str(raised.value)


def rows_answered(ctx: SessionContext, sql: str) -> int:
    """How many rows ``sql`` answers, once ``check_values`` let it through."""
    check_values(sql, ctx.sql(sql), LIMITS)
    return ctx.sql(sql).to_arrow_table().num_rows

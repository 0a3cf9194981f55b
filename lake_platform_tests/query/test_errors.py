"""DataFusion's failures as the client reads them: typed, and saying what was wrong."""

from __future__ import annotations

import datafusion
import pyarrow as pa
import pytest

from lake_platform.errors import InvalidInput
from lake_platform.query.errors import clean_message, execution_error, planning_error


def _datafusion_failure(sql: str, **params: object) -> Exception:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"id": pa.array([1, 2], pa.int64())})]])
    with pytest.raises(Exception) as raised:  # noqa: PT011 - DataFusion raises one type for all
        ctx.sql(sql, param_values=params or None).collect()
    return raised.value


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT CAST('abc' AS BIGINT)", {}),
        ("SELECT * FROM t WHERE id < $1", {"1": "abc"}),  # a bound value of the wrong type
    ],
)
def test_a_failed_optimizer_rule_is_reported_by_its_cause(sql: str, params: dict[str, object]) -> None:
    exc = _datafusion_failure(sql, **params)
    assert "caused by" in str(exc)  # DataFusion wraps the cast error in the rule's failure
    for error in (planning_error(exc), execution_error(exc)):
        assert isinstance(error, InvalidInput)
        assert "Cannot cast string 'abc' to value of Int64 type" in error.message
        assert "simplify_expressions" not in error.message


def test_a_message_without_a_cause_keeps_its_first_line() -> None:
    exc = _datafusion_failure("SELECT 1/0")
    assert clean_message(exc) == "Arrow error: Divide by zero error"


@pytest.mark.parametrize(
    "value", [pa.scalar([1, 2]), pa.scalar({"a": 1}), pa.scalar(1, pa.timestamp("ns"))], ids=str
)
def test_a_bound_value_no_comparison_takes_is_bad_input_not_internal(value: pa.Scalar) -> None:
    # DataFusion binds parameters when the plan runs, so its type check fails at execution.
    exc = _datafusion_failure("SELECT * FROM t WHERE id = $1", **{"1": value})
    error = execution_error(exc)
    assert isinstance(error, InvalidInput)
    assert error.message.startswith("Cannot infer common argument type for comparison operation Int64 = ")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT", "syntax error: Expected: an expression, found: EOF"),
        ("SELECT 'a", "syntax error: Unterminated string literal at Line: 1, Column: 8"),
        ('SELECT "x', "syntax error: Expected close delimiter '\"' before EOF. at Line: 1, Column: 8"),
    ],
)
def test_a_syntax_error_reads_as_one_not_as_the_parsers_debug_form(sql: str, message: str) -> None:
    exc = _datafusion_failure(sql)
    assert planning_error(exc).message == message


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT to_timestamp(s) FROM t", "Error parsing timestamp from 'x'"),
        ("SELECT to_date(s) FROM t", "Date32"),
        ("SELECT regexp_replace('a', s || '[', 'b') FROM t", "regex parse error"),
        ("SELECT make_date(2020, id + 12, 1) FROM t", "Month value '13' is out of range"),
        # each answered 500 to a REST QueryTable filter or a Flight query
        ("SELECT split_part(s, 'x', id - 1) FROM t", "field position must not be zero"),
        ("SELECT chr(id - 2) FROM t", "invalid Unicode scalar value: -1"),
        ("SELECT overlay(s placing 'y' from id - 9223372036854775807 - 2) FROM t", "negative substring"),
        ("SELECT array_slice(make_array(id), id - 9223372036854775807 - 2, 1) FROM t", "invalid index"),
        ("SELECT array_element(make_array(id), id - 9223372036854775807 - 2) FROM t", "invalid index"),
        ("SELECT date_bin(INTERVAL '0 seconds', to_timestamp(id)) FROM t", "stride must be non-zero"),
        ("SELECT range(1, 10, id - 1) FROM t", "step can't be 0"),
        ("SELECT generate_series(1, 10, id - 1) FROM t", "step can't be 0"),
        ("SELECT array_resize(make_array(id), id - 2) FROM t", "array_resize"),
        ("SELECT decode(s, 'hex') FROM t", "Odd number of digits"),
        ("SELECT date_trunc('nope', to_timestamp(id)) FROM t", "granularity: 'nope'"),
        ("SELECT date_trunc(s, to_timestamp(id)) FROM t", "non-null scalar"),
    ],
)
def test_a_value_a_function_refuses_at_execution_is_bad_input_not_internal(sql: str, words: str) -> None:
    """A column's value a function cannot take (a timestamp that does not parse, a regular
    expression that does not compile, a month past 12) was Internal, logged as a server fault."""
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"id": pa.array([1], pa.int64()), "s": ["x"]})]])
    with pytest.raises(Exception) as raised:  # noqa: PT011 - DataFusion raises one type for all
        ctx.sql(sql).collect()
    error = execution_error(raised.value)
    assert type(error) is InvalidInput, error
    assert words in error.message

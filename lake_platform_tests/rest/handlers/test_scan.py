"""QueryTable's filter is one SQL expression over the table's columns, parsed by DataFusion;
anything else is InvalidInput naming what was wrong."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.errors import InvalidInput
from lake_platform.rest.handlers.scan import parse_filter


@pytest.fixture
def frame() -> object:
    ctx = SessionContext()
    ctx.from_pydict({"b": [1]}, name="other")
    return ctx.from_pydict({"id": [1, 2, 3], "Tag": ["x", "y", "z"]}, name="t")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("1=1) UNION SELECT * FROM other --", "not one SQL expression"),
        ("id = 1; DROP TABLE t", "not one SQL expression"),
        ("id > 1 LIMIT 5", "not one SQL expression"),
        ("id > 1 /* swallows the rest", "not one SQL expression"),
        ("id IN (SELECT b FROM other)", "not one SQL expression"),
        ("other.b = 1", "not one SQL expression"),
        ("nope = 1", "not one SQL expression"),
        ("count(id) > 1", "aggregate"),
        ("coalesce(id, count(*)) > 1", "aggregate"),
        ('length("Tag") > count(id)', "aggregate"),
        ("row_number() OVER () > 1", "window"),
        ("$1 > 1", "placeholder"),
        ("   ", "boolean expression"),
        ("id = 1\x00", "NUL"),
        ("id = " + "1" * 300, "longer than 256 bytes"),
        ("(" * 5000 + "id" + ")" * 5000 + " > 1", "filter"),
    ],
)
def test_anything_but_one_expression_over_the_columns_is_refused(
    frame: object, text: str, named: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_filter(frame, text, 256)
    assert named in str(refused.value.message), refused.value.message


def test_an_expression_over_the_columns_is_parsed(frame: object) -> None:
    expr = parse_filter(frame, "id > 1 AND \"Tag\" LIKE 'y%' -- a trailing comment", 256)
    assert frame.filter(expr).to_pydict() == {"id": [2], "Tag": ["y"]}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ('length("Tag") = 1 AND id > 1', [2, 3]),
        ('char_length("Tag") = 1 AND id < 3', [1, 2]),
        ("ifnull(id, 0) > 2", [3]),
        ("instr(\"Tag\", 'y') > 0", [2]),
    ],
)
def test_a_function_called_by_another_name_is_parsed(frame: object, text: str, ids: list[int]) -> None:
    """DataFusion wraps such a call in an alias (``character_length(x) AS length(x)``): it was
    refused as 'may not contain Alias', so ``length(tag) > 3`` could not be asked."""
    expr = parse_filter(frame, text, 256)
    assert frame.filter(expr).to_pydict()["id"] == ids  # type: ignore[attr-defined]

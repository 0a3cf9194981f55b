"""QueryTable's ``columns`` are Lance field paths (the spec's ``column_names``): ``s.a`` is field
``a`` of struct ``s``, a backtick-quoted segment is literal; each answered column is named by its
path, as Lance's scanner names it. A path naming no field is 400 InvalidInput saying which."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from lake_platform.errors import InvalidInput
from lake_platform.rest.handlers.field_paths import segments
from lake_platform_tests.rest.conftest import RestLake

QUERY = "/v1/table/p$w$ns$nested/query"


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("id", ["id"]),
        ("s.a", ["s", "a"]),
        ("s.`b.c`", ["s", "b.c"]),
        ("`s`.a", ["s", "a"]),
        ("`a``b`", ["a`b"]),
    ],
)
def test_a_path_is_read_as_lance_reads_it(path: str, names: list[str]) -> None:
    assert segments(path) == names


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("s.", "empty segment"),
        (".a", "empty segment"),
        ("`s.a", "unclosed"),
        ("`s`a", "followed by"),
        ("s`a`", "whole segment"),
    ],
)
def test_a_malformed_path_is_refused(path: str, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        segments(path)


@pytest.fixture
def nested(rest_lake: RestLake) -> RestLake:
    struct = pa.array([{"a": 1, "b.c": "x"}, {"a": 2, "b.c": "y"}])
    rest_lake.catalog.tables.create_table("p.w.ns.nested", pa.table({"id": [1, 2], "s": struct}))
    return rest_lake


def _query(lake: RestLake, columns: object) -> pa.Table:
    answer = lake.post(QUERY, {"vector": {}, "k": 0, "columns": columns}, who="reader")
    assert answer.status_code == 200, answer.text
    return pa.ipc.open_file(pa.BufferReader(answer.content)).read_all()


def test_nested_fields_are_answered_as_lance_answers_them(nested: RestLake) -> None:
    location = nested.catalog.reads.open_table("p.w.ns.nested").record.location
    for columns in (["s.a"], ["id", "s.`b.c`"], {"column_names": ["s.a", "s"]}):
        names = columns["column_names"] if isinstance(columns, dict) else columns
        expected = lance.dataset(location).to_table(columns=names)
        assert _query(nested, columns).to_pylist() == expected.to_pylist(), columns


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("s.zz", "struct 's' has no field 'zz'"),
        ("id.x", "'id' is a int64, not a struct"),
        ("nope", "no column 'nope'"),
        ("s.b.c", "struct 's' has no field 'b'"),
    ],
)
def test_a_path_to_no_field_is_a_typed_400(nested: RestLake, path: str, says: str) -> None:
    answer = nested.post(QUERY, {"vector": {}, "k": 0, "columns": [path]}, who="reader")
    assert (answer.status_code, answer.json()["code"]) == (400, 13), answer.text
    assert says in answer.json()["detail"]

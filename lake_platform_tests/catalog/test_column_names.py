"""Column names Lance can read (``catalog/column_names``): what create, overwrite and an append's
new columns refuse before anything is written. Through REST: tests/rest/handlers/test_data."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_platform.catalog.column_names import check_schema
from lake_platform.errors import TableSchemaValidationError

TWINS = pa.struct([("a", pa.int64()), ("a", pa.int64())])


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (pa.schema([]), "without columns"),
        (pa.schema([(" id", pa.int64())]), "invalid column name"),
        (pa.schema([("id", pa.int64()), ("id", pa.string())]), "duplicate column names"),
        (pa.schema([("_rowaddr", pa.uint64())]), "reserves"),
        (pa.schema([("s", TWINS)]), "struct column s of t has two fields named 'a'"),
        (pa.schema([("s", pa.struct([("in", TWINS)]))]), "struct column s.in of t"),
        (pa.schema([("l", pa.large_list(TWINS))]), "struct column l.item of t"),
        (pa.schema([("m", pa.map_(pa.string(), TWINS))]), "struct column m.value of t"),
    ],
)
def test_names_lance_cannot_read_are_refused(schema: pa.Schema, says: str) -> None:
    with pytest.raises(TableSchemaValidationError, match=says):
        check_schema(schema, "t")


def test_a_nested_field_may_share_a_name_with_a_column_or_a_reserved_one() -> None:
    struct = pa.struct([("id", pa.int64()), ("_rowid", pa.int64()), ("s", pa.struct([("s", pa.int8())]))])
    check_schema(pa.schema([("id", pa.int64()), ("s", struct)]), "t")

"""getTypeInfo's catalog: every SQL type name a result column can carry is listed, with the
codes FlightSql.proto gives it, and the data_type filter keeps only its rows."""

from __future__ import annotations

import pyarrow as pa

from lake_platform.flight import schemas, xdbc
from lake_platform.query.columns import sql_type_name

ARROW_TYPES = [
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(10, 2),
    pa.utf8(),
    pa.large_utf8(),
    pa.binary(),
    pa.date32(),
    pa.time64("us"),
    pa.timestamp("us"),
    pa.timestamp("us", tz="UTC"),
    pa.duration("s"),
    pa.list_(pa.int64()),
    pa.struct([("a", pa.int64())]),
    pa.map_(pa.utf8(), pa.int64()),
    pa.null(),
]


def test_every_column_type_name_is_listed_once_in_data_type_order() -> None:
    table = xdbc.type_info()
    assert table.schema.equals(schemas.XDBC_TYPE_INFO)
    names = table.column("type_name").to_pylist()
    assert len(names) == len(set(names))
    assert {sql_type_name(t) for t in ARROW_TYPES} <= set(names)
    codes = table.column("data_type").to_pylist()
    assert codes == sorted(codes)


def test_codes_follow_the_proto() -> None:
    rows = {r["type_name"]: r for r in xdbc.type_info().to_pylist()}
    assert (rows["BIGINT"]["data_type"], rows["BIGINT"]["column_size"], rows["BIGINT"]["num_prec_radix"]) == (
        -5,
        19,
        10,
    )
    assert rows["VARCHAR"]["literal_prefix"] == "'" and rows["VARCHAR"]["case_sensitive"] is True
    # date and time types: data type 91-93, sql_data_type XDBC_DATETIME (9) and a subcode
    assert (rows["DATE"]["data_type"], rows["DATE"]["sql_data_type"], rows["DATE"]["datetime_subcode"]) == (
        91,
        9,
        1,
    )
    assert rows["TIMESTAMP WITH TIME ZONE"]["datetime_subcode"] == 5
    assert rows["DECIMAL"]["maximum_scale"] == 38 and rows["DECIMAL"]["create_params"] == [
        "precision",
        "scale",
    ]
    assert rows["STRUCT"]["searchable"] == xdbc.SEARCHABLE_NONE and rows["INTEGER"]["searchable"] == 3


def test_the_data_type_filter() -> None:
    assert xdbc.type_info(93).column("type_name").to_pylist() == ["TIMESTAMP", "TIMESTAMP WITH TIME ZONE"]
    assert xdbc.type_info(12345).num_rows == 0

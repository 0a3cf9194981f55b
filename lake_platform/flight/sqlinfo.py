"""The SqlInfo set of a read-only DataFusion server (``CommandGetSqlInfo``).

Every id here is a standard one (below 10 000): JDBC keys its cache by the standard enum and
fails on an id it does not know. Value kinds follow FlightSql.proto: strings, bools, int64
limits, int32 enums/bitmasks, string lists (508-512) and the conversion map (517).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from lake_platform import __version__
from lake_platform.flight import schemas

SERVER_NAME = "lake_platform Flight SQL"

# Value kinds: type codes of the dense union.
STRING, BOOL, BIGINT, INT32, STRING_LIST, INT_MAP = 0, 1, 2, 3, 4, 5

SQL_KEYWORDS = [
    "analyze",
    "array",
    "arrow_cast",
    "arrow_typeof",
    "asc",
    "between",
    "case",
    "cast",
    "cube",
    "desc",
    "distinct",
    "except",
    "exclude",
    "explain",
    "filter",
    "first_value",
    "following",
    "format",
    "full",
    "grouping",
    "ilike",
    "intersect",
    "interval",
    "lateral",
    "limit",
    "nulls",
    "offset",
    "over",
    "partition",
    "preceding",
    "qualify",
    "range",
    "recursive",
    "replace",
    "rollup",
    "rows",
    "similar",
    "struct",
    "try_cast",
    "unbounded",
    "unnest",
    "values",
    "verbose",
    "window",
    "with",
]
NUMERIC_FUNCTIONS = [
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "cbrt",
    "ceil",
    "cos",
    "cosh",
    "cot",
    "degrees",
    "exp",
    "factorial",
    "floor",
    "gcd",
    "isnan",
    "iszero",
    "lcm",
    "ln",
    "log",
    "log10",
    "log2",
    "nanvl",
    "pi",
    "pow",
    "power",
    "radians",
    "random",
    "round",
    "signum",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
]
STRING_FUNCTIONS = [
    "ascii",
    "bit_length",
    "btrim",
    "char_length",
    "character_length",
    "chr",
    "concat",
    "concat_ws",
    "ends_with",
    "find_in_set",
    "initcap",
    "instr",
    "left",
    "length",
    "levenshtein",
    "lower",
    "lpad",
    "ltrim",
    "md5",
    "octet_length",
    "overlay",
    "position",
    "regexp_like",
    "regexp_match",
    "regexp_replace",
    "repeat",
    "replace",
    "reverse",
    "right",
    "rpad",
    "rtrim",
    "sha224",
    "sha256",
    "sha384",
    "sha512",
    "split_part",
    "starts_with",
    "strpos",
    "substr",
    "substring",
    "substr_index",
    "to_hex",
    "translate",
    "trim",
    "upper",
    "uuid",
]
SYSTEM_FUNCTIONS = [
    "arrow_cast",
    "arrow_typeof",
    "coalesce",
    "greatest",
    "least",
    "nullif",
    "nvl",
    "nvl2",
    "version",
]
DATETIME_FUNCTIONS = [
    "current_date",
    "current_time",
    "date_bin",
    "date_format",
    "date_part",
    "date_trunc",
    "datepart",
    "datetrunc",
    "extract",
    "from_unixtime",
    "make_date",
    "now",
    "to_char",
    "to_date",
    "to_local_time",
    "to_timestamp",
    "to_timestamp_micros",
    "to_timestamp_millis",
    "to_timestamp_nanos",
    "to_timestamp_seconds",
    "to_unixtime",
    "today",
]

# SqlSupportsConvert: BIGINT=0 BINARY=1 BIT=2 CHAR=3 DATE=4 DECIMAL=5 FLOAT=6 INTEGER=7 ...
# LONGVARCHAR=11 NUMERIC=12 REAL=13 SMALLINT=14 TIME=15 TIMESTAMP=16 TINYINT=17 VARBINARY=18 VARCHAR=19
_NUMERIC = [0, 2, 5, 6, 7, 12, 13, 14, 17]
_CONVERT = {
    **{src: _NUMERIC + [3, 11, 19] for src in _NUMERIC},
    3: _NUMERIC + [3, 4, 11, 15, 16, 19],
    11: _NUMERIC + [3, 4, 11, 15, 16, 19],
    19: _NUMERIC + [1, 3, 4, 11, 15, 16, 18, 19],
    4: [3, 4, 11, 16, 19],
    16: [3, 4, 11, 15, 16, 19],
    15: [3, 11, 15, 19],
    1: [1, 18],
    18: [1, 18],
}


def standard_info(*, max_statement_bytes: int, statement_timeout_ms: int) -> dict[int, tuple[int, Any]]:
    """id -> (value kind, value)."""
    ids: dict[int, tuple[int, Any]] = {
        0: (STRING, SERVER_NAME),
        1: (STRING, __version__),
        2: (STRING, pa.__version__),
        3: (BOOL, True),  # read-only
        4: (BOOL, True),  # SQL
        5: (BOOL, False),  # Substrait
        8: (INT32, 0),  # transactions: none
        9: (BOOL, True),  # cancellation (CancelFlightInfo and gRPC cancellation)
        10: (BOOL, False),  # bulk ingestion
        11: (BOOL, False),
        100: (INT32, min(statement_timeout_ms, 2**31 - 1)),
        101: (INT32, 0),
        500: (BOOL, False),
        501: (BOOL, False),
        502: (BOOL, False),  # no DDL
        503: (INT32, 3),  # unquoted identifiers: lower case
        504: (STRING, '"'),
        505: (INT32, 0),  # quoted identifiers: kept as written (case sensitive)
        506: (BOOL, True),
        507: (INT32, 0),  # NULLs sort high (last ascending, first descending)
        508: (STRING_LIST, SQL_KEYWORDS),
        509: (STRING_LIST, NUMERIC_FUNCTIONS),
        510: (STRING_LIST, STRING_FUNCTIONS),
        511: (STRING_LIST, SYSTEM_FUNCTIONS),
        512: (STRING_LIST, DATETIME_FUNCTIONS),
        513: (STRING, "\\"),
        514: (STRING, ""),
        515: (BOOL, True),
        516: (BOOL, True),
        517: (INT_MAP, _CONVERT),
        518: (BOOL, True),
        519: (BOOL, False),
        520: (BOOL, True),
        521: (BOOL, True),
        522: (INT32, 0b11),  # GROUP BY unrelated / beyond select
        523: (BOOL, True),
        524: (BOOL, True),
        525: (INT32, 0b11),  # minimum + core grammar
        526: (INT32, 0b11),  # ANSI-92 entry + intermediate
        527: (BOOL, False),
        528: (INT32, 2),  # full outer joins
        529: (STRING, "schema"),
        530: (STRING, "procedure"),
        531: (STRING, "catalog"),
        532: (BOOL, True),
        533: (INT32, 0),
        534: (INT32, 0),
        535: (INT32, 0),
        536: (BOOL, False),
        537: (BOOL, False),
        538: (INT32, 0b0111),  # subqueries in comparisons, EXISTS, IN
        539: (BOOL, True),
        540: (INT32, 0b11),  # UNION, UNION ALL
        **{i: (BIGINT, 0) for i in range(541, 562)},  # 0 = no limit known
        557: (BIGINT, max_statement_bytes),
        558: (BIGINT, 1),  # one statement per request
        562: (BIGINT, 0),  # default isolation: none
        563: (BOOL, False),
        564: (INT32, 0),
        565: (BOOL, False),
        566: (BOOL, False),
        567: (INT32, 0b10),  # forward-only result sets
        568: (INT32, 0),
        569: (INT32, 0b10),
        570: (INT32, 0),
        571: (INT32, 0),  # read-only concurrency
        572: (BOOL, False),
        573: (BOOL, False),
        574: (BOOL, False),
        575: (BOOL, False),
        576: (BOOL, False),
    }
    return ids


def sql_info_table(info: dict[int, tuple[int, Any]], requested: Iterable[int]) -> pa.Table:
    """Rows for the requested ids (all of ``info`` when none are requested), unknown ids skipped."""
    wanted = list(requested)
    ids = sorted(info) if not wanted else [i for i in dict.fromkeys(wanted) if i in info]
    children: list[list[Any]] = [[] for _ in range(6)]
    type_ids, offsets = [], []
    for i in ids:
        kind, value = info[i]
        type_ids.append(kind)
        offsets.append(len(children[kind]))
        children[kind].append(sorted(value.items()) if kind == INT_MAP else value)
    value_type = schemas.SQL_INFO_VALUE
    arrays = [pa.array(values, type=value_type.field(k).type) for k, values in enumerate(children)]
    union = pa.UnionArray.from_dense(
        pa.array(type_ids, pa.int8()),
        pa.array(offsets, pa.int32()),
        arrays,
        [value_type.field(k).name for k in range(6)],
        type_codes=list(range(6)),
    ).view(value_type)
    return pa.Table.from_arrays([pa.array(ids, pa.uint32()), union], schema=schemas.SQL_INFO)

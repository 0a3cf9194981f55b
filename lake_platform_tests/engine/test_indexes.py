"""Which index kind takes which column type (``engine.indexes.unsuitable``) agrees with what the
pinned Lance builds: for each kind and each of these types, the check refuses exactly what
``create_scalar_index`` refuses, so the catalog says so before any work, as a typed error,
and a policy skips it (a Lance upgrade that changes its rules fails here)."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.engine.indexes import KINDS, unsuitable

ROWS = 20
TEXT = [f"s{i}" for i in range(ROWS)]
COLUMNS = {
    "int8": pa.array(range(ROWS), pa.int8()),
    "uint64": pa.array(range(ROWS), pa.uint64()),
    "float16": pa.array(range(ROWS), pa.float32()).cast(pa.float16()),
    "float32": pa.array(range(ROWS), pa.float32()),
    "float64": pa.array([i / 3 for i in range(ROWS)]),
    "bool": pa.array([i % 2 == 0 for i in range(ROWS)]),
    "string": pa.array(TEXT),
    "large_string": pa.array(TEXT, pa.large_string()),
    "string_view": pa.array(TEXT, pa.string_view()),
    "binary": pa.array([t.encode() for t in TEXT]),
    "large_binary": pa.array([t.encode() for t in TEXT], pa.large_binary()),
    "binary_view": pa.array([t.encode() for t in TEXT], pa.binary_view()),
    "fixed_size_binary": pa.array([b"%04d" % i for i in range(ROWS)], pa.binary(4)),
    "decimal128": pa.array([decimal.Decimal(i) for i in range(ROWS)], pa.decimal128(10, 2)),
    "decimal256": pa.array([decimal.Decimal(i) for i in range(ROWS)], pa.decimal256(40, 2)),
    "date32": pa.array([datetime.date(2020, 1, 1 + i) for i in range(ROWS)]),
    "date64": pa.array([datetime.date(2020, 1, 1 + i) for i in range(ROWS)], pa.date64()),
    "time32": pa.array([datetime.time(0, 0, i) for i in range(ROWS)], pa.time32("s")),
    "time64": pa.array([datetime.time(0, 0, i) for i in range(ROWS)], pa.time64("us")),
    "timestamp": pa.array([datetime.datetime(2020, 1, 1, 0, 0, i) for i in range(ROWS)], pa.timestamp("us")),
    "timestamp_utc": pa.array(range(ROWS), pa.timestamp("us", "UTC")),
    "duration": pa.array(range(ROWS), pa.duration("s")),
    "list_string": pa.array([[t] for t in TEXT]),
    "large_list_string": pa.array([[t] for t in TEXT], pa.large_list(pa.string())),
    "list_large_string": pa.array([[t] for t in TEXT], pa.list_(pa.large_string())),
    "list_int": pa.array([[i] for i in range(ROWS)]),
    "list_bool": pa.array([[i % 2 == 0] for i in range(ROWS)]),
    "list_date": pa.array([[datetime.date(2020, 1, 1 + i)] for i in range(ROWS)]),
    "list_list_string": pa.array([[[t]] for t in TEXT]),
    "list_struct": pa.array([[{"a": i}] for i in range(ROWS)]),
    "dictionary": pa.array(TEXT).dictionary_encode(),
    "struct": pa.array([{"a": i} for i in range(ROWS)]),
}


def lance_builds(folder: Path, column: pa.Array, kind: str) -> bool:
    ds = lance.write_dataset(pa.table({"c": column}), folder)
    try:
        ds.create_scalar_index("c", kind)
    except Exception:  # noqa: BLE001 - Lance refuses with errors of several types
        return False
    return True


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", list(COLUMNS))
def test_the_check_refuses_exactly_what_lance_refuses(tmp_path: Path, name: str, kind: str) -> None:
    column = COLUMNS[name]
    built = lance_builds(tmp_path / "t", column, kind)
    reason = unsuitable(kind, column.type)
    assert (reason is None) == built, (
        f"{kind} on {column.type}: Lance {'builds' if built else 'refuses'}, {reason}"
    )
    if reason is not None:
        assert reason.startswith(f"{kind.lower()} indexes take ") and str(column.type) in reason

"""The table the schema tests change (test_schema_evolution.py, test_conform.py, test_alter.py):
``T`` seeded with ``id`` int32, ``score`` float32 and ``name`` string, and inputs built column by
column."""

from __future__ import annotations

import pyarrow as pa

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform_tests.catalog.conftest import Lake

T = "p.w.ns.t"


def table(**columns: pa.Array) -> pa.RecordBatchReader:
    return pa.table(columns).to_reader()


def seed(lake: Lake) -> Lake:
    """``T`` created with ids 1 and 2 (scores 0.5 and 1.5, names a and b)."""
    lake.catalog.tables.create_table(
        T,
        table(
            id=pa.array([1, 2], pa.int32()),
            score=pa.array([0.5, 1.5], pa.float32()),
            name=pa.array(["a", "b"], pa.string()),
        ),
    )
    return lake


def policy(lake: Lake, mode: str) -> None:
    lake.catalog.policies.set_policy(T, {"schema_evolution": mode})


def current_schema(lake: Lake) -> pa.Schema:
    return schema_from_ipc(lake.catalog.reads.open_table(T).record.schema_ipc)


def rows_of(lake: Lake) -> dict[str, list[object]]:
    snap = lake.catalog.reads.open_table(T)
    return snap.to_reader().read_all().sort_by("id").to_pydict()


def base(n: int = 3, **extra: pa.Array) -> pa.RecordBatchReader:
    return table(
        id=pa.array([n], pa.int32()),
        score=pa.array([2.5], pa.float32()),
        name=pa.array(["c"], pa.string()),
        **extra,
    )

"""The table the REST handler tests work on, ``p.w.ns.events`` (the ``events`` fixture in
conftest.py creates it), and what they read back from the server and the catalog."""

from __future__ import annotations

from typing import Any

import lance
import pyarrow as pa
from lance.namespace import RestNamespace

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

#: The table's id as pylance's RestNamespace takes it, in a REST path, and as the catalog names it.
T = ["p", "w", "ns", "events"]
TP = "p$w$ns$events"
NAME = "p.w.ns.events"


def client(lake: RestLake, who: str = "writer") -> RestNamespace:
    """Pylance's own RestNamespace, under one of the lake's service tokens."""
    return rest_namespace(lake.url, lake.tokens[who])


def append(lake: RestLake, ids: list[int], tag: str = "x") -> None:
    """One append of ``ids`` through pylance, as the writer."""
    lance.write_dataset(rows(ids, tag), namespace_client=client(lake), table_id=T, mode="append")


def version(lake: RestLake) -> int:
    """The table's current version as the registry records it."""
    return lake.catalog.ctx.table(TableName.parse(NAME))[0].current_version


def version_and_columns(lake: RestLake) -> tuple[int, list[str]]:
    """The registry's current version and the column names of its schema."""
    record = lake.catalog.ctx.table(TableName.parse(NAME))[0]
    return record.current_version, schema_from_ipc(record.schema_ipc).names


def problem(resp: Any) -> tuple[int, int]:
    """(HTTP status, Lance Namespace error code) of a refusal, which must be a problem+json body."""
    assert resp.headers["content-type"].startswith("application/problem+json"), resp.text
    return resp.status_code, resp.json()["code"]


def ipc(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream, the body of InsertIntoTable and MergeInsertIntoTable."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()

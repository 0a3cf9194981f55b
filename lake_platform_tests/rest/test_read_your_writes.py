"""Read-your-writes across processes: a commit another process made (``lake ingest``, the CLI)
is seen by the very next REST request, whatever the server's catalog snapshot holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lance_namespace_urllib3_client.models import (
    DescribeTableRequest,
    ListTableVersionsRequest,
    QueryTableRequest,
)

from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

T = ["p", "w", "ns", "t"]


def lake_cli(lake: RestLake, *args: str) -> None:
    """The CLI in its own process, on the server's home (so the same registry)."""
    env = {**os.environ, "LAKE_HOME": str(lake.settings.home)}
    done = subprocess.run(
        [sys.executable, "-m", "lake_platform.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def query_ids(lake: RestLake) -> list[int]:
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    data = ns.query_table(QueryTableRequest(id=T, k=0, vector={}, columns={"column_names": ["id"]}))
    return sorted(pa.ipc.open_file(pa.BufferReader(data.data)).read_all().column("id").to_pylist())


@pytest.mark.slow
def test_an_ingest_by_another_process_is_seen_by_the_next_request(
    rest_lake: RestLake, tmp_path: Path
) -> None:
    rest_lake.catalog.tables.create_table("p.w.ns.t", rows(list(range(10))).to_reader())
    rest_lake.service.snapshots.refresh()
    assert query_ids(rest_lake) == list(range(10))  # the server has this version planned (and cached)
    for batch in (range(10, 2010), range(2010, 2510)):
        source = tmp_path / f"batch-{batch.start}.parquet"
        pq.write_table(rows(list(batch)), source)
        lake_cli(rest_lake, "ingest", "p.w.ns.t", str(source))
        # At once, no refresh: the next QueryTable, DescribeTable and ListTableVersions see it.
        assert query_ids(rest_lake) == list(range(batch.stop))
        ns = rest_namespace(rest_lake.url, rest_lake.tokens["reader"])
        version = rest_lake.catalog.ctx.table(TableName.parse("p.w.ns.t"))[0].current_version
        assert ns.describe_table(DescribeTableRequest(id=T)).version == version
        listed = ns.list_table_versions(ListTableVersionsRequest(id=T, descending=True, limit=1))
        assert [v.version for v in listed.versions] == [version]


def test_a_table_created_by_another_process_is_queryable_at_once(rest_lake: RestLake, tmp_path: Path) -> None:
    source = tmp_path / "first.parquet"
    pq.write_table(rows([7, 8, 9]), source)
    lake_cli(rest_lake, "table", "create", "p.w.ns.t", "--from", str(source))
    assert query_ids(rest_lake) == [7, 8, 9]

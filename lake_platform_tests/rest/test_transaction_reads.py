"""REST reads of a table a multi-table commit left behind its head (its writer killed mid roll
-forward, ``catalog.transaction_chunks``): DescribeTable and DescribeTableVersion and QueryTable
(``latest_view``) answer the committed version, as a snapshot reader does, never the table's old head."""

from __future__ import annotations

import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    DescribeTableRequest,
    QueryTableRequest,
)

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.transaction import Transaction
from lake_platform.naming import TableName
from lake_platform.query.snapshot_head import latest_view
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

#: Tables of the commit, and registry operations a write: its heads move in 6 writes of 2 tables.
SOME, SMALL = 12, 8
NAMES = [f"p.w.ns.t{i:02d}" for i in range(SOME)]
LAST = NAMES[-1]


def killed_commit(lake: RestLake) -> None:
    for i, name in enumerate(NAMES):
        lake.catalog.tables.create_table(name, rows([i]))
    arrivals: list[str] = []

    def hook(at: str) -> None:
        if at == "transaction:rolled-forward":
            arrivals.append(at)
            if len(arrivals) == 2:
                raise SystemExit("stopped mid roll-forward")  # as a writer dying there

    with Catalog(lake.settings, hook=hook) as writer:
        with pytest.raises(SystemExit):
            with Transaction(writer.tables, max_ops=SMALL) as tx:
                for i, name in enumerate(NAMES):
                    tx.append(name, rows([1000 + i]))
    assert lake.catalog.ctx.table(TableName.parse(LAST))[0].current_version == 1  # lagging


def test_describe_table_answers_the_committed_version_of_a_lagging_table(rest_lake: RestLake) -> None:
    killed_commit(rest_lake)
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["reader"])
    assert ns.describe_table(DescribeTableRequest(id=LAST.split("."))).version == 2


def test_describe_table_version_finds_the_committed_version_of_a_lagging_table(rest_lake: RestLake) -> None:
    killed_commit(rest_lake)
    answer = rest_lake.post(
        f"/v1/table/{LAST.replace('.', '$')}/version/describe", {"version": 2}, who="reader"
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["version"]["version"] == 2


def test_a_query_keeps_the_snapshot_at_the_committed_version(rest_lake: RestLake) -> None:
    killed_commit(rest_lake)
    rest_lake.service.snapshots.refresh()  # views every table at version 2, through the record
    # QueryTable's read-your-writes view (``latest_view``) must not put the table back to its
    # registry head, version 1, while the snapshot holds the rest of the commit at version 2.
    view = latest_view(rest_lake.service.snapshots, rest_lake.catalog.store, TableName.parse(LAST))
    table = view.table("w", "ns", TableName.parse(LAST).table)
    assert table is not None and table.ref is not None and table.ref.version == 2
    # Completed on the way: the killed writer's manifests can now be published, and read.
    for name in NAMES:
        rest_lake.catalog.manifests.finish_versions(name)
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["reader"])
    data = ns.query_table(
        QueryTableRequest(id=LAST.split("."), k=0, vector={}, columns={"column_names": ["id"]})
    )
    ids = pa.ipc.open_file(pa.BufferReader(data.data)).read_all().column("id").to_pylist()
    assert sorted(ids) == [SOME - 1, 1000 + SOME - 1]

"""The REST server over an S3 warehouse (SeaweedFS on loopback): a stock client commits through
the registry with the storage options the server vends, and QueryTable spools to S3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.s3_server import S3Endpoint

T = ["p", "w", "ns", "events"]


@pytest.fixture
def s3_lake(tmp_path: Path, s3: S3Endpoint, s3_prefix: str) -> Iterator[RestLake]:
    yield from start_rest_lake(
        tmp_path,
        warehouse_root=f"s3://{s3.bucket}/{s3_prefix}",
        rest_inline_max_rows=1,
        rest_storage_credentials="server",  # the keys the client writes with (default: none)
        **s3.lake_settings(),
    )


def test_rest_client_commits_and_reads_on_s3(s3_lake: RestLake, s3: S3Endpoint, s3_prefix: str) -> None:
    ns = rest_namespace(s3_lake.url, s3_lake.tokens["writer"])
    # No storage_options from the client: DescribeTable/DeclareTable vend the server's.
    assert lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=T, mode="create").version == 1
    assert lance.write_dataset(rows([3]), namespace_client=ns, table_id=T, mode="append").version == 2
    snap = s3_lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.record.location.startswith(f"s3://{s3.bucket}/{s3_prefix}/")
    assert snap.version == 2 and snap.count_rows() == 3
    assert lance.dataset(namespace_client=ns, table_id=T, version=1).count_rows() == 2
    # QueryTable beyond the inline threshold spools its segments to the results area on S3.
    s3_lake.service.snapshots.refresh()
    s3_lake.service.snapshots.refresh()  # the first may join a load begun before the writes
    handle = {"x-lake-result": "handle"}  # the spooled answer, which a client must ask for
    answer = s3_lake.post(
        "/v1/table/p$w$ns$events/query", {"vector": {}, "k": 0}, who="reader", headers=handle
    ).json()
    assert answer["rows"] == 3
    # the default area beside the warehouse root, not inside it
    assert s3_lake.settings.results_root == f"s3://{s3.bucket}/{s3_prefix}-results"
    assert any("/p/" in key for key in s3.keys_under(f"{s3_prefix}-results"))
    assert not any("results" in key for key in s3.keys_under(s3_prefix))
    ids = []
    for url in answer["segments"]:
        seg = s3_lake.get(url, who="reader")
        assert seg.status_code == 200
        ids += pa.ipc.open_file(pa.BufferReader(seg.content)).read_all().column("id").to_pylist()
    assert sorted(ids) == [1, 2, 3]

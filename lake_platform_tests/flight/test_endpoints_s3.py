"""Multi-endpoint results on S3 (SeaweedFS on loopback): each part is opened from the pinned
manifest on S3, the parts add up to the single answer, and they stay pinned across an append
and a delete."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform_tests.flight.conftest import login, plan, serving, t_rows, wait_until
from lake_platform_tests.s3_server import S3Endpoint

pytestmark = pytest.mark.slow


def test_parts_on_s3_add_up_and_stay_pinned(s3: S3Endpoint, s3_prefix: str, tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path / "home", warehouse_roots=f"s3://{s3.bucket}/{s3_prefix}", **s3.lake_settings()
    )
    catalog = Catalog(settings)
    try:
        catalog.containers.create_project("p")
        catalog.containers.create_warehouse("p.w", root=f"s3://{s3.bucket}/{s3_prefix}")
        catalog.containers.create_namespace("p.w.ns")
        catalog.tables.create_table("p.w.ns.big", t_rows(400).to_reader())
        for k in range(1, 6):
            catalog.tables.append("p.w.ns.big", t_rows(400, start=400 * k).to_reader())
        catalog.tables.delete_rows("p.w.ns.big", "id % 5 = 0")
        with serving(
            settings,
            catalog,
            snapshot_ttl_seconds=0.1,
            endpoint_target_rows=500,
            max_endpoints=3,
            endpoints="many",
        ) as server:
            client, options = login(f"grpc://127.0.0.1:{server.port}")
            expected_ids = [i for i in range(2400) if i % 5]
            assert wait_until(
                lambda: len(plan(client, options, "SELECT id, s FROM w.ns.big").endpoints) == 3, timeout=30
            )
            info = plan(client, options, "SELECT id, s FROM w.ns.big")
            single = plan(client, options, "SELECT id, s FROM w.ns.big ORDER BY id")
            assert len(single.endpoints) == 1
            catalog.tables.append("p.w.ns.big", t_rows(400, start=2400).to_reader())
            catalog.tables.delete_rows("p.w.ns.big", "id < 1000")
            parts = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
            assert all(p.num_rows for p in parts)
            got = pa.concat_tables(parts)
            want = client.do_get(single.endpoints[0].ticket, options).read_all()
            assert want.column("id").to_pylist() == expected_ids

            def rows(t: pa.Table) -> Counter[tuple[object, ...]]:
                return Counter(zip(t.column("id").to_pylist(), t.column("s").to_pylist(), strict=True))

            assert rows(got) == rows(want)
    finally:
        catalog.close()

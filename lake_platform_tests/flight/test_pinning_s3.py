"""Pinning on S3 storage (SeaweedFS on loopback, or the S3 named by LAKE_TEST_S3_ENDPOINT): a
ticket reads its planned version from S3 through the cached provider (whose manifest is checked
with one HEAD), and fails cleanly once that version is cleaned up or its table purged."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.flight.conftest import fetch, login, plan, start_server, wait_until
from lake_platform_tests.flight.helpers import tagged_rows
from lake_platform_tests.s3_server import S3Endpoint

pytestmark = pytest.mark.slow


def test_pinned_versions_on_s3(s3: S3Endpoint, s3_prefix: str, tmp_path: Path) -> None:
    endpoint, prefix = s3, s3_prefix
    settings = load_settings(
        home=tmp_path / "home", warehouse_roots=f"s3://{endpoint.bucket}/{prefix}", **endpoint.lake_settings()
    )
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w", root=f"s3://{endpoint.bucket}/{prefix}")
    catalog.containers.create_namespace("p.w.ns")
    server = start_server(settings, catalog, snapshot_ttl_seconds=0.1)
    clock = ManualClock()
    maintainer = Catalog(
        settings.model_copy(update={"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0}),
        clock=clock,
        heartbeat=False,
    )
    try:
        catalog.tables.create_table("p.w.ns.s", tagged_rows(10, tag="v1"))
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        assert wait_until(
            lambda: (
                fetch(client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.s")).to_pylist()
                == [{"n": 10}]
            ),
            timeout=30,
        )
        info = plan(client, options, "SELECT id, tag FROM w.ns.s")
        catalog.tables.append("p.w.ns.s", tagged_rows(5, start=10, tag="v2"))
        got = fetch(client, options, info)  # the cached provider, its manifest checked on S3
        assert got.num_rows == 10 and set(got.column("tag").to_pylist()) == {"v1"}
        clock.advance(10)
        assert maintainer.versions.cleanup("p.w.ns.s", retention=timedelta(0)).detail["versions_removed"] == [
            1
        ]
        with pytest.raises(pa.ArrowKeyError, match=r"version 1 of p\.w\.ns\.s is no longer available"):
            fetch(client, options, info)
        server.snapshots.refresh()  # the calls since the append can all fit in one TTL
        current = plan(client, options, "SELECT count(*) AS n FROM w.ns.s")
        catalog.trash.drop_table("p.w.ns.s", purge=True)
        with pytest.raises(pa.ArrowKeyError, match=r"w\.ns\.s"):
            fetch(client, options, current)
    finally:
        server.stop(grace=0)
        maintainer.close()
        catalog.close()

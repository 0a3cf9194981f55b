"""Spooled results on S3 (SeaweedFS on loopback): the segments are objects under the results
prefix, every endpoint reads back exactly the result, cancel deletes the objects, and the
reclaim deletes an expired job's objects and keeps a live one's."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine.results import ResultsArea
from lake_platform.flight import proto
from lake_platform.maintenance.results import reclaim_expired
from lake_platform.settings import load_settings
from lake_platform_tests.flight.conftest import login, plan, serving, t_rows
from lake_platform_tests.s3_server import S3Endpoint

pytestmark = pytest.mark.slow


def test_spooled_segments_on_s3(s3: S3Endpoint, s3_prefix: str, tmp_path: Path) -> None:
    root = f"s3://{s3.bucket}/{s3_prefix}"
    settings = load_settings(
        home=tmp_path / "home",
        results_root=f"{root}/results",
        warehouse_roots=f"{root}/wh",
        **s3.lake_settings(),
    )
    catalog = Catalog(settings)
    try:
        catalog.containers.create_project("p")
        catalog.containers.create_warehouse("p.w", root=f"{root}/wh")
        catalog.containers.create_namespace("p.w.ns")
        catalog.tables.create_table("p.w.ns.big", t_rows(3000).to_reader())
        with serving(
            settings,
            catalog,
            spool_min_rows=1000,
            spool_segment_bytes=16 << 10,
            batch_size=512,
            spool_presign=True,
            endpoints="many",
        ) as server:
            client, options = login(f"grpc://127.0.0.1:{server.port}")
            info = plan(client, options, "SELECT id, s FROM w.ns.big")
            assert len(info.endpoints) > 1
            # Each endpoint: this connection first, then the segment's bytes over pre-signed HTTP(S).
            for endpoint in info.endpoints:
                reuse, signed = (loc.uri.decode() for loc in endpoint.locations)
                assert reuse == "arrow-flight-reuse-connection://?" and "X-Amz-Signature=" in signed
                with urllib.request.urlopen(signed, timeout=10) as response:
                    fetched = pa.ipc.open_stream(response.read()).read_all()
                assert fetched.equals(client.do_get(endpoint.ticket, options).read_all())
            unsigned = info.endpoints[0].locations[1].uri.decode().split("?", 1)[0]
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(unsigned, timeout=10)  # the bucket is not public
            area = ResultsArea(settings.results_root, settings.storage_options(settings.results_root))
            [job] = [e for e in area.jobs() if e.project == "p"]
            assert job.expires_at is not None and job.expires_at > time.time()
            assert area.done("p", job.job) is not None
            got = pa.concat_tables(client.do_get(e.ticket, options).read_all() for e in info.endpoints)
            assert sorted(got.column("id").to_pylist()) == list(range(3000))
            body = proto.CancelFlightInfoRequest(info=info.serialize()).SerializeToString()
            list(client.do_action(fl.Action("CancelFlightInfo", body), options))
            assert [e for e in area.jobs() if e.job == job.job] == []
            with pytest.raises(urllib.error.HTTPError):  # the signed URL finds nothing either
                urllib.request.urlopen(info.endpoints[0].locations[1].uri.decode(), timeout=10)
            with pytest.raises(pa.ArrowKeyError, match="gone"):
                client.do_get(info.endpoints[0].ticket, options).read_all()
            # reclaim: a job past its expiry goes, one still live (expiring later) stays
            expired = plan(client, options, "SELECT s FROM w.ns.big")
            handle = proto.statement_handle(expired.endpoints[0].ticket.ticket)
            expired_job = server.spooler.open_segment(handle, None)[1]
            cut = next(e.expires_at for e in area.jobs() if e.job == expired_job) + 1
            area.create_job("p", "live", cut + 3600, info.schema)
            outcome = reclaim_expired(area, cut, lifetime=settings.results_ttl_seconds, grace=0)
            assert [d["job"] for d in outcome.deleted] == [expired_job] and outcome.kept == 1
            assert [e.job for e in area.jobs()] == ["live"]
            with pytest.raises(pa.ArrowKeyError, match="gone"):
                client.do_get(expired.endpoints[0].ticket, options).read_all()
    finally:
        catalog.close()

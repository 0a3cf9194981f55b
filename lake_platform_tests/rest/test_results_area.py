"""REST's spooled QueryTable results (the handle protocol, when a client asks for it) live in the
lake's one results area (LAKE_RESULTS_ROOT), with Flight's layout and expiry: they expire, the
``reclaimed_results`` asset reclaims them (a live one is kept), and the warehouse-level orphan
folder scan never reports nor reclaims them."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import dagster as dg
import lance
import pyarrow as pa
import pytest

from lake_platform.defs.resources import LakeResource
from lake_platform.defs.results import reclaimed_results
from lake_platform.maintenance.orphan_folders import reclaim_folders, scan_folders
from lake_platform.maintenance.results import GRACE_SECONDS
from lake_platform.naming import WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import WarehouseRecord
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake

TTL = 120.0
HANDLE = {"x-lake-result": "handle"}  # the handle protocol, which only a client asking gets


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    for lake in start_rest_lake(
        tmp_path, rest_inline_max_rows=10, rest_inline_max_bytes=1 << 20, results_ttl_seconds=TTL
    ):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows(list(range(100))), namespace_client=ns, table_id=["p", "w", "ns", "t"])
        lake.service.snapshots.refresh()
        lake.service.snapshots.refresh()  # the first may join a load begun before the create
        yield lake


def spool(lake: RestLake) -> dict:
    resp = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0}, who="reader", headers=HANDLE)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["rows"] == 100
    return answer


def job_dir(lake: RestLake, answer: dict) -> Path:
    project, job = answer["result_handle"].split(".")
    return Path(lake.settings.results_root) / project / job


def age(folder: Path, expires_at: float) -> None:
    """What the clock passing the expiry looks like to the area: the job.json's expiry moved back."""
    meta = json.loads((folder / "job.json").read_text())
    meta["expires_at"] = expires_at
    (folder / "job.json").write_text(json.dumps(meta))


def materialize(lake: RestLake) -> dict:
    with sqlite_instance() as instance:
        result = dg.materialize(
            [reclaimed_results],
            instance=instance,
            resources={"lake": LakeResource(home=str(lake.settings.home))},
        )
        assert result.success
        found = result.asset_materializations_for_node("reclaimed_results")[0].metadata
        return {k: v.value for k, v in found.items()}


def test_a_rest_result_carries_the_results_ttl_and_flights_layout(lake: RestLake) -> None:
    before = time.time()
    answer = spool(lake)
    folder = job_dir(lake, answer)
    meta = json.loads((folder / "job.json").read_text())
    assert before + TTL - 1 <= meta["expires_at"] <= time.time() + TTL
    assert answer["expires_at"] == int(meta["expires_at"])
    done = json.loads((folder / "done.json").read_text())
    assert done["rows"] == 100 and [s["name"] for s in done["segments"]] == [
        f"seg-{n:05d}.arrow" for n in range(len(answer["segments"]))
    ]
    # nothing under the warehouse any more (the old <warehouse root>/_results)
    assert not list(Path(lake.settings.warehouse_root).glob("p/w/_results"))


def test_an_expired_rest_result_is_refused_then_reclaimed_and_a_live_one_kept(lake: RestLake) -> None:
    old, live = spool(lake), spool(lake)
    old_dir, live_dir = job_dir(lake, old), job_dir(lake, live)
    age(old_dir, time.time() - GRACE_SECONDS - 1)
    gone = lake.get(old["segments"][0], who="reader")
    assert (gone.status_code, gone.json()["title"]) == (404, "TransactionNotFound")
    assert "expired" in gone.json()["detail"]
    m = materialize(lake)
    assert (m["deleted"], m["kept"]) == (1, 1) and m["root"] == lake.settings.results_root
    assert not old_dir.exists() and live_dir.exists()
    ids: list[int] = []
    for url in live["segments"]:
        seg = lake.get(url, who="reader")
        assert seg.status_code == 200
        ids += pa.ipc.open_file(pa.BufferReader(seg.content)).read_all().column("id").to_pylist()
    assert sorted(ids) == list(range(100))
    # a reclaimed handle is a typed 404 (ResultNotFound, the spec's code 12), not a 500
    again = lake.get(old["segments"][0], who="reader")
    assert (again.status_code, again.json()["title"]) == (404, "TransactionNotFound")
    beyond = lake.get(f"/v1/results/{live['result_handle']}/{len(live['segments'])}", who="reader")
    assert (beyond.status_code, beyond.json()["title"]) == (404, "TransactionNotFound")


def test_a_result_past_the_cap_is_400_and_deleted_and_a_smaller_one_served(tmp_path: Path) -> None:
    for capped in start_rest_lake(
        tmp_path, rest_inline_max_rows=10, rest_inline_max_bytes=1 << 20, results_max_bytes=20_000
    ):
        ns = rest_namespace(capped.url, capped.tokens["writer"])
        lance.write_dataset(rows(list(range(5000))), namespace_client=ns, table_id=["p", "w", "ns", "t"])
        capped.service.snapshots.refresh()
        capped.service.snapshots.refresh()
        resp = capped.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0}, who="reader", headers=HANDLE)
        assert (resp.status_code, resp.json()["code"]) == (400, 13), resp.text
        assert "LAKE_RESULTS_MAX_BYTES=20000" in resp.json()["detail"]
        assert list(Path(capped.settings.results_root).glob("p/*")) == []  # its job deleted
        body = {"vector": {}, "k": 500}
        within = capped.post("/v1/table/p$w$ns$t/query", body, who="reader", headers=HANDLE)
        assert within.status_code == 200 and within.json()["rows"] == 500


def test_the_server_deletes_expired_results_itself(lake: RestLake) -> None:
    old, live = spool(lake), spool(lake)
    old_dir, live_dir = job_dir(lake, old), job_dir(lake, live)
    age(old_dir, time.time() - GRACE_SECONDS - 1)
    sweeper = lake.service.results_sweeper  # started with the server, every LAKE_RESULTS_SWEEP_SECONDS
    assert sweeper.interval == lake.settings.results_sweep_seconds
    outcome = sweeper.tick()
    assert outcome is not None and [d["job"] for d in outcome.deleted] == [old_dir.name]
    assert not old_dir.exists() and live_dir.exists()


def test_the_orphan_folder_scan_never_sees_results_areas(lake: RestLake) -> None:
    catalog = lake.catalog
    answer = spool(lake)
    # A warehouse rooted at the lake's root, plus an old-style <warehouse root>/_results job left
    # by an earlier server, all old enough. (a warehouse can no longer be created around the results
    # area, which is outside the warehouse root by default; one registered before the allowed-roots
    # rule can still be there)
    top = WarehouseRecord(name="p.top", root=lake.settings.warehouse_root, created_by="before-the-roots-rule")
    catalog.store.put_if_absent(keys.warehouse(WarehouseName.parse("p.top")), top.encode())
    w_root = Path(catalog.ctx.warehouse(WarehouseName.parse("p.w")).root)
    legacy = w_root / "_results" / "p" / f"p.w.{'a' * 32}"
    legacy.mkdir(parents=True)
    (legacy / "00000.arrow").write_bytes(b"old result")
    # and one real orphan table folder, so the scan is shown to look
    orphan = w_root / "ns" / "ghost-0123456789abcdef.lance"
    orphan.mkdir(parents=True)
    (orphan / "data.lance").write_bytes(b"x")
    folders = [job_dir(lake, answer), legacy, orphan]
    old = time.time() - 30 * 86400
    for folder in folders:
        for f in [*folder.iterdir(), folder]:
            os.utime(f, (old, old))
    report = scan_folders(catalog, "p.w", min_age=timedelta(hours=1))
    assert [o.path for o in report.orphans] == ["ns/ghost-0123456789abcdef.lance"]
    assert scan_folders(catalog, "p.top", min_age=timedelta(hours=1)).orphan_count == 1  # p/w/ns/...
    reclaim_folders(catalog, "p.top", timedelta(hours=1))
    reclaim_folders(catalog, "p.w", timedelta(hours=1))
    assert not orphan.exists()
    assert all(folder.exists() and list(folder.iterdir()) for folder in folders[:2])


def test_a_full_results_disk_is_503_and_the_next_query_works_without_a_restart(tmp_path: Path) -> None:
    """On a real 8 MiB tmpfs: a result larger than the disk is 503 with Retry-After, its job
    deleted and no file of it left open (so the space is back), and a result that fits is
    then served, every time, with the same server."""
    from lake_platform_tests.engine.small_disk import run_on_tmpfs

    seen = run_on_tmpfs(
        tmp_path / "results",
        "8m",
        "lake_platform_tests.rest.full_disk_probe",
        str(tmp_path),
        str(tmp_path / "results"),
    )
    full, fits, full_again, fits_again = seen["steps"]
    for step in (full, full_again):
        assert step["open_deleted"] == [] and step["jobs_left"] == [], step
        assert step["free"] > 0.95  # the failed job's space came back
        assert (step["status"], step["retry_after"]) == (503, "1"), step
        assert step["content_type"] == "application/problem+json"
        assert step["problem"]["code"] == 17 and step["problem"]["title"] == "ServiceUnavailable"
        assert "results area is out of space" in step["problem"]["detail"]
    for step in (fits, fits_again):
        assert step["status"] == 200 and step["rows"] == 10_000, step

"""The ``reclaimed_results`` asset: expired spooled results and abandoned job folders are deleted,
live ones (and anything not yet past its grace) are kept, in a real Dagster instance."""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa

from lake_platform.defs.definitions import build
from lake_platform.defs.results import reclaimed_results, results_reclaim_schedule
from lake_platform.engine.results import ResultsArea
from lake_platform.maintenance.results import GRACE_SECONDS, reclaim_expired
from lake_platform.settings import load_settings
from lake_platform_tests.defs.conftest import Lake

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def spooled(area: ResultsArea, project: str, job: str, expires_at: float) -> Path:
    area.create_job(project, job, expires_at, SCHEMA)
    with area.segment_sink(project, job, "seg-00000.arrows") as out:
        with pa.ipc.new_stream(out, SCHEMA) as w:
            w.write_batch(pa.record_batch({"id": [1, 2]}, schema=SCHEMA))
    return Path(area.job_dir(project, job))


def test_reclaim_deletes_expired_and_abandoned_only(tmp_path: Path) -> None:
    area = ResultsArea(str(tmp_path / "results"))
    now = time.time()
    expired = spooled(area, "p", "expired", now - GRACE_SECONDS - 1)
    in_grace = spooled(area, "p", "in-grace", now - 1)
    live = spooled(area, "q", "live", now + 3600)
    abandoned = tmp_path / "results" / "p" / "abandoned"
    abandoned.mkdir()
    (abandoned / "seg-00000.arrows").write_bytes(b"partial")
    old = now - 7200 - GRACE_SECONDS - 1
    os.utime(abandoned / "seg-00000.arrows", (old, old))
    os.utime(abandoned, (old, old))
    starting = tmp_path / "results" / "p" / "starting"
    starting.mkdir()
    outcome = reclaim_expired(area, now, lifetime=7200)
    assert {d["job"] for d in outcome.deleted} == {"expired", "abandoned"}
    assert outcome.kept == 3
    assert not expired.exists() and not abandoned.exists()
    assert in_grace.exists() and live.exists() and starting.exists()
    assert list(live.glob("seg-*")) and area.done("q", "live") is None  # untouched, still running
    assert reclaim_expired(ResultsArea(str(tmp_path / "nothing-here")), now, lifetime=1).deleted == []


def test_the_asset_reclaims_in_dagster(lake: Lake, instance: dg.DagsterInstance) -> None:
    settings = load_settings(home=lake.home)
    area = ResultsArea(settings.results_root)
    now = time.time()
    gone = spooled(area, "p", "old", now - GRACE_SECONDS - 60)
    kept = spooled(area, "p", "new", now + 600)
    result = dg.materialize([reclaimed_results], instance=instance, resources=lake.resources)
    assert result.success
    m = {
        k: v.value for k, v in result.asset_materializations_for_node("reclaimed_results")[0].metadata.items()
    }
    assert m["deleted"] == 1 and m["kept"] == 1 and m["root"] == settings.results_root
    assert not gone.exists() and kept.exists()


def test_registered_with_a_schedule() -> None:
    built = build()
    assert built.get_schedule_def("results_reclaim_schedule") is results_reclaim_schedule
    assert any(spec.key == dg.AssetKey("reclaimed_results") for spec in built.resolve_all_asset_specs())

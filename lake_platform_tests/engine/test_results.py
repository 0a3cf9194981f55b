"""The results area's pieces: what counts as a full store and the error it becomes, the result
cap, and where the area is by default (outside every warehouse, owner-only)."""

from __future__ import annotations

import errno
import stat
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.engine.results import ResultsArea, ResultsAreaFull, SegmentWriter, full_error, out_of_space
from lake_platform.errors import ServiceUnavailable
from lake_platform.flight.errors import status_of
from lake_platform.rest.problems import problem
from lake_platform.settings import load_settings

SCHEMA = pa.schema([pa.field("id", pa.int64())])


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        OSError("IOError: error writing bytes to file. Detail: [errno 28] No space left on device"),
        OSError("AWS Error UNKNOWN (HTTP status 507) during UploadPart: XMinioStorageFull"),
    ],
)
def test_a_full_store_is_results_area_full(exc: OSError) -> None:
    assert out_of_space(exc)
    error = full_error(exc)
    assert isinstance(error, ResultsAreaFull) and isinstance(error, ServiceUnavailable)
    # over gRPC the code for an out-of-space file system; over HTTP 503 with Retry-After
    assert status_of(error)[0].name == "RESOURCE_EXHAUSTED"
    answer = problem(error)
    assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")


@pytest.mark.parametrize(
    "exc", [OSError(errno.EACCES, "Permission denied"), FileNotFoundError("gone"), ValueError("No space")]
)
def test_other_failures_stay_what_they_are(exc: Exception) -> None:
    assert not out_of_space(exc) and full_error(exc) is exc


def test_the_cap_names_its_setting(tmp_path: Path) -> None:
    area = ResultsArea(str(tmp_path), max_result_bytes=1000)
    assert area.over_cap(1000) is None
    assert "LAKE_RESULTS_MAX_BYTES=1000" in (area.over_cap(1001) or "")
    assert ResultsArea(str(tmp_path)).over_cap(1 << 50) is None  # 0: no cap


def test_the_default_area_is_under_the_home_outside_the_warehouse_and_owner_only(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", results_max_bytes=4096)
    assert Path(settings.results_root) == tmp_path / "home" / "results"
    assert not Path(settings.results_root).is_relative_to(settings.warehouse_root)
    area = ResultsArea.of(settings)
    assert area.max_result_bytes == 4096
    area.create_job("p", "j", 0.0, SCHEMA)
    segment = SegmentWriter(area, "p", "j", "seg-00000.arrows", SCHEMA, ipc_file=False)
    segment.write(pa.record_batch({"id": [1, 2]}, schema=SCHEMA))
    assert segment.close() == (Path(area.job_dir("p", "j")) / "seg-00000.arrows").stat().st_size > 0
    for path in (tmp_path / "home" / "results", Path(area.job_dir("p", "j"))):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in Path(area.job_dir("p", "j")).iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_s3_warehouse_roots_results_sit_beside_it(tmp_path: Path) -> None:
    beside = load_settings(home=tmp_path, warehouse_root="s3://lake/prod/wh")
    assert beside.results_root == "s3://lake/prod/wh-results"  # replicas share it, not inside
    whole_bucket = load_settings(home=tmp_path, warehouse_root="s3://lake")
    assert whole_bucket.results_root == (tmp_path / "results").as_posix()
    assert load_settings(home=tmp_path, results_root="/srv/results").results_root == "/srv/results"

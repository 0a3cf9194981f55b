"""A spool on a real 8 MiB tmpfs (``engine/small_disk``): a result larger than the disk fails
with RESOURCE_EXHAUSTED (ResultsAreaFull), its job deleted and none of its files left open, and
a result that fits is then spooled and served by the same server, every time."""

from __future__ import annotations

from pathlib import Path

from lake_platform_tests.engine.small_disk import run_on_tmpfs


def test_a_full_results_disk_is_resource_exhausted_and_the_next_spool_works(tmp_path: Path) -> None:
    results = tmp_path / "results"
    seen = run_on_tmpfs(
        results, "8m", "lake_platform_tests.flight.spool_full_disk_probe", str(tmp_path), str(results)
    )
    full, fits, full_again, fits_again = seen["steps"]
    for step in (full, full_again):
        assert step["open_deleted"] == [] and step["jobs_left"] == [], step
        assert step["free"] > 0.95  # the failed job's space came back
        assert "resource exhausted" in step["error"].lower(), step
        assert "[ResultsAreaFull, code 17]" in step["error"]
    for step in (fits, fits_again):
        assert step.get("rows") == 10_000, step

"""The servers' sweep of expired results: ``ResultsSweeper`` runs ``reclaim_expired`` on its own
thread with the clock it was given, survives a failed sweep, and stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from lake_platform.engine.results import JobEntry, ResultsArea
from lake_platform.maintenance.results import GRACE_SECONDS, ResultsSweeper

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def test_the_sweep_thread_deletes_what_has_expired_by_its_clock(tmp_path: Path) -> None:
    area = ResultsArea(str(tmp_path / "results"))
    now = time.time()
    area.create_job("p", "due", now + 60, SCHEMA)
    area.create_job("p", "live", now + 3600, SCHEMA)
    swept = threading.Event()
    ticks: list[float] = []

    def clock() -> float:  # the clock 61 s and a grace later, and a signal that a sweep ran
        ticks.append(now + 61 + GRACE_SECONDS)
        if len(ticks) == 2:
            swept.set()  # the second sweep started: the first finished
        return ticks[-1]

    sweeper = ResultsSweeper(area, interval=0.01, lifetime=3600, clock=clock).start()
    try:
        assert swept.wait(30)
    finally:
        sweeper.stop()
    assert [e.job for e in area.jobs()] == ["live"]


class Unreachable(ResultsArea):
    """An area whose listing fails (an S3 endpoint down)."""

    def jobs(self) -> Iterator[JobEntry]:
        raise OSError("connection refused")


def test_a_failed_sweep_is_logged_and_the_next_one_runs(tmp_path: Path) -> None:
    assert ResultsSweeper(Unreachable(str(tmp_path)), interval=60, lifetime=60).tick() is None
    area = ResultsArea(str(tmp_path / "results"))
    area.create_job("p", "old", time.time() - GRACE_SECONDS - 1, SCHEMA)
    outcome = ResultsSweeper(area, interval=60, lifetime=60).tick()
    assert outcome is not None and [d["job"] for d in outcome.deleted] == ["old"]


def test_an_interval_of_zero_starts_no_thread(tmp_path: Path) -> None:
    def sweeps() -> int:  # other tests' servers may be sweeping in this process
        return sum(t.name == "lake-results-sweep" for t in threading.enumerate())

    before = sweeps()
    sweeper = ResultsSweeper(ResultsArea(str(tmp_path)), interval=0, lifetime=60).start()
    assert sweeps() == before
    sweeper.stop()

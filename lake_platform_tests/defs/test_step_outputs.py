"""What ``step_outputs`` holds in process memory about the step attempts whose outputs it is
committing together: an attempt that failed after its first output (every retry too) leaves
nothing behind once it is over, so a long-lived in-process executor does not grow with failed
steps; an attempt under way keeps what it handled until its last output publishes."""

import gc
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs import step_outputs
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import load_settings
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.maintenance.helpers import make_lake

LEFT, RIGHT = "p.w.ns.left", "p.w.ns.right"
#: Attempts still to fail after their first output (the test sets it).
FAILING: list[int] = [0]
#: What ``step_outputs`` held between the step's two outputs, per attempt.
HELD: list[int] = []


def ids(n: int) -> pa.Table:
    return pa.table({"id": pa.array([n], pa.int64())})


@dg.multi_asset(
    outs={
        "left": dg.AssetOut(key=LEFT.split("."), io_manager_key="lake_io"),
        "right": dg.AssetOut(key=RIGHT.split("."), io_manager_key="lake_io"),
    },
    retry_policy=dg.RetryPolicy(max_retries=2),
)
def pair(context: dg.AssetExecutionContext) -> Iterator[dg.Output[pa.Table]]:
    yield dg.Output(ids(context.retry_number), "left")
    gc.collect()  # the attempts before this one are over: what they held goes
    HELD.append(step_outputs.open_attempts())
    if FAILING[0] > 0:
        FAILING[0] -= 1
        raise RuntimeError("the source went away after the first output")
    yield dg.Output(ids(context.retry_number), "right")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    HELD.clear()
    yield home


@pytest.fixture
def before() -> Iterator[int]:
    """The attempts open as the test starts, earlier tests' (in reference cycles) collected
    first, as they are in the step. Everything alive then is frozen (``gc.freeze``), so the
    test's collections scan only what it makes, not this process's whole heap (Dagster, Lance,
    pandas: ~1 s a collection on 2 cores); none of it is an attempt of this test."""
    gc.collect()
    gc.freeze()
    try:
        yield step_outputs.open_attempts()
    finally:
        gc.unfreeze()


def materialize(home: Path, failing: int) -> dg.ExecuteInProcessResult:
    FAILING[0] = failing
    lake = LakeResource(home=str(home))
    with sqlite_instance() as instance:
        return dg.materialize(
            [pair],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake)},
            raise_on_error=False,
        )


def test_failed_attempts_leave_nothing_in_memory(home: Path, before: int) -> None:
    result = materialize(home, failing=3)  # the attempt and both retries fail
    assert not result.success
    assert HELD == [before + 1] * 3  # each attempt's first output held while it ran
    del result
    gc.collect()
    assert step_outputs.open_attempts() == before
    with Catalog(load_settings(home=home)) as catalog:  # nothing published
        assert catalog.reads.open_table(LEFT).count_rows() == 0  # created empty, to branch from
        assert [t.name for t in catalog.reads.list_tables()] == [LEFT]


def test_a_retry_after_failed_attempts_still_publishes_both(home: Path, before: int) -> None:
    result = materialize(home, failing=2)  # the third attempt succeeds
    assert result.success
    del result
    gc.collect()
    assert step_outputs.open_attempts() == before
    with Catalog(load_settings(home=home)) as catalog:
        for table in (LEFT, RIGHT):
            assert catalog.reads.open_table(table).to_reader().read_all()["id"].to_pylist() == [2]

"""A multi-asset's outputs to governed tables land together or not at all: ``orders`` and
``order_lines`` written by one step are one registry transaction (``defs/step_outputs.py``); a
step failing after its first output, or an output the governance refuses, leaves both tables as
they were, and a retry or re-execution writes both once."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import load_settings
from lake_platform_tests.maintenance.helpers import make_lake

ORDERS, LINES = "p.w.ns.orders", "p.w.ns.order_lines"
#: What the step does this attempt: "ok", "fail" (raises after its first output), "drift"
#: (order_lines with a column type the table refuses), "late" (raises after both); consumed one
#: per attempt.
PLAN: list[str] = []


def orders_of(n: int) -> pa.Table:
    return pa.table({"order_id": pa.array([n], pa.int64())})


def lines_of(n: int, drift: bool = False) -> pa.Table:
    ids = pa.array([str(n), str(n)]) if drift else pa.array([n, n], pa.int64())
    return pa.table({"order_id": ids, "line": pa.array([1, 2], pa.int64())})


@dg.multi_asset(
    outs={
        "orders": dg.AssetOut(key=ORDERS.split("."), io_manager_key="lake_io"),
        "order_lines": dg.AssetOut(key=LINES.split("."), io_manager_key="lake_io"),
    },
    retry_policy=dg.RetryPolicy(max_retries=1),
)
def shop(context: dg.AssetExecutionContext) -> Iterator[dg.Output[pa.Table]]:
    what = PLAN.pop(0) if PLAN else "ok"
    n = context.retry_number + 10
    yield dg.Output(orders_of(n), "orders")
    if what == "fail":
        raise RuntimeError("the source went away after the orders")
    yield dg.Output(lines_of(n, drift=what == "drift"), "order_lines")
    if what == "late":
        raise RuntimeError("failed after both outputs were handled")


@dg.asset(ins={"orders": dg.AssetIn(key=ORDERS.split("."), input_manager_key="lake_io")})
def orders_seen(orders: pa.Table) -> list[int]:
    return orders["order_id"].to_pylist()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    with make_lake(home) as catalog:
        catalog.tables.create_table(ORDERS, orders_of(0).to_reader())
        catalog.tables.create_table(LINES, lines_of(0).to_reader())
    PLAN.clear()
    yield home
    PLAN.clear()


def lake(home: Path) -> Catalog:
    return Catalog(load_settings(home=home))


def state(home: Path) -> dict[str, tuple[int, list[int]]]:
    with lake(home) as catalog:
        out = {}
        for table in (ORDERS, LINES):
            snap = catalog.reads.open_table(table)
            out[table] = (snap.version, sorted(snap.dataset.to_table()["order_id"].to_pylist()))
        return out


def resources() -> dict[str, object]:
    return {"lake_io": LakeIOManager(lake=LakeResource())}


def test_both_outputs_land_in_one_registry_transaction(home: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([shop], instance=instance, resources=resources())
    assert result.success
    assert state(home) == {ORDERS: (2, [0, 10]), LINES: (2, [0, 0, 10, 10])}
    with lake(home) as catalog:
        heads = [catalog.reads.history(t)[-1] for t in (ORDERS, LINES)]
    assert [h.operation for h in heads] == ["publish", "publish"]
    assert heads[0].commit_id.rsplit("-", 1)[0] == heads[1].commit_id.rsplit("-", 1)[0]  # one publish
    for event in result.get_asset_materialization_events():
        assert event.materialization.metadata["lake/version"].value == 2  # main's, after the publish


def test_a_step_failing_after_its_first_output_leaves_both_tables_as_they_were(home: Path) -> None:
    before = state(home)
    PLAN[:] = ["fail", "fail"]  # the retry fails too
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([shop], instance=instance, resources=resources(), raise_on_error=False)
        assert not result.success
        events = result.get_asset_materialization_events()
        assert [e.asset_key.path[-1] for e in events] == ["orders", "orders"]  # recorded, on branches
        # Another run's input passes over the unpublished materializations to main's version.
        seen = dg.materialize(
            [shop, orders_seen], selection=[orders_seen], instance=instance, resources=resources()
        )
        assert seen.output_for_node("orders_seen") == [0]
    assert state(home) == before


def test_an_output_the_governance_refuses_leaves_the_other_unwritten(home: Path) -> None:
    before = state(home)
    PLAN[:] = ["drift", "drift"]
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([shop], instance=instance, resources=resources(), raise_on_error=False)
    assert not result.success
    assert state(home) == before


def test_a_retry_after_a_failure_writes_both_once_from_the_retry(home: Path) -> None:
    PLAN[:] = ["fail", "ok"]
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([shop], instance=instance, resources=resources())
    assert result.success
    assert state(home) == {ORDERS: (2, [0, 11]), LINES: (2, [0, 0, 11, 11])}  # the retry's rows only


def test_a_retry_after_the_publish_landed_writes_nothing_again(home: Path) -> None:
    PLAN[:] = ["late", "ok"]
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([shop], instance=instance, resources=resources())
    assert result.success
    assert state(home) == {ORDERS: (2, [0, 10]), LINES: (2, [0, 0, 10, 10])}  # the first attempt's, once
    replayed = [e.materialization.metadata for e in result.get_asset_materialization_events()][2:]
    assert [(m["lake/replayed"].value, m["lake/version"].value) for m in replayed] == [(True, 2), (True, 2)]


def shop_job() -> dg.JobDefinition:
    return dg.Definitions(
        assets=[shop],
        jobs=[dg.define_asset_job("shop_job", [shop], executor_def=dg.in_process_executor)],
        resources=resources(),
    ).resolve_job_def("shop_job")


def test_a_reexecution_from_failure_writes_both_once(home: Path) -> None:
    PLAN[:] = ["fail", "fail", "ok"]
    job = dg.reconstructable(shop_job)
    with dg.DagsterInstance.ephemeral() as instance:
        first = dg.execute_job(job, instance=instance)
        assert not first.success
        again = dg.execute_job(
            job,
            instance=instance,
            reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, instance),
        )
        assert again.success
    assert state(home) == {ORDERS: (2, [0, 10]), LINES: (2, [0, 0, 10, 10])}


@dg.multi_asset(
    outs={
        "orders": dg.AssetOut(key=ORDERS.split("."), io_manager_key="lake_io"),
        "order_lines": dg.AssetOut(key=LINES.split("."), io_manager_key="lake_io", is_required=False),
    },
)
def maybe_lines() -> Iterator[dg.Output[pa.Table]]:
    yield dg.Output(orders_of(5), "orders")


def test_an_optional_output_among_them_is_refused_unwritten(home: Path) -> None:
    before = state(home)
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([maybe_lines], instance=instance, resources=resources(), raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "optional output(s) order_lines" in str(failure.step_failure_data.error)
    assert state(home) == before

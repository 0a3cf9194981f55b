"""An asset whose output holds no rows, through the Lake IO manager: appended, it commits nothing
and its materialization records the table's current version (what downstream reads pin to);
overwritten, it empties the table in one commit. In a write-audit-publish run or a multi-asset
step, such an output makes no branch and is left out of the publish: the others publish (together)."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import load_settings
from lake_platform_tests.defs.wap_sensor import publish
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.quiet"


@dg.asset(key=TABLE.split("."), io_manager_key="lake_io")
def quiet() -> pa.Table:
    return pa.table({"id": pa.array([], pa.int64())})


def test_no_rows_appended_commit_nothing_and_overwritten_empty_the_table(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with make_lake(home) as catalog:
        catalog.tables.create_table(TABLE, pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
    lake = LakeResource(home=str(home))
    versions = []
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        for mode in ("append", "append", "overwrite"):
            result = dg.materialize(
                [quiet],
                instance=instance,
                resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, write_mode=mode)},
            )
            (event,) = result.get_asset_materialization_events()
            recorded = event.materialization.metadata["lake/version"].value
            versions.append((recorded, catalog.reads.open_table(TABLE).version))
        assert versions == [(1, 1), (1, 1), (2, 2)]
        assert catalog.reads.open_table(TABLE).count_rows() == 0
        assert [e.operation for e in catalog.reads.history(TABLE)] == ["create", "overwrite"]


LOUD = "p.w.ns.loud"


@dg.asset(key=LOUD.split("."), io_manager_key="lake_io")
def loud() -> pa.Table:
    return pa.table({"id": pa.array([7], pa.int64())})


def tables(home: Path) -> LakeResource:
    with make_lake(home) as catalog:
        for table in (TABLE, LOUD):
            catalog.tables.create_table(table, pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
    return LakeResource(home=str(home))


def versions(catalog: Catalog) -> dict[str, tuple[int, list[str]]]:
    return {
        t: (catalog.reads.open_table(t).version, [e.operation for e in catalog.reads.history(t)])
        for t in (TABLE, LOUD)
    }


def test_an_empty_output_in_a_wap_run_makes_no_branch_and_the_others_publish(tmp_path: Path) -> None:
    home = tmp_path / "home"
    lake = tables(home)
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        result = dg.materialize(
            [quiet, loud],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        )
        assert result.success
        meta = {
            e.asset_key.path[-1]: e.materialization.metadata
            for e in result.get_asset_materialization_events()
        }
        assert "lake/branch" not in meta["quiet"] and meta["quiet"]["lake/version"].value == 1
        assert "lake/branch" in meta["loud"]
        assert catalog.branches.list_branches(TABLE) == []
        assert publish(home, instance, result) is None
        assert versions(catalog) == {
            TABLE: (1, ["create"]),
            LOUD: (2, ["create", "branch-create", "append", "publish"]),
        }
        assert catalog.branches.list_branches(LOUD) == []
        alone = dg.materialize(
            [quiet],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        )
        assert alone.success
        assert isinstance(publish(home, instance, alone), dg.SkipReason)  # the run wrote no branch
        assert versions(catalog)[TABLE] == (1, ["create"])


#: Which of ``pair``'s outputs are empty this run.
EMPTY: set[str] = set()


@dg.multi_asset(
    outs={
        "quiet": dg.AssetOut(key=TABLE.split("."), io_manager_key="lake_io"),
        "loud": dg.AssetOut(key=LOUD.split("."), io_manager_key="lake_io"),
    }
)
def pair() -> Iterator[dg.Output[pa.Table]]:
    for name in ("quiet", "loud"):
        ids = [] if name in EMPTY else [9]
        yield dg.Output(pa.table({"id": pa.array(ids, pa.int64())}), name)


def test_an_empty_output_of_a_multi_asset_step_is_left_out_of_its_publish(tmp_path: Path) -> None:
    home = tmp_path / "home"
    lake = tables(home)
    resources = {"lake": lake, "lake_io": LakeIOManager(lake=lake)}
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        EMPTY.clear()
        EMPTY.add("quiet")
        assert dg.materialize([pair], instance=instance, resources=resources).success
        assert versions(catalog) == {
            TABLE: (1, ["create"]),
            LOUD: (2, ["create", "branch-create", "append", "publish"]),
        }
        EMPTY.add("loud")
        result = dg.materialize([pair], instance=instance, resources=resources)
        assert result.success
        recorded = [
            e.materialization.metadata["lake/version"].value
            for e in result.get_asset_materialization_events()
        ]
        assert recorded == [1, 2]
        assert versions(catalog) == {
            TABLE: (1, ["create"]),
            LOUD: (2, ["create", "branch-create", "append", "publish"]),
        }
        assert catalog.branches.list_branches(TABLE) == catalog.branches.list_branches(LOUD) == []
    EMPTY.clear()


@dg.asset(
    key=TABLE.split("."), io_manager_key="lake_io", metadata={"write_mode": "merge", "key_columns": ["id"]}
)
def quiet_merge() -> pa.Table:
    return pa.table({"id": pa.array([], pa.int64())})


def test_a_merge_of_no_rows_in_a_wap_run_makes_no_branch_as_an_append(tmp_path: Path) -> None:
    """Merging nothing (matched rows updated, the others inserted) changes nothing: no branch,
    no version of it, the materialization records main's head and nothing is published."""
    home = tmp_path / "home"
    lake = tables(home)
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        result = dg.materialize(
            [quiet_merge],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        )
        (event,) = result.get_asset_materialization_events()
        meta = event.materialization.metadata
        assert "lake/branch" not in meta and meta["lake/version"].value == 1
        assert catalog.branches.list_branches(TABLE) == []
        assert isinstance(publish(home, instance, result), dg.SkipReason)
        assert versions(catalog)[TABLE] == (1, ["create"])

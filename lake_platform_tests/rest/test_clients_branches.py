"""Stock clients, unmodified, reading and writing a branch made here by its registry name through
the REST server: lancedb 0.40's ``open_table(..., branch=)`` and ``branches.checkout`` (its own
Lance, in a side environment), pylance 14's ``checkout_version((branch, version))``. Lance checks
that the manifest it is handed belongs to the branch it asked for, so a branch's Lance branch
carries the registry's name (``catalog/branches.py``); a branch made again after a purge reads
its own files. lancedb's ``branches.create`` (Lance's own commit of a branch clone, which the
registry refuses: branches are made by CreateTableBranch) leaves a staging manifest that the
orphan scan reports and its reclaim removes, and that does not keep the name from a later
CreateTableBranch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lake_platform.maintenance import orphans
from lake_platform_tests.maintenance.helpers import age_tree
from lake_platform_tests.rest.clients import rest_namespace
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.test_clients_lancedb import PINS
from lake_platform_tests.side_envs import run_json, side_python

T = "p.w.ns.t"
TABLE_ID = ["p", "w", "ns", "t"]

#: lancedb as a user writes it: a branch's head, one of its versions, a checkout, an append to
#: the branch; then a branch made by Lance itself (``branches.create``).
LANCEDB = """
import json, sys
import lancedb, pyarrow as pa
url, token = sys.argv[1], sys.argv[2]
db = lancedb.connect_namespace("rest", {"uri": url, "header.Authorization": "Bearer " + token})
NS = ["p", "w", "ns"]
def ids(table):
    return sorted(table.to_arrow().column("id").to_pylist())
out = {}
head = db.open_table("t", namespace_path=NS, branch="dev")
out["head"] = [head.version, ids(head)]
at = db.open_table("t", namespace_path=NS, branch="dev", version=2)
out["at_v2"] = [at.version, ids(at)]
main = db.open_table("t", namespace_path=NS)
out["checkout"] = ids(main.branches.checkout("dev"))
out["main"] = ids(main)
out["added"] = head.add(pa.table({"id": pa.array([5], pa.int64())})).version
out["after_add"] = ids(db.open_table("t", namespace_path=NS, branch="dev"))
try:
    main.branches.create("feat")
    out["create"] = "made"
except Exception as exc:
    out["create"] = str(exc).splitlines()[0][:200]
print(json.dumps(out))
"""


def ids_of(ds: lance.LanceDataset) -> list[int]:
    return sorted(ds.to_table(columns=["id"]).column("id").to_pylist())


def rows(ids: list[int]) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64())}).to_reader()


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    """Main at [1, 2, 3] (v1) then [1, 2, 3, 10] (v2); branch ``dev`` from v1 with [4] (its v2)."""
    for lake in start_rest_lake(tmp_path):
        catalog = lake.catalog
        catalog.tables.create_table(T, pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        catalog.branches.create_branch(T, "dev")
        catalog.branch_writes.append(T, "dev", rows([4]))
        catalog.tables.append(T, rows([10]))
        yield lake


def test_lancedb_reads_and_appends_to_a_branch_by_its_name(lake: RestLake) -> None:
    python = side_python("lancedb", PINS)
    out = run_json(python, LANCEDB, lake.url, lake.tokens["writer"])
    create = out.pop("create")
    assert out == {
        "head": [2, [1, 2, 3, 4]],
        "at_v2": [2, [1, 2, 3, 4]],
        "checkout": [1, 2, 3, 4],
        "main": [1, 2, 3, 10],
        "added": 3,
        "after_add": [1, 2, 3, 4, 5],
    }
    # the append was a registry commit on the branch's line; main did not move
    catalog = lake.catalog
    assert ids_of(catalog.branches.open_branch(T, "dev").dataset) == [1, 2, 3, 4, 5]
    assert catalog.branches.describe_branch(T, "dev")["version"] == 3
    assert catalog.reads.open_table(T).version == 2
    entry = catalog.reads.history(T)[-1]
    assert (entry.operation, entry.actor, entry.to_version, entry.detail.get("branch")) == (
        "append",
        "etl",
        3,
        "dev",
    )
    # Lance's own branch commit is refused (no branch feat in the registry): nothing is made,
    # what it left is an orphan the scan reports, and the name stays free for CreateTableBranch
    assert "unknown" in create
    assert [b.branch for b in catalog.branches.list_branches(T)] == ["dev"]
    report = orphans.scan(catalog, T, min_age=timedelta(hours=1), now=time.time() + 7200)
    assert report.unknown_branches == []
    assert {o.path.split("/", 2)[1] for o in report.orphans if o.path.startswith("tree/")} == {"feat"}
    # the reclaim removes what it left, once old enough, and nothing else
    folder = Path(catalog.reads.open_table(T).record.folder_uri)
    left = sorted(str(p.relative_to(folder)) for p in (folder / "tree" / "feat").rglob("*") if p.is_file())
    assert left and all(p.startswith(("tree/feat/_versions/", "tree/feat/_transactions/")) for p in left)
    age_tree(folder / "tree" / "feat", 7200)
    reclaimed = orphans.reclaim(catalog, T, timedelta(hours=1))
    assert sorted(d["path"] for d in reclaimed.deleted) == left
    assert not any(p.is_file() for p in (folder / "tree" / "feat").rglob("*"))
    catalog.branches.create_branch(T, "feat")
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    main = lance.dataset(namespace_client=ns, table_id=TABLE_ID)
    assert ids_of(main.checkout_version(("feat", None))) == [1, 2, 3, 10]


def test_pylance_reads_a_branch_by_its_name_at_its_head_and_a_version(lake: RestLake) -> None:
    lake.catalog.branch_writes.append(T, "dev", rows([5]))
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    main = lance.dataset(namespace_client=ns, table_id=TABLE_ID)
    assert ids_of(main) == [1, 2, 3, 10]
    head = main.checkout_version(("dev", None))
    assert (head.version, ids_of(head)) == (3, [1, 2, 3, 4, 5])
    assert ids_of(main.checkout_version(("dev", 2))) == [1, 2, 3, 4]
    assert ids_of(main.checkout_version(("dev", 1))) == [1, 2, 3]


def test_a_branch_made_again_after_a_purge_reads_its_own_files(lake: RestLake) -> None:
    catalog = lake.catalog
    catalog.branch_trash.delete_branch(T, "dev")  # in the trash: still readable by lake, name taken
    catalog.branch_trash.undrop_branch(T, "dev")
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    main = lance.dataset(namespace_client=ns, table_id=TABLE_ID)
    assert ids_of(main.checkout_version(("dev", None))) == [1, 2, 3, 4]
    catalog.branch_trash.delete_branch(T, "dev", purge=True)
    catalog.branches.create_branch(T, "dev")  # from main's head, v2
    catalog.branch_writes.append(T, "dev", rows([6]))
    again = lance.dataset(namespace_client=ns, table_id=TABLE_ID).checkout_version(("dev", None))
    assert (again.version, ids_of(again)) == (3, [1, 2, 3, 6, 10])
    assert ids_of(catalog.branches.open_branch(T, "dev").dataset) == [1, 2, 3, 6, 10]

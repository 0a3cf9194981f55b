"""daft with daft-lance, unmodified, against our REST server (``namespace_impl="rest"``): write
(create), read, append, group-by, time travel, overwrite, compaction and a scalar index; every
write is a registry commit under the token's principal. daft-lance pins its own pylance
(14.0.3), so it runs in a side environment (``lake_platform_tests/side_envs.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.seen_requests import seen_requests
from lake_platform_tests.side_envs import run_json, side_python

#: daft 0.7.26, daft-lance 0.6.0 and their whole closure (pandas: daft-lance's compaction needs it).
PINS = (
    "daft==0.7.26",
    "daft-lance==0.6.0",
    "annotated-types==0.8.0",
    "lance-namespace==0.13.0",
    "lance-namespace-urllib3-client==0.13.0",
    "numpy==2.4.6",
    "packaging==26.4",
    "pandas==3.1.1",
    "pyarrow==25.0.1",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "pylance==14.0.3",
    "python-dateutil==4.0.0",
    "tqdm==4.67.3",
    "typing-extensions==4.16.0",
    "typing-inspection==0.4.5",
    "tzdata==2026.6",
    "urllib3==2.8.0",
)

SCRIPT = """
import json, sys
import daft, daft_lance
url, token = sys.argv[1], sys.argv[2]
where = dict(
    table_id=["p", "w", "ns", "events"],
    namespace_impl="rest",
    namespace_properties={"uri": url, "header.Authorization": "Bearer " + token},
)
def frame(ids, group):
    return daft.from_pydict({"id": ids, "g": [group] * len(ids)})
def ids(**kw):
    return sorted(daft_lance.read_lance(**where, **kw).to_pydict()["id"])
out = {"create": daft_lance.write_lance(frame([1, 2, 3], "a"), mode="create", **where).to_pydict()["version"]}
out["read"] = ids()
out["append"] = daft_lance.write_lance(frame([4, 5], "b"), mode="append", **where).to_pydict()["version"]
sums = daft_lance.read_lance(**where).groupby("g").agg(daft.col("id").sum()).sort("g").to_pydict()
out["group_by"] = [sums["g"], sums["id"]]
out["at_v1"] = ids(version=1)
out["overwrite"] = daft_lance.write_lance(frame([9], "z"), mode="overwrite", **where).to_pydict()["version"]
out["after_overwrite"] = ids()
daft_lance.write_lance(frame([10], "z"), mode="append", **where)
metrics = daft_lance.compact_files(**where)
out["compacted"] = [metrics.fragments_removed, metrics.fragments_added]
daft_lance.create_scalar_index(column="id", index_type="BTREE", **where)
out["final"] = ids()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path_factory.mktemp("daft"))


def test_daft_writes_reads_appends_overwrites_compacts_and_indexes(lake: RestLake) -> None:
    python = side_python("daft", PINS)
    with seen_requests() as seen:
        out = run_json(python, SCRIPT, lake.url, lake.tokens["writer"])
    assert out == {
        "create": [1],
        "read": [1, 2, 3],
        "append": [2],
        "group_by": [["a", "b"], [6, 9]],
        "at_v1": [1, 2, 3],
        "overwrite": [3],
        "after_overwrite": [9],
        "compacted": [2, 1],
        "final": [9, 10],
    }
    history = lake.catalog.reads.history("p.w.ns.events")
    assert [(e.operation, e.actor, e.from_version, e.to_version, e.rows_added) for e in history] == [
        ("declare", "etl", None, None, 0),
        ("create", "etl", 0, 1, 3),
        ("append", "etl", 1, 2, 2),
        ("overwrite", "etl", 2, 3, 1),
        ("append", "etl", 3, 4, 1),
        ("reserve-fragments", "etl", 4, 5, 0),  # daft's distributed compaction reserves ids first
        ("rewrite", "etl", 5, 6, 0),
        ("create-index", "etl", 6, 7, 0),
    ]
    assert [e.commit_id for e in lake.catalog.reads.log("p.w.ns.events")] == [e.commit_id for e in history]
    snap = lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 7 and sorted(snap.to_reader().read_all().column("id").to_pylist()) == [9, 10]
    assert len(snap.dataset.get_fragments()) == 1  # the compaction's one fragment is what is registered
    assert [(i.name, i.field_names) for i in snap.dataset.describe_indices()] == [("id_idx", ["id"])]
    # daft creates through DeclareTable and commits each version through CreateTableVersion
    ops = [op for op, _ in seen]
    assert ops.count("DeclareTable") == 1 and ops.count("CreateTableVersion") == 7

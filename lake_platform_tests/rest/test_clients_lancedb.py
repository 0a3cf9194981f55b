"""lancedb, unmodified, against our REST server: ``lancedb.connect_namespace("rest", ...)`` (its
public API for a REST namespace) lists, creates, opens, appends, searches, builds an index and
time-travels; with ``namespace_client_pushdown_operations`` it creates through CreateTable and
queries through QueryTable, a filtered scan of 1,250,000 rows of a 1,500,000-row table exactly.
Every write it makes is a registry commit. lancedb pins its own
Lance, so it runs in a side environment (``lake_platform_tests/side_envs.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.observability.audit import audit_target, read_records
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.seen_requests import seen_requests
from lake_platform_tests.rest.test_arrow_file import numbers
from lake_platform_tests.side_envs import run_json, side_python

#: lancedb 0.40.0 and its whole dependency closure.
PINS = (
    "lancedb==0.40.0",
    "annotated-types==0.8.0",
    "deprecation==2.1.0",
    "lance-namespace==0.13.0",
    "lance-namespace-urllib3-client==0.13.0",
    "numpy==2.4.6",
    "overrides==7.7.0",
    "packaging==26.4",
    "pyarrow==26.0.1",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "python-dateutil==4.0.0",
    "tqdm==4.70.1",
    "typing-extensions==4.16.0",
    "typing-inspection==0.4.5",
    "tzdata==2026.6",
    "urllib3==2.8.0",
)
NS = ["p", "w", "ns"]

#: The client's calls, as a user writes them; prints what it read and the versions it saw.
LOCAL = """
import json, sys
import lancedb, pyarrow as pa
from lancedb.index import BTree
url, token = sys.argv[1], sys.argv[2]
db = lancedb.connect_namespace("rest", {"uri": url, "header.Authorization": "Bearer " + token})
NS = ["p", "w", "ns"]
vec = pa.list_(pa.float32(), 2)
def rows(ids, vecs):
    return pa.table({"id": pa.array(ids, pa.int64()), "vec": pa.array(vecs, vec)})
out = {"namespaces": db.list_namespaces(["p", "w"]).namespaces}
table = db.create_table("events", rows([1, 2, 3], [[1, 0], [0, 1], [1, 1]]), namespace_path=NS)
out["created"] = table.version
table = db.open_table("events", namespace_path=NS)
out["opened_rows"] = table.count_rows()
out["added"] = table.add(rows([4], [[2, 2]])).version
out["where"] = sorted(table.search().where("id > 2").select(["id"]).to_arrow().column("id").to_pylist())
out["nearest"] = table.search([1.0, 0.0]).limit(2).select(["id"]).to_arrow().column("id").to_pylist()
table.create_index("id", config=BTree())
out["indices"] = [(i.name, i.index_type, i.columns) for i in table.list_indices()]
out["versions"] = [v["version"] for v in table.list_versions()]
out["at_v1"] = db.open_table("events", namespace_path=NS, version=1).count_rows()
out["tables"] = db.list_tables(NS).tables
print(json.dumps(out))
"""

PUSHED = """
import json, sys
import lancedb, pyarrow as pa
url, token = sys.argv[1], sys.argv[2]
db = lancedb.connect_namespace(
    "rest",
    {"uri": url, "header.Authorization": "Bearer " + token},
    namespace_client_pushdown_operations=["QueryTable", "CreateTable"],
)
NS = ["p", "w", "ns"]
vecs = pa.array([[float(i), 0.0] for i in range(10)], pa.list_(pa.float32(), 2))
rows = pa.table({"id": pa.array(range(10), pa.int64()), "g": pa.array(["a", "b"] * 5), "vec": vecs})
table = db.create_table("pushed", rows, namespace_path=NS)
out = {"created": table.version}
query = table.search().where("id >= 6 AND g = 'a'").select(["id"]).limit(100)
out["where"] = sorted(query.to_arrow().column("id").to_pylist())
out["page"] = table.search().select(["id"]).limit(2).offset(1).to_arrow().column("id").to_pylist()
out["nearest"] = table.search([7.2, 0.0]).limit(2).select(["id"]).to_arrow().column("id").to_pylist()
out["count"] = table.count_rows("id > 2")
print(json.dumps(out))
"""


#: A scan of most of a big table through QueryTable; prints counts and sums, not rows.
BIG = """
import json, sys
import lancedb, pyarrow.compute as pc
url, token, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = lancedb.connect_namespace(
    "rest",
    {"uri": url, "header.Authorization": "Bearer " + token},
    namespace_client_pushdown_operations=["QueryTable"],
)
table = db.open_table("big", namespace_path=["p", "w", "ns"])
answer = table.search().where("id >= 250000").select(["id", "v"]).limit(rows).to_arrow()
out = {"rows": answer.num_rows, **{c: pc.sum(answer.column(c)).as_py() for c in ("id", "v")}}
out["unlimited"] = table.search().where("id >= 250000").select(["id"]).limit(None).to_arrow().num_rows
print(json.dumps(out))
"""
BIG_ROWS = 1_500_000


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path_factory.mktemp("lancedb"))


@pytest.fixture(scope="module")
def python() -> Path:
    return side_python("lancedb", PINS)


def client(python: Path, lake: RestLake, script: str) -> tuple[Any, list[tuple[str, str]]]:
    with seen_requests() as seen:
        out = run_json(python, script, lake.url, lake.tokens["writer"])
    return out, seen


def test_lancedb_creates_appends_searches_indexes_and_time_travels(lake: RestLake, python: Path) -> None:
    out, seen = client(python, lake, LOCAL)
    assert "events" in out.pop("tables")  # beside "pushed" when the other test ran first
    assert out == {
        "namespaces": ["ns"],
        "created": 1,
        "opened_rows": 3,
        "added": 2,
        "where": [3, 4],
        "nearest": [1, 3],
        "indices": [["id_idx", "BTree", ["id"]]],
        "versions": [1, 2, 3],
        "at_v1": 3,
    }
    # each of its writes is a registry commit under the token's principal, in Lance's terms
    history = lake.catalog.reads.history("p.w.ns.events")
    assert [(e.operation, e.actor, e.to_version, e.rows_added) for e in history] == [
        ("declare", "etl", None, 0),
        ("create", "etl", 1, 3),
        ("append", "etl", 2, 1),
        ("create-index", "etl", 3, 0),
    ]
    assert [e.commit_id for e in lake.catalog.reads.log("p.w.ns.events")] == [e.commit_id for e in history]
    snap = lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 3 and snap.to_reader().read_all().num_rows == 4
    # it declares, commits each version through CreateTableVersion (managed versioning), reads
    # locally from the location DescribeTable names, and every answer is a success
    ops = [op for op, _ in seen]
    assert ops.count("DeclareTable") == 1 and ops.count("CreateTableVersion") == 3
    assert set(seen) == {
        (op, "200")
        for op in (
            "ListNamespaces",
            "ListTables",
            "DeclareTable",
            "DescribeTable",
            "ListTableVersions",
            "DescribeTableVersion",
            "CreateTableVersion",
        )
    }


def test_lancedb_pushes_scans_down_and_declares_to_create(lake: RestLake, python: Path) -> None:
    audit = Path(audit_target(lake.settings))
    before = sum(1 for _ in read_records(audit))
    out, seen = client(python, lake, PUSHED)
    assert out == {"created": 1, "where": [6, 8], "page": [1, 2], "nearest": [7, 8], "count": 7}
    # lancedb 0.40 declares and writes itself even with CreateTable pushed down (it sends the
    # reference server the same DeclareTable), and searches vectors and counts rows locally:
    # only the two scans are pushed down
    assert [op for op, _ in seen] == [
        "DeclareTable",
        "ListTableVersions",
        "ListTableVersions",
        "CreateTableVersion",
        "QueryTable",
        "QueryTable",
    ]
    assert {status for _, status in seen} == {"200"}
    history = lake.catalog.reads.history("p.w.ns.pushed")
    assert [(e.operation, e.actor, e.to_version, e.rows_added) for e in history] == [
        ("declare", "etl", None, 0),
        ("create", "etl", 1, 10),
    ]
    # the scans ran here: one audit line each, the filter and the page as sent, the version pinned
    queries = list(read_records(audit))[before:]
    assert [(r["principal"], r["status"], r["rows"]) for r in queries] == [("etl", "OK", 2), ("etl", "OK", 2)]
    assert "id >= Int64(6) AND" in queries[0]["sql"] and queries[1]["sql"].endswith("LIMIT 2 OFFSET 1")
    assert {(t["table"], t["version"]) for r in queries for t in r["tables"]} == {("p.w.ns.pushed", 1)}


def test_lancedb_pushes_down_a_scan_of_over_a_million_rows_exactly(lake: RestLake, python: Path) -> None:
    lake.catalog.tables.create_table("p.w.ns.big", numbers(BIG_ROWS))  # id 0.., v = id / 2
    audit = Path(audit_target(lake.settings))
    before = sum(1 for _ in read_records(audit))
    with seen_requests() as seen:
        out = run_json(python, BIG, lake.url, lake.tokens["reader"], str(BIG_ROWS))
    wanted = BIG_ROWS - 250_000
    id_sum = (250_000 + BIG_ROWS - 1) * wanted // 2
    # exact: the halves stay below 2**52
    assert out == {"rows": wanted, "id": id_sum, "v": id_sum / 2, "unlimited": 10}
    assert [op for op, _ in seen] == ["DescribeTable", "ListTableVersions", "QueryTable", "QueryTable"]
    # the limit as sent (lancedb's pushdown sends k=10 for a plain search without one)
    queries = list(read_records(audit))[before:]
    assert [(r["status"], r["rows"]) for r in queries] == [("OK", wanted), ("OK", 10)]
    assert queries[0]["sql"].endswith(f"LIMIT {BIG_ROWS} OFFSET 0")
    assert queries[1]["sql"].endswith("LIMIT 10 OFFSET 0")


#: The same nested projections read by lancedb locally and pushed down through QueryTable.
NESTED = """
import json, sys
import lancedb
url, token = sys.argv[1], sys.argv[2]
props = {"uri": url, "header.Authorization": "Bearer " + token}
out = {}
for how, pushed in (("local", []), ("pushed", ["QueryTable"])):
    db = lancedb.connect_namespace("rest", props, namespace_client_pushdown_operations=pushed)
    table = db.open_table("nested", namespace_path=["p", "w", "ns"])
    for columns in (["s.a"], ["id", "s.b"], ["s"]):
        answer = table.search().select(columns).limit(10).to_arrow()
        out[how + " " + ",".join(columns)] = [answer.schema.names, answer.to_pylist()]
print(json.dumps(out))
"""


def test_lancedb_pushes_down_a_projection_of_nested_fields(lake: RestLake, python: Path) -> None:
    """The spec's field paths (``s.a``: field ``a`` of struct column ``s``), as lancedb sends
    them: the pushed-down scan answers what lancedb's own local scan answers (a column named by
    the path). Before, QueryTable refused ``s.a`` as an unknown column (400)."""
    struct = pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    lake.catalog.tables.create_table("p.w.ns.nested", pa.table({"id": [1, 2], "s": struct}))
    out, seen = client(python, lake, NESTED)
    for columns in ("s.a", "id,s.b", "s"):
        assert out[f"pushed {columns}"] == out[f"local {columns}"], columns
    assert out["pushed s.a"] == [["s.a"], [{"s.a": 1}, {"s.a": 2}]]
    assert ("QueryTable", "200") in seen and {status for _, status in seen} == {"200"}

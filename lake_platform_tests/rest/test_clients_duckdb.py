"""DuckDB's lance extension (1.5.5, from its PyPI package), unmodified, against our REST server and
against pylance's reference server (``RestAdapter("dir")``) with the same namespaces and table.

It attaches a namespace and lists its tables on both. Everything that names a table fails, and
the client is at fault: it tries two spellings of the id, neither ``["p", "w", "ns", "events"]``:
the bare name ``["events"]`` (a table at the root: not found) and the joined name as one segment,
``["p$w$ns$events"]`` under the qualified route (InvalidInput from both servers: a segment holding
the delimiter, a body id that is not the route's). Our server answers every read and CREATE
TABLE AS so and records nothing; the reference also fails the read, and "creates" the table at
its root namespace, outside the attached one, where DuckDB cannot see it. These assertions
pin the failure, so a fixed extension fails this test and shows up. The extension runs in a side
environment (``lake_platform_tests/side_envs.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pytest
import requests
from lance.namespace import RestAdapter

from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.seen_requests import seen_requests
from lake_platform_tests.side_envs import run_json, side_python

PINS = ("duckdb==1.5.5", "duckdb-extension-lance==1.5.5")
T = ["p", "w", "ns", "events"]

SCRIPT = """
import glob, json, os, sys
import duckdb, duckdb_extension_lance
url, token = sys.argv[1], sys.argv[2]
home = os.path.dirname(duckdb_extension_lance.__file__)
[extension] = glob.glob(os.path.join(home, "extensions", "v*", "lance.duckdb_extension"))
con = duckdb.connect()
con.execute(f"LOAD '{extension}'")
def attempt(sql):
    try:
        return {"rows": [list(r) for r in con.execute(sql).fetchall()]}
    except duckdb.Error as e:
        return {"error": str(e)}
out = {}
for alias, namespace in (("proj", "p"), ("ns", "p$w$ns")):
    con.execute(f"ATTACH '{namespace}' AS {alias} (TYPE LANCE, ENDPOINT '{url}', BEARER_TOKEN '{token}')")
    out[alias] = {
        "schemas": attempt(f"SELECT schema_name FROM duckdb_schemas() WHERE database_name = '{alias}'"),
        "tables": attempt(f"SELECT table_name FROM duckdb_tables() WHERE database_name = '{alias}'"),
    }
out["read"] = attempt("SELECT count(*) FROM ns.main.events")
out["create"] = attempt("CREATE TABLE ns.main.made AS SELECT 1::BIGINT AS id")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def python() -> Path:
    return side_python("duckdb-lance", PINS)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    for lake in start_rest_lake(tmp_path_factory.mktemp("duckdb")):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=T, mode="create")
        yield lake


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = str(tmp_path_factory.mktemp("duckdb-ref"))
    adapter = RestAdapter("dir", {"root": root}, host="127.0.0.1", port=0)
    adapter.start()
    try:
        url = f"http://127.0.0.1:{adapter.port}"
        for ident in ("p", "p$w", "p$w$ns"):
            assert requests.post(f"{url}/v1/namespace/{ident}/create", json={}, timeout=30).ok
        ns = rest_namespace(url, "unused")
        lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=T, mode="create")
        yield url
    finally:
        adapter.stop()


def listed(out: dict[str, Any]) -> dict[str, Any]:
    return {alias: out[alias] for alias in ("proj", "ns")}


#: What DuckDB shows of both servers: the attached namespace's tables under its one schema
#: ``main``; attached at the project, neither its namespaces nor tables below it.
LISTED = {
    "proj": {"schemas": {"rows": [["main"]]}, "tables": {"rows": []}},
    "ns": {"schemas": {"rows": [["main"]]}, "tables": {"rows": [["events"]]}},
}


def test_duckdb_attaches_and_lists_but_names_tables_without_their_namespace(
    lake: RestLake, python: Path
) -> None:
    before = lake.catalog.reads.log("p")
    with seen_requests() as seen:
        out = run_json(python, SCRIPT, lake.url, lake.tokens["writer"])
    assert listed(out) == LISTED
    # the error DuckDB reports is the bare name's: not found here
    assert "describe_table" in out["read"]["error"]
    assert "Table not found: table events does not exist" in out["read"]["error"]
    assert "declare_table" in out["create"]["error"]
    assert "Table not found: table made does not exist" in out["create"]["error"]
    assert set(seen) == {
        ("ListTables", "200"),
        ("DescribeTable", "404"),  # ["events"]
        ("DescribeTable", "400"),  # ["p$w$ns$events"]
        ("DeclareTable", "400"),
        ("DeclareTable", "404"),
    }
    # nothing was recorded, nothing made
    assert lake.catalog.reads.log("p") == before
    assert lake.catalog.reads.open_table("p.w.ns.events").version == 1


def test_duckdb_names_tables_without_their_namespace_against_the_reference_too(
    reference: str, python: Path
) -> None:
    """The same calls against pylance's reference server: the client's fault, not ours."""
    out = run_json(python, SCRIPT, reference, "unused")
    assert listed(out) == LISTED
    assert "describe_table" in out["read"]["error"] and "table id 'events'" in out["read"]["error"]
    # the reference "creates" it, at its root namespace: not in the attached one, not readable there
    assert out["create"] == {"rows": [[1]]}
    root = requests.get(f"{reference}/v1/namespace/$/table/list", timeout=30).json()["tables"]
    attached = requests.get(f"{reference}/v1/namespace/p$w$ns/table/list", timeout=30).json()["tables"]
    assert (root, attached) == (["made"], ["events"])

"""Control-plane routes (projects, warehouses, trash, undrop), protection, and the check order
identity → shape → parent → permission → conflict → write at the REST door."""

from __future__ import annotations

import lance
import pytest

from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake


@pytest.fixture
def lake(rest_lake: RestLake) -> RestLake:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=["p", "w", "ns", "t"], mode="create")
    return rest_lake


def code(resp: object) -> tuple[int, int]:
    return resp.status_code, resp.json()["code"]  # type: ignore[attr-defined]


def test_projects_and_warehouses(lake: RestLake) -> None:
    assert lake.get("/v1/projects").json()["projects"] == ["p"]
    assert lake.get("/v1/projects/p").json()["name"] == "p"
    assert code(lake.get("/v1/projects/q")) == (404, 1)
    assert code(lake.get("/v1/projects/zz")) == (404, 1)
    assert lake.get("/v1/warehouses").json()["warehouses"] == ["p$w"]
    assert lake.get("/v1/warehouses/p$w").json()["root"].endswith("/warehouse/p/w")
    assert code(lake.post("/v1/warehouses/p$w2/create", {})) == (403, 15)  # a writer may not
    resp = lake.post("/v1/warehouses/p$w2/create", {}, who="admin")
    assert resp.status_code == 200, resp.text
    assert code(lake.post("/v1/warehouses/p$w2/create", {}, who="admin")) == (409, 2)
    assert lake.get("/v1/warehouses?delimiter=.").json()["warehouses"] == ["p.w", "p.w2"]
    assert lake.post("/v1/warehouses/p$w2/drop", {}, who="admin").status_code == 200
    assert code(lake.get("/v1/warehouses/p$w2")) == (404, 1)
    # a project is a tenant: created by an operator, never over REST
    assert code(lake.post("/v1/namespace/z/create", {}, who="admin")) == (403, 15)


def test_namespace_drop_cascade_goes_to_the_trash_and_undrops(lake: RestLake) -> None:
    assert code(lake.post("/v1/namespace/p$w$ns/drop", {}, who="admin")) == (409, 3)  # Restrict: not empty
    resp = lake.post("/v1/namespace/p$w$ns/drop", {"behavior": "Cascade"}, who="admin")
    assert resp.status_code == 200, resp.text
    assert code(lake.post("/v1/table/p$w$ns$t/describe", {})) in ((404, 4), (404, 1))
    dropped = lake.get("/v1/trash/p$w").json()["dropped"]
    assert {d["kind"] for d in dropped} >= {"namespace"}
    assert all(d["expires_at_ms"] > d["dropped_at_ms"] for d in dropped)
    assert code(lake.post("/v1/namespace/p$w$ns/undrop", {})) == (403, 15)  # writer: admin needed
    assert lake.post("/v1/namespace/p$w$ns/undrop", {}, who="admin").status_code == 200
    assert lake.post("/v1/table/p$w$ns$t/describe", {}).json()["version"] == 1
    assert code(lake.post("/v1/table/p$w$ns$t/undrop", {}, who="admin")) == (404, 4)  # nothing in the trash


def test_protection_holds_at_the_rest_door(lake: RestLake) -> None:
    lake.catalog.containers.set_protected("p.w.ns.t", True)
    assert code(lake.post("/v1/table/p$w$ns$t/drop", None, who="admin")) == (409, 19)
    assert lake.post("/v1/table/p$w$ns$t/exists", {}).status_code == 200


def test_check_order_identity_shape_parent_permission_conflict(lake: RestLake) -> None:
    import requests

    bad_json = {"data": b"{oops", "headers": {"content-type": "application/json"}}
    # identity first: no token beats a malformed body
    resp = requests.post(lake.url + "/v1/table/p$w$nope$t/declare", timeout=30, **bad_json)  # type: ignore[arg-type]
    assert code(resp) == (401, 16)
    # shape before parent and permission: a reader's malformed body is a 400
    headers = {**lake.headers("reader"), **bad_json.pop("headers")}  # type: ignore[dict-item]
    resp = requests.post(lake.url + "/v1/table/p$w$nope$t/declare", headers=headers, timeout=30, **bad_json)  # type: ignore[arg-type]
    assert code(resp) == (400, 13)
    # parent before permission: a reader declaring into a missing namespace learns it is missing
    assert code(lake.post("/v1/table/p$w$nope$t/declare", {}, who="reader")) == (404, 1)
    # permission before conflict: a reader re-declaring an existing table is refused for its role
    assert code(lake.post("/v1/table/p$w$ns$t/declare", {}, who="reader")) == (403, 15)
    # conflict before write: a writer re-declaring an existing table
    assert code(lake.post("/v1/table/p$w$ns$t/declare", {})) == (409, 5)
    assert [e.operation for e in lake.catalog.reads.history("p.w.ns.t")] == ["declare", "create"]


def test_undrop_as_a_dotted_name_is_refused(lake: RestLake) -> None:
    """``as`` is a table id: a segment holding a dot (the catalog's separator) would name a
    namespace the id does not (``ns.sub`` is namespace ``p.w.ns.sub``, not segment 3)."""
    lake.catalog.containers.create_namespace("p.w.ns.sub")
    assert lake.post("/v1/table/p$w$ns$t/drop", None, who="admin").status_code == 200
    for as_id in (["p", "w", "ns.sub", "moved"], ["p", "w", "ns", "sub.moved"], ["p", "w.ns", "moved"]):
        resp = lake.post("/v1/table/p$w$ns$t/undrop", {"as": as_id}, who="admin")
        assert code(resp) == (400, 13), (as_id, resp.text)
    assert [d["name"] for d in lake.get("/v1/trash/p$w").json()["dropped"]] == ["p$w$ns$t"]

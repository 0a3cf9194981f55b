"""The app's dispatch: the commit path's routes are matched first, and pure registry reads run on
the event loop only over a SQLite registry (never over DynamoDB, where a read is a network call)."""

from __future__ import annotations

import threading
from typing import Any

from lake_platform.rest import app as rest_app
from lake_platform_tests.rest.conftest import RestLake


def test_the_commit_path_routes_come_first(rest_lake: RestLake) -> None:
    names = [route.name for route in rest_app.routes(rest_lake.service)]
    assert names[:4] == list(rest_app.HOT_OPERATIONS)
    assert len(names) == len(set(names))  # every route once


def test_pure_reads_run_inline_on_sqlite_only(rest_lake: RestLake, monkeypatch: Any) -> None:
    assert rest_app.inline_reads(rest_lake.service)
    seen: dict[str, str] = {}
    real = rest_lake.service.authenticate

    def spy(headers: Any) -> Any:
        seen[headers.get("x-op", "")] = threading.current_thread().name
        return real(headers)

    monkeypatch.setattr(rest_lake.service, "authenticate", spy)
    describe = rest_lake.post("/v1/table/p$w$ns$t/describe", {}, headers={"x-op": "describe"})
    assert describe.status_code == 404  # no such table: the same answer inline
    versions = rest_lake.post("/v1/table/p$w$ns$t/version/list", {}, headers={"x-op": "versions"})
    assert versions.status_code == 404
    commit = rest_lake.post(
        "/v1/table/p$w$ns$t/version/create", {"version": 1, "manifest_path": "x"}, headers={"x-op": "commit"}
    )
    assert commit.status_code in (400, 404)
    other = rest_lake.post("/v1/table/q$w$ns$t/describe", {}, headers={"x-op": "other"})
    assert (other.status_code, other.json()["code"]) == (404, 4)  # tenancy holds inline too
    # the server's own (event loop) thread
    assert seen["describe"] == seen["versions"] == seen["other"] == "rest-server"
    assert seen["commit"] != "rest-server"  # takes the lease (may wait): a worker thread


def test_a_dynamodb_registry_never_runs_handlers_inline() -> None:
    class Store:
        url = "dynamodb://lake"

    class Catalog:
        store = Store()

    class Service:
        catalog = Catalog()

    assert not rest_app.inline_reads(Service())  # type: ignore[arg-type]

"""RenameTable through pylance's own RestNamespace: the registration moves (same incarnation,
location, versions and tags; no data moved) in one logged registry transaction; refusals are
the spec's errors and change nothing."""

from __future__ import annotations

import lance
import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import RenameTableRequest

from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

T = ["p", "w", "ns", "events"]
TP = "p$w$ns$events"
NAME = "p.w.ns.events"


@pytest.fixture
def events(rest_lake: RestLake) -> RestLake:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=T, mode="create")
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=T, mode="append")
    rest_lake.catalog.tags.create_tag(NAME, "first", 1)
    rest_lake.catalog.containers.create_namespace("p.w.other")
    return rest_lake


def registered(lake: RestLake) -> set[str]:
    return {r.name for r in lake.catalog.reads.list_tables()}


def test_rename_moves_the_registration_not_the_data(events: RestLake) -> None:
    before = events.catalog.ctx.table(TableName.parse(NAME))[0]
    ns = rest_namespace(events.url, events.tokens["admin"])
    answer = ns.rename_table(
        RenameTableRequest(id=T, new_table_name="renamed", new_namespace_id=["p", "w", "other"])
    )
    after = events.catalog.ctx.table(TableName.parse("p.w.other.renamed"))[0]
    assert (after.incarnation, after.location, after.current_version) == (
        before.incarnation,
        before.location,
        before.current_version,
    )
    assert "p.w.ns.events" not in registered(events)
    assert events.catalog.tags.list_tags("p.w.other.renamed") == {"first": 1}
    entry = next(e for e in events.catalog.reads.log("p.w.other") if e.commit_id == answer.transaction_id)
    assert (entry.operation, entry.actor, entry.detail["from"]) == ("rename", "boss", NAME)
    table = lance.dataset(namespace_client=ns, table_id=["p", "w", "other", "renamed"]).to_table()
    assert sorted(table.column("id").to_pylist()) == [1, 2, 3, 4]
    # within the namespace when no new namespace is named; and back
    ns.rename_table(RenameTableRequest(id=["p", "w", "other", "renamed"], new_table_name="events"))
    assert "p.w.other.events" in registered(events)


def problem(resp) -> tuple[int, int]:  # noqa: ANN001
    assert resp.headers["content-type"].startswith("application/problem+json"), resp.text
    return resp.status_code, resp.json()["code"]


def test_refusals_change_nothing(events: RestLake) -> None:
    lance.write_dataset(
        rows([9]),
        namespace_client=rest_namespace(events.url, events.tokens["writer"]),
        table_id=["p", "w", "ns", "taken"],
    )
    before = registered(events)
    path = f"/v1/table/{TP}/rename"
    cases = [
        ({"new_table_name": "taken"}, "admin", (409, 5)),
        ({"new_table_name": "x", "new_namespace_id": ["p", "w", "nope"]}, "admin", (404, 1)),
        ({"new_table_name": "x", "new_namespace_id": ["p", "w2", "ns"]}, "admin", (400, 13)),
        ({"new_table_name": "Bad Name"}, "admin", (400, 13)),
        ({}, "admin", (400, 13)),
        ({"new_table_name": "x"}, "writer", (403, 15)),
        ({"new_table_name": "x"}, "other", (404, 4)),
    ]
    for body, who, expected in cases:
        assert problem(events.post(path, body, who=who)) == expected, body
    assert problem(events.post("/v1/table/p$w$ns$missing/rename", {"new_table_name": "x"}, who="admin")) == (
        404,
        4,
    )
    events.catalog.containers.set_protected(NAME, True)
    with pytest.raises(ns_errors.InvalidTableStateError):
        rest_namespace(events.url, events.tokens["admin"]).rename_table(
            RenameTableRequest(id=T, new_table_name="x")
        )
    assert registered(events) == before

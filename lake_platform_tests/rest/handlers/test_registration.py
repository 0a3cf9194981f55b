"""RenameTable and RegisterTable through pylance's own RestNamespace: a rename moves the
registration (same incarnation, location, versions and tags; no data moved) in one logged
registry transaction; a registration adopts a Lance dataset only where the catalog could have
placed the table. Refusals are the spec's errors and change nothing."""

from __future__ import annotations

from pathlib import Path

import lance
import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import RegisterTableRequest, RenameTableRequest

from lake_platform.naming import TableName, WarehouseName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, append, problem


@pytest.fixture
def events(events: RestLake) -> RestLake:
    """Version 1: ids 1-3 (conftest's), tagged ``first``; version 2: plus 4; and ``p.w.other``."""
    append(events, [4])
    events.catalog.tags.create_tag(NAME, "first", 1)
    events.catalog.containers.create_namespace("p.w.other")
    return events


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


def test_a_dotted_name_is_refused_not_read_as_another_namespace(events: RestLake) -> None:
    """A dot is the catalog's own separator: ``other.moved`` as the new name, or ``w.other`` as a
    namespace segment, would land the table in namespace ``p.w.other`` the request never named."""
    before = registered(events)
    path = f"/v1/table/{TP}/rename"
    for body in [
        {"new_table_name": "other.moved"},
        {"new_table_name": "moved", "new_namespace_id": ["p", "w.other"]},
        {"new_table_name": "moved", "new_namespace_id": ["p", "w", ""]},
    ]:
        resp = events.post(path, body, who="admin")
        assert problem(resp) == (400, 13), body
        assert "invalid" in resp.json()["detail"], resp.json()
    assert registered(events) == before


def written(path: Path, ids: list[int]) -> str:
    lance.write_dataset(rows(ids[:1]), str(path), mode="create")
    if ids[1:]:
        lance.write_dataset(rows(ids[1:]), str(path), mode="append")
    return str(path)


def test_register_adopts_a_dataset_inside_the_warehouse(rest_lake: RestLake) -> None:
    root = Path(rest_lake.catalog.ctx.warehouse(WarehouseName.parse("p.w")).root)
    where = written(root / "imported" / "sales.lance", [1, 2, 3])
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["admin"])
    answer = ns.register_table(RegisterTableRequest(id=["p", "w", "ns", "sales"], location=where))
    assert answer.location == where
    record = rest_lake.catalog.ctx.table(TableName.parse("p.w.ns.sales"))[0]
    assert (record.location, record.current_version) == (where, 2)
    entry = next(
        e for e in rest_lake.catalog.reads.log("p.w.ns.sales") if e.commit_id == answer.transaction_id
    )
    assert (entry.operation, entry.actor, entry.to_version) == ("register", "boss", 2)
    # a table like any other: read, appended to through the catalog
    assert lance.dataset(namespace_client=ns, table_id=["p", "w", "ns", "sales"]).count_rows() == 3
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=["p", "w", "ns", "sales"], mode="append")
    assert rest_lake.catalog.reads.open_table("p.w.ns.sales").count_rows() == 4


def test_register_refuses_what_the_catalog_could_not_have_placed(rest_lake: RestLake, tmp_path: Path) -> None:
    root = Path(rest_lake.catalog.ctx.warehouse(WarehouseName.parse("p.w")).root)
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    table_at = rest_lake.catalog.ctx.table(TableName.parse(NAME))[0].location
    outside = written(tmp_path / "outside.lance", [1])
    inside = written(root / "mine.lance", [1])
    (root / "empty").mkdir()
    path = "/v1/table/p$w$ns$adopted/register"
    for body, who, expected in [
        ({"location": outside}, "admin", (400, 13)),  # outside the warehouse root
        ({"location": str(root)}, "admin", (400, 13)),  # the root itself
        ({"location": table_at}, "admin", (400, 13)),  # another table's folder
        ({"location": table_at + "/data"}, "admin", (400, 13)),  # inside it
        ({"location": str(root / "empty")}, "admin", (400, 13)),  # not a dataset
        ({"location": str(root / "x" / ".." / "mine.lance")}, "admin", (400, 13)),
        ({"location": inside, "mode": "overwrite"}, "admin", (406, 0)),
        ({"location": inside}, "writer", (403, 15)),
        ({"location": inside}, "other", (404, 4)),
        ({}, "admin", (400, 13)),
    ]:
        assert problem(rest_lake.post(path, body, who=who)) == expected, body
    taken = rest_lake.post(f"/v1/table/{TP}/register", {"location": inside}, who="admin")
    assert problem(taken) == (409, 5)
    assert "p.w.ns.adopted" not in registered(rest_lake)

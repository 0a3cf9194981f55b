"""RegisterTable, the namespace, warehouse and project creates and drops, BatchDeleteTableVersions
and the undrop routes under an ``Idempotency-Key`` (pylance's RestNamespace with
``header.Idempotency-Key`` where it has the operation, lake's own routes over HTTP): a retry after
a lost answer, or the same request sent twice at once, answers the first answer and changes
nothing, where without a key it is refused (exists already, not found) or answers another count;
the key reused for another request is 422 and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    DropNamespaceRequest,
    ListNamespacesRequest,
    RegisterTableRequest,
)

from lake_platform.catalog.idempotency import HEADER
from lake_platform.naming import WarehouseName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.test_idempotency_lifecycle import NAME, T, answer, keyed, refused, sent_at_once


def written(path: Path, ids: list[int]) -> str:
    lance.write_dataset(rows(ids), str(path), mode="create")
    return str(path)


def registers(lake: RestLake) -> list[str]:
    return [e.target for e in lake.catalog.reads.log("p.w.ns") if e.operation == "register"]


def test_a_register_under_a_key_is_committed_once(rest_lake: RestLake) -> None:
    root = Path(rest_lake.catalog.ctx.warehouse(WarehouseName.parse("p.w")).root)
    where = written(root / "imported" / "sales.lance", [1, 2])
    other = written(root / "imported" / "other.lance", [3])
    register = RegisterTableRequest(id=["p", "w", "ns", "sales"], location=where)
    first, second = sent_at_once([lambda: keyed(rest_lake, "k-reg", "admin").register_table(register)] * 2)
    assert answer(first) == answer(second), (first, second)
    assert first.location == where
    assert answer(keyed(rest_lake, "k-reg", "admin").register_table(register)) == answer(first)
    moved = RegisterTableRequest(id=["p", "w", "ns", "sales"], location=other)
    assert "idempotency key" in refused(lambda: keyed(rest_lake, "k-reg", "admin").register_table(moved))
    assert registers(rest_lake) == ["p.w.ns.sales"]
    # Without a key the same request again is refused: the name is taken.
    plain = rest_namespace(rest_lake.url, rest_lake.tokens["admin"])
    assert "already exists" in refused(lambda: plain.register_table(register))


def post(lake: RestLake, path: str, key: str | None, body: Any = None) -> Any:
    """``path`` posted as the admin (under ``key``): the status and the JSON answer."""
    sent = lake.post(path, body or {}, who="admin", headers={HEADER: key} if key else {})
    return sent.status_code, sent.json()


def commits_of(lake: RestLake, target: str) -> list[str]:
    """The operations of the commits on ``target`` itself (not on what it holds)."""
    return [e.operation for e in lake.catalog.reads.log(target) if e.target == target]


@pytest.fixture
def short_pins(tmp_path: Path) -> Iterator[RestLake]:
    """A lake whose superseded versions nothing pins: BatchDeleteTableVersions may take them."""
    yield from start_rest_lake(tmp_path, ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0)


def test_a_batch_delete_under_a_key_answers_the_first_count(short_pins: RestLake) -> None:
    ns = rest_namespace(short_pins.url, short_pins.tokens["writer"])
    for i, mode in enumerate(["create", "append", "append", "append"]):
        lance.write_dataset(rows([i]), namespace_client=ns, table_id=T, mode=mode)
    delete = {"id": T, "ranges": [{"start_version": 1, "end_version": 3}]}

    def send(request: dict[str, Any]) -> dict[str, Any]:
        """The answer without its ``context`` (the HTTP headers: the date moves)."""
        sent = keyed(short_pins, "k-versions", "admin").batch_delete_table_versions(request)
        return {k: v for k, v in sent.items() if k != "context"}

    first, second = sent_at_once([lambda: send(delete)] * 2)
    assert first == second, (first, second)
    assert first["deleted_count"] == 2
    assert send(delete) == first
    wider = {"id": T, "ranges": [{"start_version": 1, "end_version": 4}]}
    assert "idempotency key" in refused(lambda: send(wider))
    assert list(short_pins.catalog.reads.readable_versions(NAME)[1]) == [3, 4]
    # Without a key the same ranges again match nothing left: none removed.
    plain = rest_namespace(short_pins.url, short_pins.tokens["admin"])
    assert plain.batch_delete_table_versions(delete)["deleted_count"] == 0


def test_a_namespace_created_and_dropped_under_keys_is_committed_once(rest_lake: RestLake) -> None:
    create = CreateNamespaceRequest(id=["p", "w", "ns2"])
    first, second = sent_at_once([lambda: keyed(rest_lake, "k-ns", "admin").create_namespace(create)] * 2)
    assert answer(first) == answer(second), (first, second)
    assert answer(keyed(rest_lake, "k-ns", "admin").create_namespace(create)) == answer(first)
    other = CreateNamespaceRequest(id=["p", "w", "ns3"])
    assert "idempotency key" in refused(lambda: keyed(rest_lake, "k-ns", "admin").create_namespace(other))
    plain = rest_namespace(rest_lake.url, rest_lake.tokens["admin"])
    assert "already exists" in refused(lambda: plain.create_namespace(create))
    drop = DropNamespaceRequest(id=["p", "w", "ns2"])
    dropped = answer(keyed(rest_lake, "k-unns", "admin").drop_namespace(drop))
    assert answer(keyed(rest_lake, "k-unns", "admin").drop_namespace(drop)) == dropped
    # The name made again is another namespace: the key still names the first drop.
    plain.create_namespace(create)
    assert answer(keyed(rest_lake, "k-unns", "admin").drop_namespace(drop)) == dropped
    assert "ns2" in plain.list_namespaces(ListNamespacesRequest(id=["p", "w"])).namespaces
    assert commits_of(rest_lake, "p.w.ns2") == ["create namespace", "drop namespace", "create namespace"]


def test_a_warehouse_created_and_dropped_under_keys_is_committed_once(rest_lake: RestLake) -> None:
    path = "/v1/warehouses/p$w2"
    first, second = sent_at_once([lambda: post(rest_lake, path + "/create", "k-wh")] * 2)
    assert first == second and first[0] == 200, (first, second)
    assert post(rest_lake, path + "/create", "k-wh") == first
    assert post(rest_lake, "/v1/warehouses/p$w3/create", "k-wh")[0] == 422
    assert post(rest_lake, path + "/create", None)[0] == 409
    # Over the spec's route the same warehouse's drop, then lake's route: each once.
    drop = DropNamespaceRequest(id=["p", "w2"])
    for _ in range(2):
        keyed(rest_lake, "k-unwh", "admin").drop_namespace(drop)
    assert post(rest_lake, path + "/create", None)[0] == 200
    for _ in range(2):
        assert post(rest_lake, path + "/drop", "k-unwh2") == (200, {"id": ["p", "w2"]})
    assert post(rest_lake, path + "/drop", None)[0] == 404
    assert commits_of(rest_lake, "p.w2") == ["create warehouse", "drop warehouse"] * 2


def test_a_cascade_drop_under_a_key_is_committed_once(rest_lake: RestLake) -> None:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    drop = DropNamespaceRequest(id=["p", "w", "ns"], behavior="Cascade")
    dropped = answer(keyed(rest_lake, "k-cascade", "admin").drop_namespace(drop))
    assert answer(keyed(rest_lake, "k-cascade", "admin").drop_namespace(drop)) == dropped
    restrict = DropNamespaceRequest(id=["p", "w", "ns"], behavior="Restrict")
    assert "idempotency key" in refused(
        lambda: keyed(rest_lake, "k-cascade", "admin").drop_namespace(restrict)
    )
    assert commits_of(rest_lake, "p.w.ns")[-1:] == ["drop namespace"]
    assert sorted((r.kind, r.target) for r in rest_lake.catalog.trash.list_trash("p")) == [
        ("namespace", "p.w.ns"),
        ("table", NAME),
    ]


def test_the_undrops_under_keys_are_committed_once(rest_lake: RestLake) -> None:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    rest_lake.catalog.branches.create_branch(NAME, "dev")
    rest_lake.catalog.branch_trash.delete_branch(NAME, "dev")
    undrop = "/v1/table/p$w$ns$orders/branches/undrop"
    first, second = sent_at_once([lambda: post(rest_lake, undrop, "k-unbranch", {"name": "dev"})] * 2)
    assert first == second and first[0] == 200, (first, second)
    assert post(rest_lake, undrop, "k-unbranch", {"name": "dev"}) == first
    assert post(rest_lake, undrop, None, {"name": "dev"})[0] == 409
    # A table and then its namespace back from the trash.
    rest_lake.catalog.trash.drop_table(NAME)
    undrop = "/v1/table/p$w$ns$orders/undrop"
    first, second = sent_at_once([lambda: post(rest_lake, undrop, "k-untable")] * 2)
    assert first == second and first[0] == 200, (first, second)
    assert post(rest_lake, undrop, "k-untable") == first
    assert post(rest_lake, undrop, "k-untable", {"as": ["p", "w", "ns", "again"]})[0] == 422
    assert post(rest_lake, undrop, None)[0] == 404
    rest_lake.catalog.cascade.drop_namespace("p.w.ns", cascade=True)
    undrop = "/v1/namespace/p$w$ns/undrop"
    first = post(rest_lake, undrop, "k-unns")
    assert first[0] == 200 and post(rest_lake, undrop, "k-unns") == first, first
    assert post(rest_lake, undrop, None)[0] == 404
    assert [e.operation for e in rest_lake.catalog.reads.log(NAME)][-3:] == ["undrop", "drop", "undrop"]
    assert [o for o in commits_of(rest_lake, NAME) if o == "branch-undrop"] == ["branch-undrop"]

"""The index, tag, branch, rename and drop operations under an ``Idempotency-Key``, sent by
pylance's own RestNamespace (its ``header.*`` properties; lake's publish route over HTTP): a
retry whose first attempt landed answers the first answer and changes nothing, where without a
key it is refused (the index, tag or branch exists, or is gone; the table is gone); the key
reused for another request (another column, version, branch, name) is 422 and changes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import lance
import pytest
from lance.namespace import RestNamespace
from lance_namespace import (
    CreateTableBranchRequest,
    CreateTableIndexRequest,
    CreateTableTagRequest,
    DeleteTableBranchRequest,
    DeleteTableTagRequest,
    DeregisterTableRequest,
    DropTableIndexRequest,
    DropTableRequest,
    RenameTableRequest,
    UpdateTableTagRequest,
)

from lake_platform.catalog.idempotency import HEADER
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

T = ["p", "w", "ns", "orders"]
TP = "p$w$ns$orders"
NAME = "p.w.ns.orders"
#: The log entries pylance's two writes leave (declare, create, append).
SETUP = 3


def keyed(lake: RestLake, key: str, who: str = "writer") -> RestNamespace:
    """Pylance's RestNamespace sending ``key`` on every request (one client per request)."""
    auth = lake.headers(who)["Authorization"]
    return RestNamespace(uri=lake.url, **{"header.Authorization": auth, f"header.{HEADER}": key})


def operations(lake: RestLake, name: str = NAME) -> list[str]:
    """The table's commits after the fixture's two writes."""
    return [e.operation for e in lake.catalog.reads.log(name)][SETUP:]


def answer(response: Any) -> dict[str, Any]:
    """A pylance response's members, without its ``context`` (the HTTP headers: the date moves)."""
    return response.model_dump(exclude={"context"})


def refused(call: Callable[[], Any]) -> str:
    """The text of the refusal ``call`` raised in pylance (the server's problem detail)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - pylance raises its own error types
        call()
    return str(caught.value)


@pytest.fixture
def orders(rest_lake: RestLake) -> RestLake:
    """``p.w.ns.orders``: ids 1-3 at version 1, 4 at version 2 (through pylance, as the writer)."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=T, mode="create")
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=T, mode="append")
    return rest_lake


def test_an_index_built_and_dropped_under_keys_is_committed_once(orders: RestLake) -> None:
    build = CreateTableIndexRequest(id=T, column="id", index_type="BTREE")
    first = keyed(orders, "k-index").create_table_index(build)
    assert first.transaction_id
    assert answer(keyed(orders, "k-index").create_table_index(build)) == answer(first)
    other = CreateTableIndexRequest(id=T, column="tag", index_type="BITMAP")
    assert "idempotency key" in refused(lambda: keyed(orders, "k-index").create_table_index(other))
    drop = DropTableIndexRequest(id=T, index_name="id_idx")
    dropped = keyed(orders, "k-unindex").drop_table_index(drop)
    assert answer(keyed(orders, "k-unindex").drop_table_index(drop)) == answer(dropped)
    assert operations(orders) == ["index create", "index drop"]
    # Without a key a repeated drop is refused: there is no such index any more.
    assert "id_idx" in refused(
        lambda: rest_namespace(orders.url, orders.tokens["writer"]).drop_table_index(drop)
    )


def test_a_tag_created_moved_and_deleted_under_keys_is_committed_once(orders: RestLake) -> None:
    create = CreateTableTagRequest(id=T, tag="month_end", version=1)
    for _ in range(2):
        keyed(orders, "k-tag").create_table_tag(create)
    other = CreateTableTagRequest(id=T, tag="month_end", version=2)
    assert "idempotency key" in refused(lambda: keyed(orders, "k-tag").create_table_tag(other))
    assert orders.catalog.tags.list_tags(NAME) == {"month_end": 1}
    move = UpdateTableTagRequest(id=T, tag="month_end", version=2)
    for _ in range(2):
        keyed(orders, "k-move").update_table_tag(move)
    delete = DeleteTableTagRequest(id=T, tag="month_end")
    for _ in range(2):
        keyed(orders, "k-untag").delete_table_tag(delete)
    assert orders.catalog.tags.list_tags(NAME) == {}
    assert operations(orders) == ["tag", "tag", "untag"]
    # Without a key a repeated delete is refused: the tag is gone.
    plain = rest_namespace(orders.url, orders.tokens["writer"])
    assert "month_end" in refused(lambda: plain.delete_table_tag(delete))


def sent_at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Each call in its own thread, released together by a barrier; the answers (or the
    exceptions raised) in the calls' order."""
    together = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def send(i: int) -> None:
        together.wait()
        try:
            answers[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the caller's assertion names it
            answers[i] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_a_keyed_tag_delete_sent_twice_at_once_answers_both(orders: RestLake) -> None:
    orders.catalog.tags.create_tag(NAME, "month_end", 1)
    delete = DeleteTableTagRequest(id=T, tag="month_end")
    clients = [keyed(orders, "k-untag"), keyed(orders, "k-untag")]
    answers = sent_at_once([lambda c=c: c.delete_table_tag(delete) for c in clients])
    assert [type(a).__name__ for a in answers] == ["DeleteTableTagResponse"] * 2, answers
    assert orders.catalog.tags.list_tags(NAME) == {}
    assert operations(orders) == ["tag", "untag"]


def test_a_branch_made_published_and_deleted_under_keys_is_committed_once(orders: RestLake) -> None:
    make = CreateTableBranchRequest(id=T, name="dev", from_version=1)
    first = keyed(orders, "k-branch").create_table_branch(make)
    assert first.transaction_id
    assert answer(keyed(orders, "k-branch").create_table_branch(make)) == answer(first)
    other = CreateTableBranchRequest(id=T, name="dev2", from_version=1)
    assert "idempotency key" in refused(lambda: keyed(orders, "k-branch").create_table_branch(other))
    publish = f"/v1/table/{TP}/branches/publish"
    orders.catalog.branches.create_branch(NAME, "hot")
    orders.catalog.branch_writes.append(NAME, "hot", rows([5]).to_reader())
    headers = {HEADER: "k-publish"}
    published = orders.post(publish, {"name": "hot"}, who="admin", headers=headers)
    assert published.status_code == 200, published.text
    again = orders.post(publish, {"name": "hot"}, who="admin", headers=headers)
    assert again.status_code == 200 and again.json() == published.json(), again.text
    delete = DeleteTableBranchRequest(id=T, name="dev")
    deleted = keyed(orders, "k-unbranch", "admin").delete_table_branch(delete)
    assert answer(keyed(orders, "k-unbranch", "admin").delete_table_branch(delete)) == answer(deleted)
    assert [o for o in operations(orders) if o.startswith("branch") or o == "publish"] == [
        "branch-create",
        "branch-create",
        "publish",
        "branch-delete",
    ]


def test_a_rename_under_a_key_is_committed_once(orders: RestLake) -> None:
    rename = RenameTableRequest(id=T, new_table_name="sales")
    first = keyed(orders, "k-rename", "admin").rename_table(rename)
    assert first.transaction_id
    assert answer(keyed(orders, "k-rename", "admin").rename_table(rename)) == answer(first)
    other = RenameTableRequest(id=["p", "w", "ns", "sales"], new_table_name="orders")
    assert "idempotency key" in refused(lambda: keyed(orders, "k-rename", "admin").rename_table(other))
    assert orders.get("/v1/namespace/p$w$ns/table/list").json()["tables"] == ["sales"]
    assert [e.operation for e in orders.catalog.reads.log("p.w.ns.sales")] == ["rename"]


@pytest.mark.parametrize(
    "call",
    [
        lambda ns: ns.drop_table(DropTableRequest(id=T)),
        lambda ns: ns.deregister_table(DeregisterTableRequest(id=T)),
    ],
)
def test_a_drop_under_a_key_is_committed_once(orders: RestLake, call: Callable[[RestNamespace], Any]) -> None:
    first = call(keyed(orders, "k-drop", "admin"))
    assert answer(call(keyed(orders, "k-drop", "admin"))) == answer(first)
    assert [r.target for r in orders.catalog.trash.list_trash("p")] == [NAME]
    # The name made again is another table: the key still names the first drop, not this one.
    lance.write_dataset(
        rows([9]),
        namespace_client=rest_namespace(orders.url, orders.tokens["writer"]),
        table_id=T,
        mode="create",
    )
    assert answer(call(keyed(orders, "k-drop", "admin"))) == answer(first)
    assert orders.get("/v1/namespace/p$w$ns/table/list").json()["tables"] == ["orders"]

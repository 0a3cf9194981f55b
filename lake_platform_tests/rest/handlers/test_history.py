"""RestoreTable through pylance's own RestNamespace: a new version whose rows and schema are the
older version's, one logged registry commit; refusals are the spec's errors, nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import (
    DescribeTransactionRequest,
    RestoreTableRequest,
)

from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, append, problem, version_and_columns


@pytest.fixture
def events(events: RestLake) -> RestLake:
    """Version 1: ids 1-3 (conftest's); version 2: plus 4; version 3: plus a column."""
    append(events, [4])
    events.catalog.alter.add_column(NAME, "extra", "int32")
    return events


def test_restore_commits_the_old_versions_content_as_a_new_version(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    answer = ns.restore_table(RestoreTableRequest(id=T, version=1))
    assert version_and_columns(events) == (4, ["id", "tag"])
    snap = events.catalog.reads.open_table(NAME)
    assert sorted(snap.dataset.to_table().column("id").to_pylist()) == [1, 2, 3]
    entry = next(e for e in events.catalog.reads.log(NAME) if e.commit_id == answer.transaction_id)
    assert (entry.operation, entry.actor, entry.to_version) == ("restore", "etl", 4)
    assert entry.detail["restored_version"] == 1
    # the versions in between stay readable, and a pylance read sees the restored table
    assert events.catalog.reads.open_table(NAME, 3).count_rows() == 4
    assert lance.dataset(namespace_client=ns, table_id=T).count_rows() == 3


def test_refusals_change_nothing(events: RestLake) -> None:
    before = version_and_columns(events)
    path = f"/v1/table/{TP}/restore"
    assert problem(events.post(path, {"version": 99})) == (404, 11)
    assert problem(events.post(path, {"version": 0})) == (400, 13)
    assert problem(events.post(path, {})) == (400, 13)
    assert problem(events.post(path, {"version": 1, "branch": "b"})) == (404, 22)  # no such branch
    assert problem(events.post(path, {"version": 1}, who="reader")) == (403, 15)
    assert problem(events.post(path, {"version": 1}, who="other")) == (404, 4)
    assert problem(events.post("/v1/table/p$w$ns$missing/restore", {"version": 1})) == (404, 4)
    assert version_and_columns(events) == before
    with pytest.raises(ns_errors.TableVersionNotFoundError):
        rest_namespace(events.url, events.tokens["writer"]).restore_table(
            RestoreTableRequest(id=T, version=42)
        )


@pytest.fixture
def short_pins(tmp_path: Path) -> Iterator[RestLake]:
    """A lake whose tickets live 1 ms (no reader pins a superseded version for long)."""
    yield from start_rest_lake(tmp_path, ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0)


def five_versions(lake: RestLake) -> None:
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    for i in range(2, 6):
        lance.write_dataset(rows([i]), namespace_client=ns, table_id=T, mode="append")
    lake.catalog.tags.create_tag(NAME, "keep", 2)


def registered(lake: RestLake) -> list[int]:
    return sorted(lake.catalog.reads.readable_versions(NAME)[1])


def test_batch_delete_never_removes_a_tagged_or_current_version(short_pins: RestLake) -> None:
    five_versions(short_pins)
    ns = rest_namespace(short_pins.url, short_pins.tokens["admin"])
    # pylance 14.0.2 takes this one request as a dict
    answer = ns.batch_delete_table_versions({"id": T, "ranges": [{"start_version": 0, "end_version": -1}]})
    assert answer["deleted_count"] == 3 and registered(short_pins) == [2, 5]  # 2 is tagged, 5 current
    entry = next(e for e in short_pins.catalog.reads.log(NAME) if e.commit_id == answer["transaction_id"])
    assert entry.operation == "delete-versions" and entry.detail["kept"] == {
        "current": [5],
        "tagged": [2],
        "pinned": [],
    }
    # the table still reads, and the kept versions too
    assert short_pins.catalog.reads.open_table(NAME, 2).count_rows() == 2
    assert lance.dataset(namespace_client=ns, table_id=T).count_rows() == 5


def test_batch_delete_end_is_exclusive_and_refusals_change_nothing(short_pins: RestLake) -> None:
    five_versions(short_pins)
    path = f"/v1/table/{TP}/version/delete"
    answer = short_pins.post(path, {"ranges": [{"start_version": 3, "end_version": 4}]}, who="admin").json()
    assert answer["deleted_count"] == 1 and registered(short_pins) == [1, 2, 4, 5]
    for body, who, expected in [
        ({"ranges": [{"start_version": 1, "end_version": 2}]}, "writer", (403, 15)),
        ({"ranges": [{"start_version": 4, "end_version": 2}]}, "admin", (400, 13)),
        ({"ranges": []}, "admin", (400, 13)),
        ({"ranges": [{"start_version": "1", "end_version": 2}]}, "admin", (400, 13)),
        ({"ranges": [{"start_version": 1, "end_version": 2}]}, "other", (404, 4)),
    ]:
        assert problem(short_pins.post(path, body, who=who)) == expected, body
    assert registered(short_pins) == [1, 2, 4, 5]


def test_a_version_a_reader_may_have_pinned_is_kept(events: RestLake) -> None:
    """With the default ticket lifetime (an hour), a version superseded a moment ago is pinned."""
    resp = events.post(
        f"/v1/table/{TP}/version/delete", {"ranges": [{"start_version": 1, "end_version": 3}]}, who="admin"
    )
    assert resp.json()["deleted_count"] == 0 and registered(events) == [1, 2, 3]


def test_describe_transaction_by_commit_id(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["reader"])
    restored = rest_namespace(events.url, events.tokens["writer"]).restore_table(
        RestoreTableRequest(id=T, version=1)
    )
    answer = ns.describe_transaction(DescribeTransactionRequest(id=[*T, restored.transaction_id]))
    assert answer.status == "Succeeded"
    assert answer.properties["operation"] == "restore" and answer.properties["version"] == "4"
    assert answer.properties["actor"] == "etl" and answer.properties["table"] == NAME
    with pytest.raises(ns_errors.TransactionNotFoundError):
        ns.describe_transaction(DescribeTransactionRequest(id=[*T, "0" * 32]))
    # a commit of another table is not this table's; bad ids are 400; other tenants see nothing
    other = f"/v1/transaction/p$w$ns$nope${restored.transaction_id}/describe"
    assert problem(events.post(other, {}, who="reader"))[0] == 404
    assert problem(events.post("/v1/transaction/p$w$ns$events$x/describe", {}, who="reader")) == (400, 13)
    assert problem(events.post(f"/v1/transaction/{restored.transaction_id}/describe", {}, who="reader")) == (
        400,
        13,
    )
    path = f"/v1/transaction/{TP}${restored.transaction_id}/describe"
    hidden = events.post(path, {}, who="other")
    assert problem(hidden) == (404, 4)
    # the table is what is missing (the message named a table of the table's id and commit id)
    assert hidden.json()["detail"] == f"table {NAME} does not exist"


def test_alter_transaction_names_the_commit_like_describe_and_never_alters_it(events: RestLake) -> None:
    """An unknown id (UUID-shaped, as clients make them) is 404 TransactionNotFound, as
    DescribeTransaction answers; a committed one is Unsupported (406, code 0), changing nothing."""
    restored = rest_namespace(events.url, events.tokens["writer"]).restore_table(
        RestoreTableRequest(id=T, version=1)
    )
    body = {"actions": [{"set_status_action": {"status": "ABORTED"}}]}
    missing = events.post(
        f"/v1/transaction/{TP}$00000000-0000-4000-8000-000000000000/alter", body, who="writer"
    )
    assert problem(missing) == (404, 10)
    known = events.post(f"/v1/transaction/{TP}${restored.transaction_id}/alter", body, who="writer")
    assert problem(known) == (406, 0)
    assert version_and_columns(events)[0] == 4

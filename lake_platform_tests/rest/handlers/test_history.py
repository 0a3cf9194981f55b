"""RestoreTable through pylance's own RestNamespace: a new version whose rows and schema are the
older version's, one logged registry commit; refusals are the spec's errors, nothing changed."""

from __future__ import annotations

import lance
import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import RestoreTableRequest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

T = ["p", "w", "ns", "events"]
TP = "p$w$ns$events"
NAME = "p.w.ns.events"


@pytest.fixture
def events(rest_lake: RestLake) -> RestLake:
    """Version 1: ids 1-3; version 2: plus 4; version 3: plus a column."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=T, mode="create")
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=T, mode="append")
    rest_lake.catalog.alter.add_column(NAME, "extra", "int32")
    return rest_lake


def current(lake: RestLake) -> tuple[int, list[str]]:
    record = lake.catalog.ctx.table(TableName.parse(NAME))[0]
    return record.current_version, schema_from_ipc(record.schema_ipc).names


def test_restore_commits_the_old_versions_content_as_a_new_version(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    answer = ns.restore_table(RestoreTableRequest(id=T, version=1))
    assert current(events) == (4, ["id", "tag"])
    snap = events.catalog.reads.open_table(NAME)
    assert sorted(snap.dataset.to_table().column("id").to_pylist()) == [1, 2, 3]
    entry = next(e for e in events.catalog.reads.log(NAME) if e.commit_id == answer.transaction_id)
    assert (entry.operation, entry.actor, entry.to_version) == ("restore", "etl", 4)
    assert entry.detail["restored_version"] == 1
    # the versions in between stay readable, and a pylance read sees the restored table
    assert events.catalog.reads.open_table(NAME, 3).count_rows() == 4
    assert lance.dataset(namespace_client=ns, table_id=T).count_rows() == 3


def problem(resp) -> tuple[int, int]:  # noqa: ANN001
    assert resp.headers["content-type"].startswith("application/problem+json"), resp.text
    return resp.status_code, resp.json()["code"]


def test_refusals_change_nothing(events: RestLake) -> None:
    before = current(events)
    path = f"/v1/table/{TP}/restore"
    assert problem(events.post(path, {"version": 99})) == (404, 11)
    assert problem(events.post(path, {"version": 0})) == (400, 13)
    assert problem(events.post(path, {})) == (400, 13)
    assert problem(events.post(path, {"version": 1, "branch": "b"})) == (400, 13)
    assert problem(events.post(path, {"version": 1}, who="reader")) == (403, 15)
    assert problem(events.post(path, {"version": 1}, who="other")) == (404, 4)
    assert problem(events.post("/v1/table/p$w$ns$missing/restore", {"version": 1})) == (404, 4)
    assert current(events) == before
    with pytest.raises(ns_errors.TableVersionNotFoundError):
        rest_namespace(events.url, events.tokens["writer"]).restore_table(
            RestoreTableRequest(id=T, version=42)
        )

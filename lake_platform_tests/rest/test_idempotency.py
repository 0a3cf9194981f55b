"""CreateTable, InsertIntoTable and DeleteFromTable under an ``Idempotency-Key``: a retry of a
request whose first attempt landed answers the first outcome and writes nothing; the key reused
for another table, kind of request, rows or predicate is 422 and commits nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_platform.catalog.idempotency import HEADER
from lake_platform.naming import TableName
from lake_platform_tests.rest.conftest import RestLake

TP = "p$w$ns$orders"
NAME = "p.w.ns.orders"
ARROW = {"content-type": "application/vnd.apache.arrow.stream"}


def ipc(ids: list[int]) -> bytes:
    table = pa.table({"id": pa.array(ids, pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def send(lake: RestLake, op: str, key: str, data: bytes | None = None, **body: object):  # noqa: ANN201
    headers = {HEADER: key, **(ARROW if data is not None else {})}
    if data is not None:
        return lake.post(f"/v1/table/{TP}/{op}", None, params=body, data=data, headers=headers)
    return lake.post(f"/v1/table/{TP}/{op}", body, headers=headers)


def state(lake: RestLake) -> tuple[int, list[int]]:
    version = lake.catalog.ctx.table(TableName.parse(NAME))[0].current_version
    ids = lake.catalog.reads.open_table(NAME).dataset.to_table().column("id").to_pylist()
    return version, sorted(ids)


def test_each_write_retried_under_its_key_lands_once_and_answers_the_same(rest_lake: RestLake) -> None:
    created = send(rest_lake, "create", "k-create", ipc([1, 2]))
    assert created.status_code == 200, created.text
    again = send(rest_lake, "create", "k-create", ipc([1, 2]))
    assert again.status_code == 200 and again.json() == created.json()
    inserted = send(rest_lake, "insert", "k-insert", ipc([3]))
    assert inserted.json()["num_inserted_rows"] == 1
    assert send(rest_lake, "insert", "k-insert", ipc([3])).json() == inserted.json()
    deleted = send(rest_lake, "delete", "k-delete", predicate="id = 1")
    assert send(rest_lake, "delete", "k-delete", predicate="id = 1").json() == deleted.json()
    assert state(rest_lake) == (3, [2, 3])
    operations = [e.operation for e in rest_lake.catalog.reads.log(NAME)]
    assert operations == ["create", "append", "delete"]


@pytest.mark.parametrize(
    ("op", "key", "data", "body"),
    [
        ("insert", "k-insert", ipc([4]), {}),  # other rows
        ("insert", "k-insert", ipc([3]), {"mode": "overwrite"}),  # another mode
        ("delete", "k-delete", None, {"predicate": "id = 2"}),  # another predicate
        ("create", "k-create", ipc([1, 2, 5]), {"mode": "overwrite"}),  # other rows, another mode
    ],
)
def test_a_key_reused_for_another_request_is_422_and_commits_nothing(
    rest_lake: RestLake, op: str, key: str, data: bytes | None, body: dict[str, object]
) -> None:
    assert send(rest_lake, "create", "k-create", ipc([1, 2])).status_code == 200
    assert send(rest_lake, "insert", "k-insert", ipc([3])).status_code == 200
    assert send(rest_lake, "delete", "k-delete", predicate="id = 1").status_code == 200
    before = state(rest_lake)
    resp = send(rest_lake, op, key, data, **body)
    assert resp.status_code == 422, resp.text
    assert "idempotency key" in resp.json()["detail"]
    assert state(rest_lake) == before


def test_a_key_reused_on_another_table_is_422(rest_lake: RestLake) -> None:
    assert send(rest_lake, "create", "k-create", ipc([1])).status_code == 200
    other = rest_lake.post(
        "/v1/table/p$w$ns$other/create", None, data=ipc([1]), headers={HEADER: "k-create", **ARROW}
    )
    assert other.status_code == 422, other.text
    assert rest_lake.get("/v1/namespace/p$w$ns/table/list").json()["tables"] == ["orders"]

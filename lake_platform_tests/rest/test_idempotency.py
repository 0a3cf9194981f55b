"""CreateTable, InsertIntoTable, DeleteFromTable, UpdateTable, MergeInsertIntoTable, the column
operations, UpdateTableSchemaMetadata and RestoreTable (main and a branch) under an
``Idempotency-Key``: a retry of a request whose first attempt landed answers the first outcome and
writes nothing; the key reused for another table, line, kind of request, rows, expression,
predicate or metadata is 422 and commits nothing."""

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


# -- the changes beyond create/insert/delete: update, merge-insert, columns, restore ----------------


def rows_ipc(ids: list[int], xs: list[int]) -> bytes:
    table = pa.table({"id": pa.array(ids, pa.int64()), "x": pa.array(xs, pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def rows(lake: RestLake, branch: str | None = None) -> tuple[int, list[tuple[int, int]]]:
    if branch is None:
        version, snap = state(lake)[0], lake.catalog.reads.open_table(NAME)
    else:
        snap = lake.catalog.branches.open_branch(NAME, branch)
        version = snap.version
    table = snap.dataset.to_table()
    return version, sorted(zip(table.column("id").to_pylist(), table.column("x").to_pylist(), strict=True))


def operations(lake: RestLake) -> list[str]:
    return [e.operation for e in lake.catalog.reads.log(NAME)]


@pytest.fixture
def xs(rest_lake: RestLake) -> RestLake:
    """orders with (id, x) = (1, 10), (2, 20), (3, 30), version 1."""
    created = rest_lake.post(
        f"/v1/table/{TP}/create", None, data=rows_ipc([1, 2, 3], [10, 20, 30]), headers=ARROW
    )
    assert created.status_code == 200, created.text
    return rest_lake


UPDATE = {"updates": [["x", "x + 1"]], "predicate": "id >= 2"}


def test_an_update_retried_under_its_key_lands_once_and_answers_the_same(xs: RestLake) -> None:
    first = send(xs, "update", "k-up", **UPDATE)
    assert first.status_code == 200, first.text
    assert first.json()["updated_rows"] == 2 and first.json()["version"] == 2
    again = send(xs, "update", "k-up", **UPDATE)
    assert again.status_code == 200 and again.json() == first.json()
    assert rows(xs) == (2, [(1, 10), (2, 21), (3, 31)])
    assert operations(xs) == ["create", "update"]
    # Without a key, each request is its own update.
    for _ in range(2):
        assert xs.post(f"/v1/table/{TP}/update", UPDATE).status_code == 200
    assert rows(xs) == (4, [(1, 10), (2, 23), (3, 33)])


@pytest.mark.parametrize(
    "body",
    [
        {"updates": [["x", "x + 1"]], "predicate": "id >= 3"},  # another predicate
        {"updates": [["x", "x + 2"]], "predicate": "id >= 2"},  # another expression
        {**UPDATE, "branch": "dev"},  # another line
    ],
)
def test_an_update_key_reused_for_another_request_is_422(xs: RestLake, body: dict[str, object]) -> None:
    xs.catalog.branches.create_branch(NAME, "dev")
    assert send(xs, "update", "k-up", **UPDATE).status_code == 200
    before = rows(xs), rows(xs, "dev")
    resp = send(xs, "update", "k-up", **body)
    assert resp.status_code == 422, resp.text
    assert "idempotency key" in resp.json()["detail"]
    assert (rows(xs), rows(xs, "dev")) == before


def test_an_update_key_reused_on_another_table_is_422(xs: RestLake) -> None:
    assert send(xs, "update", "k-up", **UPDATE).status_code == 200
    other = xs.post("/v1/table/p$w$ns$other/create", None, data=rows_ipc([1], [1]), headers=ARROW)
    assert other.status_code == 200, other.text
    resp = xs.post("/v1/table/p$w$ns$other/update", UPDATE, headers={HEADER: "k-up"})
    assert resp.status_code == 422, resp.text
    assert [e.operation for e in xs.catalog.reads.log("p.w.ns.other")] == ["create"]


MERGE = {"on": "id", "when_matched_update_all": "true", "when_not_matched_insert_all": "true"}


@pytest.mark.parametrize("branch", [None, "dev"])
def test_a_merge_insert_retried_under_its_key_lands_once(xs: RestLake, branch: str | None) -> None:
    xs.catalog.branches.create_branch(NAME, "dev")
    params = {**MERGE, **({"branch": branch} if branch else {})}
    data = rows_ipc([3, 4], [300, 400])
    first = send(xs, "merge_insert", "k-merge", data, **params)
    assert first.status_code == 200, first.text
    assert (first.json()["num_updated_rows"], first.json()["num_inserted_rows"]) == (1, 1)
    again = send(xs, "merge_insert", "k-merge", data, **params)
    assert again.status_code == 200 and again.json() == first.json()
    merged = rows(xs, branch)
    assert merged[1] == [(1, 10), (2, 20), (3, 300), (4, 400)]
    for resp in (
        send(xs, "merge_insert", "k-merge", rows_ipc([5], [500]), **params),  # other rows
        send(xs, "merge_insert", "k-merge", data, **{**params, "when_matched_update_all": "false"}),
        send(
            xs, "merge_insert", "k-merge", data, **({**MERGE, "branch": "dev"} if branch is None else MERGE)
        ),
    ):
        assert resp.status_code == 422, resp.text
    assert rows(xs, branch) == merged
    assert [e.operation for e in xs.catalog.reads.log(NAME)].count("merge") == 1


def test_a_column_added_under_its_key_is_added_once(xs: RestLake) -> None:
    body = {"new_columns": [{"name": "twice", "expression": "x * 2"}]}
    first = send(xs, "add_columns", "k-add", **body)
    assert first.status_code == 200, first.text
    again = send(xs, "add_columns", "k-add", **body)
    assert again.status_code == 200 and again.json() == first.json()
    other = send(xs, "add_columns", "k-add", new_columns=[{"name": "thrice", "expression": "x * 3"}])
    assert other.status_code == 422, other.text
    assert xs.catalog.reads.open_table(NAME).schema.names == ["id", "x", "twice"]
    assert operations(xs) == ["create", "add-columns"]


def test_a_restore_retried_under_its_key_lands_once(xs: RestLake) -> None:
    assert xs.post(f"/v1/table/{TP}/update", UPDATE).status_code == 200
    first = send(xs, "restore", "k-restore", version=1)
    assert first.status_code == 200, first.text
    again = send(xs, "restore", "k-restore", version=1)
    assert again.status_code == 200 and again.json() == first.json()
    assert send(xs, "restore", "k-restore", version=2).status_code == 422
    assert rows(xs) == (3, [(1, 10), (2, 20), (3, 30)])
    assert operations(xs) == ["create", "update", "restore"]


def test_field_metadata_changed_under_its_key_answers_the_first_fields(xs: RestLake) -> None:
    body = {"updates": [{"path": "x", "metadata": {"unit": "cm"}}]}
    first = send(xs, "update_field_metadata", "k-meta", **body)
    assert first.status_code == 200, first.text
    assert first.json()["fields"] == {"x": {"unit": "cm"}}
    assert send(xs, "update_field_metadata", "k-meta", **body).json() == first.json()
    other = send(xs, "update_field_metadata", "k-meta", updates=[{"path": "x", "metadata": {"unit": "m"}}])
    assert other.status_code == 422, other.text
    assert xs.catalog.reads.open_table(NAME).schema.field("x").metadata == {b"unit": b"cm"}
    assert operations(xs) == ["create", "field-metadata"]


def test_branch_rename_and_restore_retried_under_their_keys_land_once(xs: RestLake) -> None:
    xs.catalog.branches.create_branch(NAME, "dev")
    rename = {"branch": "dev", "alterations": [{"path": "x", "rename": "y"}]}
    admin = {HEADER: "k-rename"}
    path = f"/v1/table/{TP}/alter_columns"
    first = xs.post(path, rename, who="admin", headers=admin)
    assert first.status_code == 200, first.text
    assert xs.post(path, rename, who="admin", headers=admin).json() == first.json()
    main = xs.post(path, {**rename, "branch": None}, who="admin", headers=admin)
    assert main.status_code == 422, main.text
    assert xs.catalog.branches.open_branch(NAME, "dev").schema.names == ["id", "y"]
    assert xs.catalog.reads.open_table(NAME).schema.names == ["id", "x"]
    restored = send(xs, "restore", "k-restore", version=1, branch="dev")
    assert restored.status_code == 200, restored.text
    assert send(xs, "restore", "k-restore", version=1, branch="dev").json() == restored.json()
    assert send(xs, "restore", "k-restore", version=1).status_code == 422  # the key on main
    assert xs.catalog.branches.open_branch(NAME, "dev").schema.names == ["id", "x"]
    assert operations(xs) == ["create", "branch-create", "rename-column", "restore"]


def test_schema_metadata_changed_under_its_key_lands_once_on_main_and_a_branch(xs: RestLake) -> None:
    first = send(xs, "schema_metadata/update", "k-schema", owner="etl")
    assert first.status_code == 200, first.text
    assert first.json().get("owner") == "etl"
    assert send(xs, "schema_metadata/update", "k-schema", owner="etl").json() == first.json()
    other = send(xs, "schema_metadata/update", "k-schema", owner="ops")
    assert other.status_code == 422, other.text
    assert xs.catalog.reads.open_table(NAME).schema.metadata[b"owner"] == b"etl"
    entry = xs.catalog.reads.log(NAME)[-1]
    assert entry.detail["idempotency_key"] == "k-schema" and "request_digest" in entry.detail
    xs.catalog.branches.create_branch(NAME, "dev")
    body = {"metadata": {"owner": "dev"}, "branch": "dev"}
    on_dev = send(xs, "schema_metadata/update", "k-dev", **body)
    assert on_dev.status_code == 200, on_dev.text
    assert send(xs, "schema_metadata/update", "k-dev", **body).json() == on_dev.json()
    main = send(xs, "schema_metadata/update", "k-dev", metadata={"owner": "dev"})  # the key on main
    assert main.status_code == 422, main.text
    assert xs.catalog.branches.open_branch(NAME, "dev").schema.metadata[b"owner"] == b"dev"
    assert xs.catalog.reads.open_table(NAME).schema.metadata[b"owner"] == b"etl"
    assert operations(xs) == ["create", "schema-metadata", "branch-create", "schema-metadata"]


@pytest.mark.parametrize("branch", [None, "dev"])
def test_a_no_op_retried_under_its_key_answers_the_first_answer(
    rest_lake: RestLake, branch: str | None
) -> None:
    """A delete selecting no row and an insert of no rows commit nothing: a retry under the
    same key answers what they answered (version 1), though rows the delete selects and a
    version arrived in between; it deletes none of them. Another request under the key is 422."""
    on = {"branch": branch} if branch else {}
    assert send(rest_lake, "create", "k-create", ipc([1, 2])).status_code == 200
    rest_lake.catalog.branches.create_branch(NAME, "dev")
    deleted = send(rest_lake, "delete", "k-none", predicate="id > 2", **on)
    inserted = send(rest_lake, "insert", "k-empty", ipc([]), **on)
    assert deleted.json()["version"] == inserted.json()["version"] == 1, (deleted.text, inserted.text)
    assert send(rest_lake, "insert", "k-rows", ipc([3]), **on).status_code == 200
    assert send(rest_lake, "delete", "k-none", predicate="id > 2", **on).json() == deleted.json()
    assert send(rest_lake, "insert", "k-empty", ipc([]), **on).json() == inserted.json()

    def ids() -> list[int]:
        catalog = rest_lake.catalog
        line = (
            catalog.reads.open_table(NAME) if branch is None else catalog.branches.open_branch(NAME, branch)
        )
        return sorted(line.dataset.to_table().column("id").to_pylist())

    assert ids() == [1, 2, 3]
    for op, data, body in (("delete", None, {"predicate": "id > 1"}), ("insert", ipc([7]), {})):
        key = "k-none" if op == "delete" else "k-empty"
        resp = send(rest_lake, op, key, data, **body, **on)
        assert resp.status_code == 422, resp.text
    assert ids() == [1, 2, 3]

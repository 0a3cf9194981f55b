"""A staged manifest becomes a version only if Lance itself can open it
(``catalog/staged_schema.py``). The catalog reads manifests through lenient partial views (they
skip what they do not name), and the schema memo spares Lance's decode for a schema seen before:
a manifest Lance refuses to decode ("invalid wire type") was registered and the table, at its
current version, no longer opened for anyone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance  # the tests play Lance clients and an attacker with storage access
import pyarrow as pa
import pytest
from lance.schema import LanceSchema

from lake_platform.engine.manifests import split_manifest_file
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.catalog.staged_commits import orders_lake, staged, unchanged
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.staging import StagingOnly
from lake_platform_tests.rest.handlers.test_batch import stage, tid
from lake_platform_tests.rest.handlers.test_batch_branches import branch_ids, stage_on


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    yield from orders_lake(tmp_path)


def _rewritten(path: str, message: Callable[[bytes], bytes]) -> None:
    """The manifest file at ``path`` with its message replaced by ``message(old message)``."""
    with open(path, "rb") as f:
        raw = f.read()
    body = message(split_manifest_file(raw, path))
    pos = int.from_bytes(raw[-16:-8], "little")  # the message sits last, before the footer
    with open(path, "wb") as f:
        f.write(raw[:pos] + len(body).to_bytes(4, "little") + body + raw[-16:])


def _bad_timestamp(message: bytes) -> bytes:
    # Manifest.timestamp (7) is a message; sent as a varint, Lance's decoder refuses the whole
    # manifest (invalid wire type), while a partial view that does not name field 7 skips it.
    return message + bytes([7 << 3 | 0, 1])


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda ds: ds.delete("id = 2"), id="schema-seen-before"),
        pytest.param(lambda ds: ds.add_columns({"twice": "id * 2"}), id="new-schema"),
    ],
)
def test_a_manifest_lance_cannot_decode_is_refused(lake: RestLake, change: Callable[[Any], Any]) -> None:
    body = staged(lake, change)
    _rewritten("/" + body["manifest_path"], _bad_timestamp)

    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)

    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13, resp.json()
    assert "Lance cannot open" in resp.json()["detail"], resp.json()
    unchanged(lake)
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=tid("orders"), mode="append")
    assert ids_of(lake.catalog.reads.open_table("p.w.ns.orders")) == [1, 2, 3, 4]


@pytest.fixture
def two_tables(lake: RestLake) -> RestLake:
    """orders (ids 1, 2, 3) and lines (id 1), orders with branch dev made at version 1."""
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=tid("lines"), mode="create")
    lake.catalog.branches.create_branch("p.w.ns.orders", "dev")
    return lake


def test_a_batch_entry_lance_cannot_decode_commits_nothing(two_tables: RestLake) -> None:
    bad = stage(two_tables, "orders", rows([4]))
    _rewritten("/" + bad["manifest_path"], _bad_timestamp)
    entries = [stage(two_tables, "lines", rows([2])), bad]

    resp = two_tables.post("/v1/table/version/batch-create", {"entries": entries})

    assert (resp.status_code, resp.json()["code"]) == (400, 13), resp.text
    assert "Lance cannot open" in resp.json()["detail"], resp.json()
    unchanged(two_tables)
    assert ids_of(two_tables.catalog.reads.open_table("p.w.ns.lines")) == [1]


def test_a_branch_commit_lance_cannot_decode_is_refused(two_tables: RestLake) -> None:
    body = stage_on(two_tables, "orders", "dev", rows([4]))
    _rewritten("/" + body["manifest_path"], _bad_timestamp)

    resp = two_tables.post("/v1/table/p$w$ns$orders/version/create", body)

    assert (resp.status_code, resp.json()["code"]) == (400, 13), resp.text
    assert "Lance cannot open" in resp.json()["detail"], resp.json()
    assert two_tables.catalog.branches.branch(TableName.parse("p.w.ns.orders"), "dev")[0].current_version == 1
    assert branch_ids(two_tables, "orders") == [1, 2, 3]
    unchanged(two_tables)


# -- a staged schema held to its parent's, field id by field id ------------------------------


def _projected(
    lake: RestLake, fields: list[pa.Field], table: str = "orders", who: str = "writer"
) -> dict[str, Any]:
    """The CreateTableVersion body of Lance's Project to ``fields`` (ids given in order from 0, as
    ``LanceSchema.from_pyarrow`` numbers them), staged by pylance, not sent."""
    ns = StagingOnly(rest_namespace(lake.url, lake.tokens[who]))
    ds = lance.dataset(namespace_client=ns, table_id=tid(table))
    schema = LanceSchema.from_pyarrow(pa.schema(fields))
    with pytest.raises(Exception):  # noqa: B017, PT011 - the commit is kept on purpose (any message)
        lance.LanceDataset.commit(ds, lance.LanceOperation.Project(schema), read_version=ds.version)
    assert ns.staged is not None
    return {k: v for k, v in ns.staged.items() if v is not None and k not in ("identity", "context")}


def _refused(lake: RestLake, body: dict[str, Any], code: int, words: str) -> None:
    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)
    assert (resp.status_code, resp.json()["code"]) != (200, None), resp.text
    assert resp.json()["code"] == code, resp.json()
    assert words in resp.json()["detail"], resp.json()


ID, TAG = pa.field("id", pa.int64()), pa.field("tag", pa.string())


def test_a_field_kept_with_another_type_is_refused(lake: RestLake) -> None:
    """Field id 0 (id, int64) said to be a string: the table's files hold int64 under that id.
    Refused even to an admin (Lance's own cast gives the column a new id and writes it anew)."""
    body = _projected(lake, [pa.field("id", pa.string()), TAG], who="admin")
    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body, who="admin")
    assert (resp.status_code, resp.json().get("code")) == (400, 20), resp.text
    assert "field id 0" in resp.json()["detail"], resp.json()
    unchanged(lake)


def test_a_non_nullable_column_over_rows_without_it_is_refused(lake: RestLake) -> None:
    body = _projected(lake, [ID, TAG, pa.field("extra", pa.int64(), nullable=False)])
    _refused(lake, body, 20, "extra")
    unchanged(lake)
    # The same column nullable is Lance's all-null column: taken.
    body = _projected(lake, [ID, TAG, pa.field("extra", pa.int64())])
    assert lake.post("/v1/table/p$w$ns$orders/version/create", body).status_code == 200


def test_a_dropped_columns_field_id_given_to_a_new_column_is_refused(lake: RestLake) -> None:
    lake.catalog.alter.drop_column("p.w.ns.orders", "tag")  # metadata only: the files keep it
    body = _projected(lake, [ID, pa.field("qty", pa.int64())])  # field id 1 again
    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)
    assert resp.status_code == 400 and resp.json()["code"] == 20, resp.text
    assert "field id 1" in resp.json()["detail"], resp.json()
    snap = lake.catalog.reads.open_table("p.w.ns.orders")
    assert snap.version == 2 and snap.schema.names == ["id"]


def test_columns_swapping_names_take_admin(lake: RestLake) -> None:
    """Field ids 0 and 1 renamed to each other's names (the Arrow schema, by name, unchanged):
    a rename of both, which takes admin as ``lake table alter rename-column`` does."""
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    data = pa.table({"a": pa.array([1, 2], pa.int64()), "b": pa.array([10, 20], pa.int64())})
    lance.write_dataset(data, namespace_client=ns, table_id=tid("pairs"), mode="create")
    a, b = pa.field("a", pa.int64()), pa.field("b", pa.int64())

    body = _projected(lake, [b, a], table="pairs")
    resp = lake.post("/v1/table/p$w$ns$pairs/version/create", body)
    assert (resp.status_code, resp.json()["code"]) == (403, 15), resp.text
    assert lake.catalog.reads.open_table("p.w.ns.pairs").version == 1

    body = _projected(lake, [b, a], table="pairs", who="admin")
    assert lake.post("/v1/table/p$w$ns$pairs/version/create", body, who="admin").status_code == 200


def test_an_overwrite_that_keeps_the_rows_is_held_to_the_drop_rule(lake: RestLake) -> None:
    """A transaction saying Overwrite whose manifest keeps every data file but drops a column:
    a drop (admin), whatever the transaction says; a real overwrite by a writer is taken."""
    ns = StagingOnly(rest_namespace(lake.url, lake.tokens["writer"]))
    ds = lance.dataset(namespace_client=ns, table_id=tid("orders"))
    kept = [f.metadata for f in ds.get_fragments()]
    with pytest.raises(Exception):  # noqa: B017, PT011 - the commit is kept on purpose (any message)
        lance.LanceDataset.commit(ds, lance.LanceOperation.Overwrite(pa.schema([ID]), kept), read_version=1)
    assert ns.staged is not None
    body = {k: v for k, v in ns.staged.items() if v is not None and k not in ("identity", "context")}
    _refused(lake, body, 15, "drop")
    unchanged(lake)
    writer = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(
        pa.table({"n": [1]}), namespace_client=writer, table_id=tid("orders"), mode="overwrite"
    )
    assert lake.catalog.reads.open_table("p.w.ns.orders").schema.names == ["n"]


def test_a_dictionary_column_created_and_appended_through_rest_reads_back(lake: RestLake) -> None:
    """Lance reads a dictionary column's values from the manifest file at its final path, which a
    staged commit does not have yet: the decode check (0ae0fe0) refused pylance's create of such
    a table ("one Lance cannot open: Not found"), the client saw "Commit result unknown"."""
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    coded = pa.table({"id": [1, 2], "kind": pa.array(["a", "b"]).dictionary_encode()})
    lance.write_dataset(coded, namespace_client=ns, table_id=tid("coded"), mode="create")
    lance.write_dataset(coded, namespace_client=ns, table_id=tid("coded"), mode="append")
    read = lance.dataset(
        namespace_client=rest_namespace(lake.url, lake.tokens["reader"]), table_id=tid("coded")
    )
    assert read.version == 2
    assert sorted(read.to_table().column("kind").to_pylist()) == ["a", "a", "b", "b"]
    assert (
        lake.catalog.reads.open_table("p.w.ns.coded").schema.field("kind").type
        == coded.schema.field("kind").type
    )

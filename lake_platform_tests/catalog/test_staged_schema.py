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
import pytest

from lake_platform.engine.manifests import split_manifest_file
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.catalog.test_table_files_added import _staged
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.test_batch import stage, tid
from lake_platform_tests.rest.handlers.test_batch_branches import branch_ids, stage_on


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    for rest_lake in start_rest_lake(tmp_path):
        ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
        lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=tid("orders"), mode="create")
        yield rest_lake


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


def _unchanged(lake: RestLake) -> None:
    snap = lake.catalog.reads.open_table("p.w.ns.orders")
    assert snap.version == 1 and ids_of(snap) == [1, 2, 3]
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    read = lance.dataset(namespace_client=ns, table_id=tid("orders"))
    assert sorted(read.to_table().column("id").to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda ds: ds.delete("id = 2"), id="schema-seen-before"),
        pytest.param(lambda ds: ds.add_columns({"twice": "id * 2"}), id="new-schema"),
    ],
)
def test_a_manifest_lance_cannot_decode_is_refused(lake: RestLake, change: Callable[[Any], Any]) -> None:
    body = _staged(lake, change)
    _rewritten("/" + body["manifest_path"], _bad_timestamp)

    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)

    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13, resp.json()
    assert "Lance cannot open" in resp.json()["detail"], resp.json()
    _unchanged(lake)
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
    _unchanged(two_tables)
    assert ids_of(two_tables.catalog.reads.open_table("p.w.ns.lines")) == [1]


def test_a_branch_commit_lance_cannot_decode_is_refused(two_tables: RestLake) -> None:
    body = stage_on(two_tables, "orders", "dev", rows([4]))
    _rewritten("/" + body["manifest_path"], _bad_timestamp)

    resp = two_tables.post("/v1/table/p$w$ns$orders/version/create", body)

    assert (resp.status_code, resp.json()["code"]) == (400, 13), resp.text
    assert "Lance cannot open" in resp.json()["detail"], resp.json()
    assert two_tables.catalog.branches.branch(TableName.parse("p.w.ns.orders"), "dev")[0].current_version == 1
    assert branch_ids(two_tables, "orders") == [1, 2, 3]
    _unchanged(two_tables)

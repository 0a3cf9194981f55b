"""A Lance client's commit that changes the table's schema is governed as the same change is from
the CLI (``lake table alter``): adding a column or replacing the table takes write; dropping,
renaming or retyping a column takes admin; dropping one is refused on a protected table. The
operation is read from the transaction Lance wrote with the staged manifest. A refused commit
changes nothing in the registry."""

from __future__ import annotations

import logging
from typing import Any

import lance
import pyarrow as pa
import pytest

from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake

T = ["p", "w", "ns", "events"]
NAME = "p.w.ns.events"


def opened(lake: RestLake, who: str) -> lance.LanceDataset:
    return lance.dataset(namespace_client=rest_namespace(lake.url, lake.tokens[who]), table_id=T)


def state(lake: RestLake) -> tuple[int, list[str]]:
    snap = lake.catalog.reads.open_table(NAME)
    return snap.version, snap.schema.names


@pytest.fixture
def table(rest_lake: RestLake) -> RestLake:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=T, mode="create")
    return rest_lake


def refused(lake: RestLake, caplog: pytest.LogCaptureFixture, change: Any, status: int) -> None:
    """``change`` fails: our server refused its CreateTableVersion with ``status`` (the client
    itself reports any refused commit as "result unknown"), and nothing was committed."""
    before, logged = state(lake), len(lake.catalog.reads.history(NAME))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lake.request"), pytest.raises(Exception, match="(?i)commit"):
        change()
    answers = [r.getMessage().split()[1:3] for r in caplog.records if r.name == "lake.request"]
    assert ["CreateTableVersion", str(status)] in answers
    assert ["CreateTableVersion", "200"] not in answers
    assert state(lake) == before  # nothing committed
    assert len(lake.catalog.reads.history(NAME)) == logged


def test_a_writer_may_add_a_column_but_not_drop_or_rename_one(
    table: RestLake, caplog: pytest.LogCaptureFixture
) -> None:
    assert state(table) == (1, ["id", "tag"])
    opened(table, "writer").add_columns({"twice": "id * 2"})
    assert state(table) == (2, ["id", "tag", "twice"])
    refused(table, caplog, lambda: opened(table, "writer").drop_columns(["twice"]), 403)
    rename = {"path": "twice", "name": "double"}
    refused(table, caplog, lambda: opened(table, "writer").alter_columns(rename), 403)


def test_an_admin_may_drop_and_rename_columns(table: RestLake) -> None:
    opened(table, "writer").add_columns({"twice": "id * 2", "thrice": "id * 3"})
    opened(table, "admin").alter_columns({"path": "twice", "name": "double"})
    assert state(table) == (3, ["id", "tag", "double", "thrice"])
    opened(table, "admin").drop_columns(["thrice"])
    assert state(table) == (4, ["id", "tag", "double"])
    assert [e.actor for e in table.catalog.reads.history(NAME)][-2:] == ["boss", "boss"]
    assert sorted(
        table.catalog.reads.open_table(NAME).to_reader().read_all().column("double").to_pylist()
    ) == [
        2,
        4,
    ]


def test_dropping_a_column_of_a_protected_table_is_refused_even_to_an_admin(
    table: RestLake, caplog: pytest.LogCaptureFixture
) -> None:
    opened(table, "writer").add_columns({"twice": "id * 2"})
    table.catalog.containers.set_protected(NAME)
    refused(table, caplog, lambda: opened(table, "admin").drop_columns(["twice"]), 409)
    opened(table, "admin").alter_columns({"path": "twice", "name": "double"})  # a rename drops nothing
    assert state(table)[1] == ["id", "tag", "double"]


def test_a_writer_may_replace_the_table_with_another_schema(table: RestLake) -> None:
    ns = rest_namespace(table.url, table.tokens["writer"])
    other = pa.table({"code": ["a", "b", "c"]})
    assert lance.write_dataset(other, namespace_client=ns, table_id=T, mode="overwrite").version == 2
    assert state(table) == (2, ["code"])

"""A REST lake with table ``p.w.ns.orders`` (ids 1, 2, 3, written by pylance through the server),
the CreateTableVersion body pylance stages for a change without sending it, and the check that
the table is as written (after a refused commit): the tests of what a Lance client's commit may
register (``test_table_files_added``, ``test_staged_schema``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance  # the tests play Lance clients and an attacker with storage access
import pytest

from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.staging import StagingOnly
from lake_platform_tests.rest.handlers.test_batch import tid


def orders_lake(tmp_path: Path) -> Iterator[RestLake]:
    """For a test module's ``lake`` fixture: ``yield from orders_lake(tmp_path)``."""
    for rest_lake in start_rest_lake(tmp_path):
        ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
        lance.write_dataset(rows([1, 2, 3]), namespace_client=ns, table_id=tid("orders"), mode="create")
        yield rest_lake


def staged(lake: RestLake, change: Any) -> dict[str, Any]:
    """The CreateTableVersion body pylance stages for ``change(dataset)``, not sent."""
    ns = StagingOnly(rest_namespace(lake.url, lake.tokens["writer"]))
    ds = lance.dataset(namespace_client=ns, table_id=tid("orders"))
    with pytest.raises(Exception):  # noqa: B017, PT011 - the commit is kept on purpose (any message)
        change(ds)
    assert ns.staged is not None
    return {k: v for k, v in ns.staged.items() if v is not None and k not in ("identity", "context")}


def unchanged(lake: RestLake) -> None:
    """``orders`` is at version 1 with ids 1, 2, 3, for the registry and for a stock reader."""
    snap = lake.catalog.reads.open_table("p.w.ns.orders")
    assert snap.version == 1 and ids_of(snap) == [1, 2, 3]
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    read = lance.dataset(namespace_client=ns, table_id=tid("orders"))
    assert sorted(read.to_table().column("id").to_pylist()) == [1, 2, 3]

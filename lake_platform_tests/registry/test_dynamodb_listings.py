"""A namespace's listings on DynamoDB (layout 2), counted in Query requests. Its tables, its trash
and its commit log are what is nested in it (``ns.``) and its own (``ns/``): one key range
(``MetaStore.scan_range``), read with one query per bucket of the kind, where two prefix scans
made two (tables: 32 queries, trash and log: 17). A cascade reads its subtree's tables as one
range too, not one bucket merge per namespace. Registry-only tables (``catalog_records``): no
Lance dataset is opened."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.registry import keys
from lake_platform.registry.dynamodb_admin import init_table
from lake_platform.registry.dynamodb_layout import BUCKETS
from lake_platform.registry.records import TrashRecord
from lake_platform.registry.store import Put
from lake_platform.settings import load_settings
from lake_platform_tests.catalog.conftest import delete_registry_table
from lake_platform_tests.registry.catalog_records import table_ops
from lake_platform_tests.servers import SLOW_IO

#: Two tables of ``p.w.ns`` (one in a nested namespace), and a sibling's sharing its first letters.
TABLES = ["p.w.ns.t", "p.w.ns.sub.u", "p.w.ns2.v"]


@pytest.fixture
def catalog(dynamodb_url: str, tmp_path: Path) -> Iterator[Catalog]:
    settings = load_settings(home=tmp_path / "home", registry_url=dynamodb_url, **SLOW_IO)
    init_table(dynamodb_url, settings)
    try:
        with Catalog(settings) as c:
            c.containers.create_project("p")
            c.containers.create_warehouse("p.w")
            for ns in ("p.w.ns", "p.w.ns.sub", "p.w.ns2"):
                c.containers.create_namespace(ns)
            for name in TABLES:
                c.store.transact(table_ops(name, 1, str(tmp_path / "nowhere")))
            for at, name in enumerate(TABLES):
                trashed = TrashRecord(target=name, dropped_at_ms=at, expires_at_ms=at, dropped_by="x")
                c.store.transact([Put(keys.trash(name, at, f"gone{at}"), trashed.encode())])
            yield c
    finally:
        delete_registry_table(settings)


def _queries(catalog: Catalog) -> Counter[str]:
    """The Query requests ``catalog`` makes from now on, per kind of the partition queried."""
    sent: Counter[str] = Counter()

    def count(params: dict[str, Any], **_: Any) -> None:
        sent[params["ExpressionAttributeValues"][":p"]["S"].split("#")[0].split("/")[0]] += 1

    catalog.store.events.register("before-parameter-build.dynamodb.Query", count)  # type: ignore[attr-defined]
    return sent


def test_a_namespace_listing_is_one_query_per_bucket(catalog: Catalog) -> None:
    sent = _queries(catalog)
    assert [t.name for t in catalog.reads.list_tables("p.w.ns")] == ["p.w.ns.sub.u", "p.w.ns.t"]
    assert sent == {"tbl": BUCKETS}
    sent.clear()
    assert [r.target for r in catalog.trash.list_trash("p.w.ns")] == ["p.w.ns.sub.u", "p.w.ns.t"]
    assert sent == {"trs": BUCKETS}
    sent.clear()
    logged = {e.target for e in catalog.reads.log("p.w.ns")}
    assert logged == {"p.w.ns", "p.w.ns.sub"}
    assert sent == {"log": BUCKETS}


def test_a_cascade_reads_its_subtrees_tables_as_one_range(catalog: Catalog) -> None:
    sent = _queries(catalog)
    catalog.cascade.drop_namespace("p.w.ns", cascade=True)
    # The subtree is listed twice (before and under the mark), its tables each time one range:
    # not one bucket merge per namespace (here two).
    assert sent["tbl"] == 2 * BUCKETS
    assert [t.name for t in catalog.reads.list_tables("p.w")] == ["p.w.ns2.v"]
    trashed = {r.target for r in catalog.trash.list_trash("p.w.ns")}
    assert trashed == {"p.w.ns", "p.w.ns.sub.u", "p.w.ns.t"}

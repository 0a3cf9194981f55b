"""Every registry read a catalog on DynamoDB makes is strongly consistent: CAS heads, leases,
commit markers, idempotency records, listings and the layout item. Seen through the store's
botocore event hooks (each request's parameters), over a catalog's everyday calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import lake_settings, namespace_lake, rows


@pytest.fixture
def settings(tmp_path: Path, dynamodb_url: str) -> Iterator[LakeSettings]:
    with namespace_lake(lake_settings(tmp_path / "home", registry_url=dynamodb_url)) as made:
        yield made


def test_every_read_a_catalog_makes_is_consistent(settings: LakeSettings) -> None:
    reads: list[tuple[str, dict[str, Any]]] = []

    def seen(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in ("GetItem", "Query", "Scan", "BatchGetItem"):
            reads.append((model.name, dict(params)))

    with Catalog(settings) as catalog:
        assert isinstance(catalog.store, DynamoMetaStore)
        catalog.store.events.register("provide-client-params.dynamodb", seen)
        catalog.tables.create_table("p.w.ns.t", rows([1]), by=Provenance(commit_id="commit-0001"))
        catalog.tables.create_table("p.w.ns.t", rows([1]), by=Provenance(commit_id="commit-0001"))  # replay
        catalog.tables.append("p.w.ns.t", rows([2]))
        catalog.tables.append("p.w.ns.t", rows([3]))
        catalog.reads.history("p.w.ns.t")
        catalog.reads.open_table("p.w.ns.t", 1)
        catalog.reads.describe_table("p.w.ns.t", with_stats=False)
        list(catalog.reads.list_tables("p.w.ns"))
    assert {name for name, _ in reads} >= {"GetItem", "Query"}
    eventual = [
        (name, params.get("Key") or params.get("KeyConditionExpression"))
        for name, params in reads
        if params.get("ConsistentRead") is not True
    ]
    assert eventual == []

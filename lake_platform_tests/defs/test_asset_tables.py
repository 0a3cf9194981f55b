"""Asset keys and table names, and commit ids (partition predicates: test_partition_rows)."""

import dagster as dg
import pytest

from lake_platform.defs.asset_tables import (
    key_for_table,
    step_commit_id,
    table_for_key,
)
from lake_platform.errors import InvalidInput

MAP = {"sales": "demo.main.sales", "sales/eu": "demo.eu.sales"}


@pytest.mark.parametrize(
    ("key", "table"),
    [
        (["sales", "orders"], "demo.main.sales.orders"),
        (["sales", "eu", "orders"], "demo.eu.sales.orders"),  # the longest prefix wins
        (["demo", "main", "sales", "orders"], "demo.main.sales.orders"),  # the table's own name
    ],
)
def test_keys_name_tables_and_back(key: list[str], table: str) -> None:
    assert table_for_key(dg.AssetKey(key), MAP) == table
    assert table_for_key(key_for_table(table, MAP), MAP) == table


def test_a_key_naming_no_table_is_refused() -> None:
    with pytest.raises(InvalidInput, match="names no table"):
        table_for_key(dg.AssetKey(["orders"]), MAP)


def test_commit_ids_are_the_same_for_a_step_run_again_only() -> None:
    key = dg.AssetKey(["sales", "orders"])
    first = step_commit_id("run-1", "sales__orders", key, ["2024-01-02", "2024-01-01"])
    assert first == step_commit_id("run-1", "sales__orders", key, ["2024-01-01", "2024-01-02"])
    assert first != step_commit_id("run-2", "sales__orders", key, ["2024-01-01", "2024-01-02"])
    assert first != step_commit_id("run-1", "sales__orders", key, ["2024-01-01"])


@pytest.mark.parametrize(
    "key",
    [
        ["demo", "main", "sales.eu", "orders"],  # would be demo.main.sales.eu.orders: another asset's
        ["demo", "main", "sales", "eu.orders"],
        ["sales", "eu.orders"],  # under a mapped prefix too
    ],
)
def test_a_key_part_holding_a_dot_is_refused_not_split_into_another_assets_table(key: list[str]) -> None:
    # ["demo", "main", "sales", "eu", "orders"] names demo.main.sales.eu.orders: a dotted part
    # would write that asset's table under a second asset key.
    with pytest.raises(InvalidInput, match="holds a dot") as refused:
        table_for_key(dg.AssetKey(key), MAP)
    assert "one key part per name segment" in str(refused.value)

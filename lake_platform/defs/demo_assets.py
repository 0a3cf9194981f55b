"""The demo's user project (``make run`` / ``lake up``): the seeded orders table as an asset, and
one user asset written through the Lake IO manager, so the UI shows lineage from a lake table
into a user's asset and a governed table written by Dagster. Materialize ``sales/region_totals``
in the UI: it reads the orders table at the version last observed and commits
``demo.main.sales.region_totals`` (one commit per run, overwritten)."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa

from lake_platform.defs.io_manager import IO_MANAGER_KEY
from lake_platform.defs.table_assets import table_specs

#: The namespace the demo seeds (``up.demo``), keyed ``sales/...`` in Dagster.
NAMESPACES = {"sales": "demo.main.sales"}
ORDERS = "demo.main.sales.orders"

(orders,) = table_specs([ORDERS], NAMESPACES)


@dg.asset(
    key=["sales", "region_totals"],
    io_manager_key=IO_MANAGER_KEY,
    group_name="demo",
    kinds={"lance"},
    metadata={"write_mode": "overwrite"},
    ins={"orders": dg.AssetIn(key=orders.key, metadata={"columns": ["region", "amount", "quantity"]})},
    description="Orders summed by region: a user's asset, committed through the Lake IO manager.",
)
def region_totals(orders: pa.Table) -> pa.Table:
    return orders.group_by("region").aggregate([("amount", "sum"), ("quantity", "sum"), ("region", "count")])


ASSETS = [orders, region_totals]

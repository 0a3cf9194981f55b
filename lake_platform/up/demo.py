"""The demo lake that `make run` / `lake up` creates: one project, warehouse, namespace and table."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from lake_platform import owner_only
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import LakeError, NamespaceAlreadyExists

PROJECT, WAREHOUSE, NAMESPACE, TABLE = "demo", "main", "sales", "orders"
TABLE_NAME = f"{PROJECT}.{WAREHOUSE}.{NAMESPACE}.{TABLE}"


@dataclass(frozen=True)
class DemoSummary:
    table: str
    created: bool
    version: int
    rows: int


def sample_orders(start: int = 0, count: int = 1000) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    regions = ["north", "south", "east", "west"]
    return pa.table(
        {
            "order_id": ids,
            "region": pa.array([regions[i % 4] for i in range(start, start + count)], pa.string()),
            "amount": pa.array(
                [round((i * 37 % 1000) / 10.0, 2) for i in range(start, start + count)], pa.float64()
            ),
            "quantity": pa.array([i % 7 + 1 for i in range(start, start + count)], pa.int32()),
        }
    )


def seed_demo(catalog: Catalog) -> DemoSummary:
    """Create the demo hierarchy and table if missing (idempotent)."""
    for create, name in (
        (catalog.containers.create_project, PROJECT),
        (catalog.containers.create_warehouse, f"{PROJECT}.{WAREHOUSE}"),
        (catalog.containers.create_namespace, f"{PROJECT}.{WAREHOUSE}.{NAMESPACE}"),
    ):
        try:
            create(name)
        except NamespaceAlreadyExists:
            pass
    created = False
    if not any(t.name == TABLE_NAME for t in catalog.reads.list_tables(f"{PROJECT}.{WAREHOUSE}.{NAMESPACE}")):
        catalog.tables.create_table(TABLE_NAME, sample_orders().to_reader(), by=Provenance(actor="demo-seed"))
        created = True
    info = catalog.reads.describe_table(TABLE_NAME)
    return DemoSummary(TABLE_NAME, created, info.current_version, info.rows or 0)


DEMO_USER = "demo"


def ensure_demo_user(catalog: Catalog, home: Path) -> tuple[str, str]:
    """A reader in the demo project for the Flight SQL snippet `lake up` prints.

    The password is generated once and kept in ``<home>/demo-user.txt`` (mode 600), so every
    `lake up` prints the same working credentials; only its scrypt hash is in the registry.
    """
    secret_file = home / "demo-user.txt"
    if secret_file.is_file():
        password = secret_file.read_text().strip()
        try:
            catalog.access.authenticate_password(DEMO_USER, password)
            return DEMO_USER, password
        except LakeError:
            pass  # the registry was reset, or the user removed: make it again
    password = secrets.token_urlsafe(18)
    try:
        catalog.access.remove_user(DEMO_USER)
    except LakeError:
        pass
    catalog.access.add_user(DEMO_USER, project=PROJECT, role="reader", password=password)
    owner_only.write_text(secret_file, password + "\n")
    return DEMO_USER, password

"""The DataFusion catalog providers one request plans through: a catalog per warehouse, a schema
per namespace, each table asked of the request's resolver (``planner.Resolver``), which looks it
up once and captures its ref.

Out of ``planner``, which plans and checks; these only translate DataFusion's questions into the
resolver's. Listings (``schema_names``, ``table_names``) are the snapshot's; when the resolver is
open-ended (names the snapshot misses are read from the registry: ``snapshot_miss``), a
warehouse or namespace it does not list is answered too, so a table created in one since the
last refresh is looked up like any other.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from datafusion.catalog import CatalogProvider, SchemaProvider, Table

from lake_platform.query.defaults import NEUTRAL_CATALOG


class TableSource(Protocol):
    """What the providers ask of the request's resolver (``planner.Resolver`` is one)."""

    #: Whether a warehouse or namespace the snapshot does not list is looked in too.
    open_ended: bool

    def schema_names(self, warehouse: str) -> list[str]: ...

    def table_names(self, warehouse: str, db_schema: str) -> list[str]: ...

    def table(self, warehouse: str, db_schema: str, table: str) -> Any: ...


class NamespaceSchema(SchemaProvider):
    """One namespace (path joined by ".") of one warehouse."""

    def __init__(self, source: TableSource, warehouse: str, name: str) -> None:
        self._r, self._wh, self._name = source, warehouse, name

    def table_names(self) -> set[str]:
        return set(self._r.table_names(self._wh, self._name))

    def table(self, name: str) -> Table | None:
        return self._r.table(self._wh, self._name, name)

    def table_exist(self, name: str) -> bool:
        return name in self._r.table_names(self._wh, self._name)


class WarehouseCatalog(CatalogProvider):
    """One warehouse: its listed namespaces, or any namespace when the source is open-ended."""

    def __init__(self, source: TableSource, warehouse: str) -> None:
        self._r, self._wh = source, warehouse

    def schema_names(self) -> set[str]:
        return set(self._r.schema_names(self._wh))

    def schema(self, name: str) -> NamespaceSchema | None:
        if self._r.open_ended or name in self._r.schema_names(self._wh):
            return NamespaceSchema(self._r, self._wh, name)
        return None


class Warehouses(Mapping[str, CatalogProvider]):
    """One request's catalogs: one per listed warehouse and, when the source is open-ended, one
    for any other name asked for (a warehouse created since the last refresh). DataFusion's own
    default catalog is never one: a short name it completes with it must fail with DataFusion's
    error, which the planner retries in the project's one warehouse (``defaults.implicit``)."""

    def __init__(self, source: TableSource, warehouses: list[str]) -> None:
        self._r = source
        self._listed = {wh: WarehouseCatalog(source, wh) for wh in warehouses}

    def __getitem__(self, name: str) -> CatalogProvider:
        listed = self._listed.get(name)
        if listed is not None:
            return listed
        if self._r.open_ended and name != NEUTRAL_CATALOG:
            return WarehouseCatalog(self._r, name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._listed)

    def __len__(self) -> int:
        return len(self._listed)


__all__ = ["NamespaceSchema", "TableSource", "WarehouseCatalog", "Warehouses"]

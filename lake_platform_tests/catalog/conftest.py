"""A catalog on a fresh home, with project ``p``, warehouse ``p.w`` and namespace ``p.w.ns``.

``storage`` is parametrized so the same tests run on every store a warehouse can live on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings, load_settings

STORAGES = ["local"]


@dataclass
class Lake:
    settings: LakeSettings
    catalog: Catalog
    root: str

    def new_catalog(self, **kwargs: Any) -> Catalog:
        return Catalog(self.settings, **kwargs)


def lake_settings(home: Path, **overrides: Any) -> LakeSettings:
    return load_settings(home=home, **overrides)


@pytest.fixture(params=STORAGES)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "local":
        return {"root": None, "settings": {}}
    raise AssertionError(request.param)  # pragma: no cover - each store adds its branch


@pytest.fixture
def lake(tmp_path: Path, storage: dict[str, Any]) -> Iterator[Lake]:
    settings = lake_settings(tmp_path / "home", **storage["settings"])
    catalog = Catalog(settings)
    catalog.create_project("p")
    warehouse = catalog.create_warehouse("p.w", root=storage["root"])
    catalog.create_namespace("p.w.ns")
    try:
        yield Lake(settings, catalog, warehouse.root)
    finally:
        catalog.close()


def rows(ids: list[int], tag: str = "x") -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([tag] * len(ids), pa.string())}).to_reader()


def ids_of(snapshot: Any) -> list[int]:
    return sorted(snapshot.to_reader(columns=["id"]).read_all().column("id").to_pylist())

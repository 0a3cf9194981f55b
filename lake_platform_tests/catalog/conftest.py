"""A catalog on a fresh home, with project ``p``, warehouse ``p.w`` and namespace ``p.w.ns``.

``storage`` is parametrized so the same tests run on every store a warehouse can live on: a
local folder, and S3 (a SeaweedFS server on loopback started once per session, only when an S3
test runs; or the real S3 named by ``LAKE_TEST_S3_ENDPOINT``, see ``lake_platform_tests.s3_server``).
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
from lake_platform_tests.s3_server import S3Endpoint, s3_for_tests

STORAGES = ["local", "s3"]


@dataclass
class Lake:
    settings: LakeSettings
    catalog: Catalog
    root: str

    def new_catalog(self, **kwargs: Any) -> Catalog:
        return Catalog(self.settings, **kwargs)


def lake_settings(home: Path, **overrides: Any) -> LakeSettings:
    return load_settings(home=home, **overrides)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """The session's S3 endpoint with its bucket (SeaweedFS unless LAKE_TEST_S3_ENDPOINT is set)."""
    s3 = s3_for_tests(tmp_path_factory.mktemp("seaweed"))
    try:
        yield s3
    finally:
        s3.stop()


@pytest.fixture(params=STORAGES)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "local":
        yield {"root": None, "settings": {}}
    elif request.param == "s3":
        s3: S3Endpoint = request.getfixturevalue("seaweed")  # started on first use only
        prefix = s3.new_prefix()
        yield {"root": f"s3://{s3.bucket}/{prefix}", "settings": s3.lake_settings(), "s3": s3}
        if s3.external:
            s3.delete_prefix(prefix)  # a throwaway SeaweedFS needs no cleanup; a real bucket does
    else:  # pragma: no cover - each store adds its branch
        raise AssertionError(request.param)


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


def append_many(table: str, settings: LakeSettings, worker: int, count: int, start: Any) -> None:
    """A writer process: wait for ``start``, then append ``count`` one-row batches to ``table``
    (ids ``worker * 1000 + i``, tag ``w<worker>``). Importable, so spawned processes can run it."""
    catalog = Catalog(settings)
    start.wait()
    for i in range(count):
        catalog.append(table, rows([worker * 1000 + i], tag=f"w{worker}"))
    catalog.close()


def ids_of(snapshot: Any) -> list[int]:
    return sorted(snapshot.to_reader(columns=["id"]).read_all().column("id").to_pylist())

"""A catalog on a fresh home, with project ``p``, warehouse ``p.w`` and namespace ``p.w.ns``.

``storage`` is parametrized so the same tests run on every store a warehouse can live on: a
local folder, and S3 (a SeaweedFS server on loopback started once per session, only when an S3
test runs; or the real S3 named by ``LAKE_TEST_S3_ENDPOINT``, see ``lake_platform_tests.s3_server``).
``backend_settings`` is parametrized over the registry instead: SQLite, and DynamoDB on the
suite's moto server.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import lance_engine as engine
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.s3_server import S3Endpoint

STORAGES = ["local", "s3"]

#: The registry backends ``backend_settings`` runs a test on.
REGISTRY_BACKENDS = ["sqlite", "dynamodb"]


@dataclass
class Lake:
    settings: LakeSettings
    catalog: Catalog
    root: str

    def new_catalog(self, **kwargs: Any) -> Catalog:
        return Catalog(self.settings, **kwargs)


#: Every key prefix the registry writes under: ``state`` compares all of them.
REGISTRY_PREFIXES = ["prj/", "whs/", "nsp/", "tbl/", "ver/", "log/", "cid/", "lse/"]

#: A service token's writer and reader of project ``p``, as the ``by=`` of a catalog call.
WRITER = Provenance(principal=Principal("etl", "token", "p", "writer"))
READER = Provenance(principal=Principal("viewer", "token", "p", "reader"))

#: The table a pylance client creates through the catalog's Lance Namespace.
EVENTS = ["p", "w", "ns", "events"]


def lake_settings(home: Path, **overrides: Any) -> LakeSettings:
    return load_settings(home=home, **overrides)


@pytest.fixture(params=STORAGES)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "local":
        yield {"root": None, "settings": {}}
    elif request.param == "s3":
        s3: S3Endpoint = request.getfixturevalue("s3")  # the session's server, started on first use only
        prefix = request.getfixturevalue("s3_prefix")
        roots = s3.warehouse_roots(tmp_path / "home")  # the home the lake fixture opens
        yield {
            "root": f"s3://{s3.bucket}/{prefix}",
            "settings": {**s3.lake_settings(), "warehouse_roots": roots},
            "s3": s3,
        }
    else:  # pragma: no cover - each store adds its branch
        raise AssertionError(request.param)


@pytest.fixture
def scale_out(
    tmp_path: Path, dynamodb_url: str, s3: S3Endpoint, s3_prefix: str
) -> Iterator[tuple[LakeSettings, Catalog]]:
    """The scale-out pair: a DynamoDB registry (moto on loopback) and an S3 warehouse, with
    project ``p``, warehouse ``p.w`` and namespace ``p.w.ns``."""
    settings = load_settings(
        home=tmp_path / "home",
        registry_url=dynamodb_url,
        warehouse_roots=s3.warehouse_roots(tmp_path / "home"),
        **s3.lake_settings(),
    )
    init_table(dynamodb_url, settings)
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w", root=f"s3://{s3.bucket}/{s3_prefix}")
    catalog.containers.create_namespace("p.w.ns")
    yield settings, catalog
    catalog.close()
    delete_registry_table(settings)


def delete_registry_table(settings: LakeSettings) -> None:
    """Delete the DynamoDB table ``settings`` name as their registry."""
    store = DynamoMetaStore.from_url(settings.registry_url, settings)
    try:
        delete_table(store)
    finally:
        store.close()


@contextlib.contextmanager
def namespace_lake(settings: LakeSettings) -> Iterator[LakeSettings]:
    """``settings``' lake holding project ``p``, warehouse ``p.w`` (under the home) and namespace
    ``p.w.ns``, no catalog left open on it; a DynamoDB registry's table is made for it and
    deleted afterwards."""
    dynamodb = settings.registry_url.startswith("dynamodb")
    if dynamodb:
        init_table(settings.registry_url, settings)
    try:
        with Catalog(settings) as catalog:
            catalog.containers.create_project("p")
            catalog.containers.create_warehouse("p.w")
            catalog.containers.create_namespace("p.w.ns")
        yield settings
    finally:
        if dynamodb:
            delete_registry_table(settings)


@pytest.fixture(params=REGISTRY_BACKENDS)
def backend_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LakeSettings]:
    """A ``namespace_lake`` on a fresh home, its registry on SQLite or on DynamoDB (a fresh table
    on the suite's moto server): for tests that open their own catalogs, or hand the settings to
    another process."""
    overrides: dict[str, Any] = {}
    if request.param == "dynamodb":
        overrides["registry_url"] = request.getfixturevalue("dynamodb_url")
    with namespace_lake(lake_settings(tmp_path / "home", **overrides)) as settings:
        yield settings


@pytest.fixture
def lake(tmp_path: Path, storage: dict[str, Any]) -> Iterator[Lake]:
    settings = lake_settings(tmp_path / "home", **storage["settings"])
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    warehouse = catalog.containers.create_warehouse("p.w", root=storage["root"])
    catalog.containers.create_namespace("p.w.ns")
    try:
        yield Lake(settings, catalog, warehouse.root)
    finally:
        catalog.close()


def rows(ids: list[int], tag: str = "x") -> pa.RecordBatchReader:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "tag": pa.array([tag] * len(ids), pa.string())}
    ).to_reader()


def append_many(
    table: str, settings: LakeSettings, worker: int, count: int, start: Any, aws_env: dict[str, str]
) -> None:
    """A writer process: wait for ``start``, then append ``count`` one-row batches to ``table``
    (ids ``worker * 1000 + i``, tag ``w<worker>``). Importable, so forked writers can run it."""
    os.environ.update(aws_env)  # the forkserver's environment is the one it started in
    catalog = Catalog(settings)
    start.wait()
    for i in range(count):
        catalog.tables.append(table, rows([worker * 1000 + i], tag=f"w{worker}"))
    catalog.close()


def append_in_processes(table: str, settings: LakeSettings, processes: int, count: int) -> None:
    """Run ``processes`` ``append_many`` writers at once (released together) and check that every
    one of them finished cleanly. Each is a process of its own with its own catalog and registry
    client, forked from the writers' forkserver (``faults.writer_processes``), which imported
    once what every writer imports (~4 s of CPU each when they were spawned)."""
    from lake_platform_tests.catalog.faults import aws_environment, writer_processes

    ctx = writer_processes()
    start = ctx.Event()
    aws_env = aws_environment()
    workers = [
        ctx.Process(target=append_many, args=(table, settings, w, count, start, aws_env))
        for w in range(processes)
    ]
    for p in workers:
        p.start()
    start.set()
    for p in workers:
        p.join(600)
        assert p.exitcode == 0


def ids_of(snapshot: Any) -> list[int]:
    return sorted(snapshot.to_reader(columns=["id"]).read_all().column("id").to_pylist())


def state(lake: Lake) -> tuple[list[Any], list[Any]]:
    """Everything a failed call must leave unchanged: every registry item and every file."""
    registry = [
        (i.key, i.value, i.revision) for p in REGISTRY_PREFIXES for i in lake.catalog.store.scan_prefix(p)
    ]
    files = sorted(
        (f.path, f.size) for f in engine.list_files(lake.root, lake.settings.storage_options(lake.root))
    )
    return registry, files


def unleased(found: tuple[list[Any], list[Any]]) -> tuple[list[Any], list[Any]]:
    """``state`` without the lease records: a refusal made under a table's lease leaves its
    record released at a new revision."""
    registry, files = found
    return [i for i in registry if not i[0].startswith("lse/")], files


def events(ids: list[int]) -> pa.Table:
    """Rows for ``EVENTS``."""
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def storage_options_of(lake: Lake) -> dict[str, str] | None:
    """What a pylance client passes as ``storage_options`` to reach the lake's warehouse."""
    return lake.settings.storage_options(lake.root) or None


def sent_at_once(lake: Lake, call: Callable[[Catalog], object]) -> list[object]:
    """``call`` made by two catalogs (two servers) released together by a barrier; the answers
    (or the exceptions raised) in the order they came, each catalog closed after."""
    catalogs = [lake.new_catalog(), lake.new_catalog()]
    together = threading.Barrier(2)
    answers: list[object] = []

    def send(catalog: Catalog) -> None:
        together.wait()
        try:
            answers.append(call(catalog))
        except Exception as exc:  # noqa: BLE001 - the caller's assertion names it
            answers.append(exc)

    threads = [threading.Thread(target=send, args=(c,)) for c in catalogs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for catalog in catalogs:
        catalog.close()
    return answers


def staged_manifests(lake: Lake) -> list[str]:
    """Lance's staging manifests left anywhere in the lake: each is an engine commit that no
    registry commit made a version (a change run a second time, its landing refused)."""
    files = engine.list_files(lake.root, lake.settings.storage_options(lake.root))
    return sorted(f.path for f in files if engine.is_staging_manifest(f.path))

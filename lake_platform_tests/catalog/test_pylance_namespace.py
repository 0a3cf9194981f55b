"""pylance as a governed client: it writes and reads through the catalog's Lance Namespace."""

from __future__ import annotations

import lance  # the test plays a pylance user; the package itself imports lance only in engine/
import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    CreateNamespaceRequest,
    DescribeNamespaceRequest,
    DropNamespaceRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    TableExistsRequest,
)

from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.catalog.principals import Principal
from lake_platform.engine import lance_engine as engine

from lake_platform_tests.catalog.conftest import Lake, ids_of

ID = ["p", "w", "ns", "events"]


def data(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def storage(lake: Lake) -> dict[str, str] | None:
    return lake.settings.storage_options(lake.root) or None


def test_pylance_creates_appends_and_reads_registered_versions(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    ds = lance.write_dataset(data([1, 2]), namespace_client=ns, table_id=ID, mode="create",
                             storage_options=storage(lake))
    assert ds.version == 1
    lance.write_dataset(data([3]), namespace_client=ns, table_id=ID, mode="append", storage_options=storage(lake))
    snap = lake.catalog.open_table("p.w.ns.events")
    assert snap.version == 2 and ids_of(snap) == [1, 2, 3]
    assert snap.schema.names == ["id", "v"] and snap.record.schema_ipc  # schema captured at first commit
    opened = lance.dataset(namespace_client=ns, table_id=ID, storage_options=storage(lake))
    assert opened.version == 2 and opened.count_rows() == 3
    assert lance.dataset(namespace_client=ns, table_id=ID, version=1, storage_options=storage(lake)).count_rows() == 2
    history = lake.catalog.history("p.w.ns.events")
    assert [(e.operation, e.to_version) for e in history] == [("declare", None), ("commit", 1), ("commit", 2)]
    # Reads never write: no stray manifest copies appear however often we open.
    before = sorted(f.path for f in engine.list_files(snap.record.location, storage(lake)))
    for _ in range(3):
        lance.dataset(namespace_client=ns, table_id=ID, storage_options=storage(lake)).count_rows()
    assert sorted(f.path for f in engine.list_files(snap.record.location, storage(lake))) == before


def test_pylance_open_follows_registry_not_disk(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    lance.write_dataset(data([1]), namespace_client=ns, table_id=ID, mode="create", storage_options=storage(lake))
    location = lake.catalog.open_table("p.w.ns.events").record.location
    lance.write_dataset(data([99]), location, mode="append", storage_options=storage(lake))  # rogue, bypassing
    assert lance.dataset(namespace_client=ns, table_id=ID, storage_options=storage(lake)).count_rows() == 1


def test_namespace_operations_map_onto_the_catalog(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    ns.create_namespace(CreateNamespaceRequest(id=["p", "w", "raw"]))
    ns.create_namespace(CreateNamespaceRequest(id=["p", "w", "raw", "sub"]))
    assert ns.list_namespaces(ListNamespacesRequest(id=["p", "w"])).namespaces == ["ns", "raw"]
    assert ns.list_namespaces(ListNamespacesRequest(id=["p", "w", "raw"])).namespaces == ["sub"]
    assert ns.list_namespaces(ListNamespacesRequest(id=[])).namespaces == ["p"]
    ns.describe_namespace(DescribeNamespaceRequest(id=["p", "w", "raw"]))
    with pytest.raises(ns_errors.NamespaceNotFoundError):
        ns.describe_namespace(DescribeNamespaceRequest(id=["p", "w", "nope"]))
    with pytest.raises(ns_errors.NamespaceNotEmptyError):
        ns.drop_namespace(DropNamespaceRequest(id=["p", "w", "raw"]))
    ns.drop_namespace(DropNamespaceRequest(id=["p", "w", "raw"], behavior="Cascade"))
    lance.write_dataset(data([1]), namespace_client=ns, table_id=ID, mode="create", storage_options=storage(lake))
    assert ns.list_tables(ListTablesRequest(id=["p", "w", "ns"])).tables == ["events"]
    ns.table_exists(TableExistsRequest(id=ID))
    with pytest.raises(ns_errors.TableNotFoundError):
        ns.table_exists(TableExistsRequest(id=["p", "w", "ns", "missing"]))
    with pytest.raises(ns_errors.InvalidInputError):
        ns.table_exists(TableExistsRequest(id=["p", "w", "ns", "Bad"]))
    with pytest.raises(ns_errors.UnsupportedOperationError):
        ns.rename_table({"id": ID})


def test_pylance_obeys_permissions_and_tenancy(lake: Lake) -> None:
    reader = LakeNamespace(lake.catalog, Principal("r", "user", "p", "reader"))
    with pytest.raises(Exception) as err:
        lance.write_dataset(data([1]), namespace_client=reader, table_id=ID, mode="create",
                            storage_options=storage(lake))
    assert "may not" in str(err.value)
    with pytest.raises(Exception):
        lake.catalog.open_table("p.w.ns.events")
    owner = LakeNamespace(lake.catalog)
    lance.write_dataset(data([1]), namespace_client=owner, table_id=ID, mode="create", storage_options=storage(lake))
    outsider = LakeNamespace(lake.catalog, Principal("o", "user", "q", "admin"))
    with pytest.raises(Exception):
        lance.dataset(namespace_client=outsider, table_id=ID, storage_options=storage(lake))


def test_tags_through_the_namespace(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    lance.write_dataset(data([1]), namespace_client=ns, table_id=ID, mode="create", storage_options=storage(lake))
    lance.write_dataset(data([2]), namespace_client=ns, table_id=ID, mode="append", storage_options=storage(lake))
    ns.create_table_tag({"id": ID, "tag": "gold", "version": 1})
    assert ns.get_table_tag_version({"id": ID, "tag": "gold"}).version == 1
    assert set(ns.list_table_tags({"id": ID}).tags) == {"gold"}
    with pytest.raises(ns_errors.TableTagAlreadyExistsError):
        ns.create_table_tag({"id": ID, "tag": "gold", "version": 2})
    ns.delete_table_tag({"id": ID, "tag": "gold"})
    with pytest.raises(ns_errors.TableTagNotFoundError):
        ns.get_table_tag_version({"id": ID, "tag": "gold"})

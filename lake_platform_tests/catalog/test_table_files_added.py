"""Every file a Lance client's commit adds is there when the version is registered: deletion
files and index files as data files (``table_files.added_files``). A staged delete whose
deletion file, or a staged index whose files, were removed (an orphan reclaim with a short age
gate, or never written) was registered, and the table then failed to read or to query."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import lance  # the tests play Lance clients and an attacker with storage access
import pytest

from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.catalog.staged_commits import orders_lake, staged, unchanged
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.test_batch import tid


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    yield from orders_lake(tmp_path)


def _location(lake: RestLake) -> str:
    return lake.catalog.reads.open_table("p.w.ns.orders").record.location


def _listing(location: str, folder: str) -> set[str]:
    path = os.path.join(location, folder)
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def test_a_delete_whose_deletion_file_is_gone_is_refused(lake: RestLake) -> None:
    location = _location(lake)
    before = _listing(location, "_deletions")
    body = staged(lake, lambda ds: ds.delete("id = 2"))
    (added,) = _listing(location, "_deletions") - before
    os.remove(os.path.join(location, "_deletions", added))

    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)

    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13, resp.json()
    assert added in resp.json()["detail"] and "is gone" in resp.json()["detail"]
    unchanged(lake)


def test_an_index_whose_files_are_gone_is_refused(lake: RestLake) -> None:
    location = _location(lake)
    before = _listing(location, "_indices")
    body = staged(lake, lambda ds: ds.create_scalar_index("id", "BTREE"))
    (added,) = _listing(location, "_indices") - before
    shutil.rmtree(os.path.join(location, "_indices", added))

    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)

    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13, resp.json()
    assert "is gone" in resp.json()["detail"]
    unchanged(lake)


def _with_version(raw: bytes, version: int) -> bytes:
    """The manifest file ``raw`` with its own version field (``Manifest.version``, 3) set to
    ``version``: a manifest copied under another version's name, as a careless client does."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from lake_platform.engine.manifests import split_manifest_file

    # A proto2 view of the one field (a plain varint, as Lance writes it); the rest is kept as
    # unknown fields.
    kinds = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="version_view.proto", package="t", syntax="proto2")
    fdp.message_type.add(name="V").field.add(
        name="version", number=3, type=kinds.TYPE_UINT64, label=kinds.LABEL_OPTIONAL
    )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    manifest = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.V"))()
    manifest.ParseFromString(split_manifest_file(raw, "m"))
    manifest.version = version
    body = manifest.SerializeToString()
    pos = int.from_bytes(raw[-16:-8], "little")  # the message sits last, before the footer
    return raw[:pos] + len(body).to_bytes(4, "little") + body + raw[-16:]


@pytest.mark.parametrize("inside", [1, 7])
def test_a_manifest_whose_own_version_is_another_is_refused(lake: RestLake, inside: int) -> None:
    body = staged(lake, lambda ds: ds.delete("id = 2"))  # Lance's version 2
    path = "/" + body["manifest_path"]
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:
        f.write(_with_version(raw, inside))

    resp = lake.post("/v1/table/p$w$ns$orders/version/create", body)

    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13 and f"version {inside}" in resp.json()["detail"], resp.json()
    unchanged(lake)
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=tid("orders"), mode="append")
    assert ids_of(lake.catalog.reads.open_table("p.w.ns.orders")) == [1, 2, 3, 4]

"""On S3, a table dropped with purge and recreated under the same name never sees old state
(invariant 4): the new incarnation has its own location, the old prefix is empty, and every read
of the new table, at any version, returns only new rows."""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform.errors import TableVersionNotFound
from lake_platform.registry import keys
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.s3_server import S3Endpoint

T = "p.w.ns.t"

pytestmark = pytest.mark.parametrize("storage", ["s3"], indirect=True)


def _key_prefix(s3: S3Endpoint, location: str) -> str:
    bucket_root = f"s3://{s3.bucket}/"
    assert location.startswith(bucket_root), location
    return location.removeprefix(bucket_root)


def tags_of(snapshot: Any) -> set[str]:
    return set(snapshot.to_reader(columns=["tag"]).read_all().column("tag").to_pylist())


def test_purge_then_recreate_never_sees_old_state(lake: Lake, storage: dict[str, Any]) -> None:
    s3: S3Endpoint = storage["s3"]
    lake.catalog.tables.create_table(T, rows([1, 2, 3], tag="old"))
    lake.catalog.tables.append(T, rows([4, 5], tag="old"))
    old_snapshot = lake.catalog.reads.open_table(T)
    old = old_snapshot.record
    old_prefix = _key_prefix(s3, old.location)
    assert old.location.startswith(lake.root + "/")
    assert any(k.startswith(f"{old_prefix}/_versions/") for k in s3.keys_under(old_prefix))

    lake.catalog.trash.drop_table(T, purge=True)
    assert s3.keys_under(old_prefix) == []  # every object of the old incarnation is gone
    assert list(lake.catalog.store.scan_prefix(keys.versions(old.incarnation))) == []

    lake.catalog.tables.create_table(T, rows([10, 11], tag="new"))
    new = lake.catalog.reads.open_table(T).record
    new_prefix = _key_prefix(s3, new.location)
    assert new.incarnation != old.incarnation
    assert new.location != old.location
    assert not new_prefix.startswith(old_prefix + "/") and not old_prefix.startswith(new_prefix + "/")

    # Current and version 1 of the new incarnation: only new rows (the old one also had a v1).
    current = lake.catalog.reads.open_table(T)
    assert (current.version, ids_of(current), tags_of(current)) == (1, [10, 11], {"new"})
    first = lake.catalog.reads.open_table(T, 1)
    assert (ids_of(first), tags_of(first)) == ([10, 11], {"new"})
    # The old incarnation's version 2 does not exist for the new one ...
    with pytest.raises(TableVersionNotFound):
        lake.catalog.reads.open_table(T, 2)
    # ... until the new incarnation commits its own.
    lake.catalog.tables.append(T, rows([12], tag="new"))
    second = lake.catalog.reads.open_table(T, 2)
    assert (ids_of(second), tags_of(second)) == ([10, 11, 12], {"new"})
    assert ids_of(lake.catalog.reads.open_table(T, 1)) == [10, 11]

    # Nothing landed under the old prefix, and the warehouse holds the new incarnation only (no
    # leftovers of the old one, not even an empty "directory" marker).
    assert s3.keys_under(old_prefix) == []
    assert all(k.startswith(new_prefix + "/") for k in s3.keys_under(_key_prefix(s3, lake.root)))

    # A snapshot opened before the drop fails (its objects are gone); it never falls forward.
    with pytest.raises(Exception, match="[Nn]ot found"):
        ids_of(old_snapshot)

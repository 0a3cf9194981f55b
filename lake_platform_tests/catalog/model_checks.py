"""The comparison ``catalog_machine.CatalogMachine`` makes after every step: a real catalog's
registry (namespaces, policy records, registered tables with incarnation and version, the trash,
each incarnation's version records) and engine (rows of every live version, tags, the manifests on
storage, nothing left of a purged incarnation) against ``catalog_model.CatalogModel``; and the
warehouse's listings against those records, after every step or (``assert_listings_match``) at
the end of a sequence."""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.policies import PolicyRecord
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import TableVersionNotFound
from lake_platform.naming import NamespaceName, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, TrashRecord, decode
from lake_platform_tests.catalog.catalog_model import CatalogModel, Incarnation


def assert_catalog_matches(
    catalog: Catalog,
    model: CatalogModel,
    *,
    warehouse: str,
    namespaces: list[str],
    tables: list[str],
    scopes: list[str],
    listings: bool,
) -> None:
    """Everything in ``warehouse`` (its ``namespaces``, ``tables`` and the policies of ``scopes``)
    as ``model`` has it.

    The registry is read by key over the universe, not by listing the warehouse: on DynamoDB a
    warehouse's table listing queries all 16 buckets of the kind and its trash listing 16 more,
    about three fifths of a comparison's requests, while every record a step can make is under a name of
    the universe (``scopes``: the warehouse, its namespaces and tables), whose records one
    multi-get and one single-partition query per trash target read. ``listings``: also check
    that the catalog's listings of the warehouse (``list_tables``, ``list_trash``) answer exactly
    those records, so nothing is registered or trashed outside the universe (cheap on SQLite; on
    DynamoDB 32 queries, so its machine compares them once a sequence, ``assert_listings_match``)."""
    # The namespace, policy and table records in one multi-get: one round trip, not one per key.
    items = catalog.store.get_many(
        [keys.namespace(NamespaceName.parse(ns)) for ns in namespaces]
        + [keys.policy(s) for s in scopes]
        + [keys.table(TableName.parse(t)) for t in tables]
    )
    ns_items, items = items[: len(namespaces)], items[len(namespaces) :]
    policy_items, table_items = items[: len(scopes)], items[len(scopes) :]
    for ns, item in zip(namespaces, ns_items, strict=True):
        present = item is not None
        assert present == (ns in model.namespaces), f"namespace {ns}: registry {present}"

    policies = {
        scope: decode(PolicyRecord, item.value, item.key).policy.trash_grace_seconds * 1000
        for scope, item in zip(scopes, policy_items, strict=True)
        if item is not None
    }
    assert policies == model.policies, "policy records (scope → trash grace ms)"

    records = {
        name: decode(TableRecord, item.value, item.key)
        for name, item in zip(tables, table_items, strict=True)
        if item is not None
    }
    registered = {n: (r.incarnation, r.current_version) for n, r in records.items()}
    assert registered == {n: (i.id, i.current) for n, i in model.tables.items()}
    assert all(r.name == n for n, r in records.items()), "a table record under another name"

    trash = trash_by_target(catalog, scopes)
    if listings:
        check_listings(catalog, warehouse, registered, trash)
    tables_trash = sorted(
        (
            r.target,
            r.table.incarnation,
            r.table.current_version,
            r.dropped_at_ms,
            r.expires_at_ms,
            r.state,
        )
        for r in trash
        if r.kind == "table" and r.table
    )
    assert tables_trash == sorted(
        (t.name, t.inc.id, t.inc.current, t.dropped_at, t.expires_at, "trashed") for t in model.trash
    )
    assert len(tables_trash) == sum(r.kind == "table" for r in trash), "a trash record lacks its table"
    ns_trash = sorted(
        (r.target, r.dropped_at_ms, r.expires_at_ms, undo_list(r.table_trash_keys))
        for r in trash
        if r.kind == "namespace"
    )
    assert ns_trash == sorted(
        (r.namespace, r.dropped_at, r.expires_at, sorted(r.tables)) for r in model.ns_trash
    )

    for name, inc in model.tables.items():
        check_registered(catalog, name, inc, records[name])
    for trashed in model.trash:
        check_kept(catalog, trashed.inc)
    for inc in model.purged:
        check_purged(catalog, inc)


def assert_listings_match(catalog: Catalog, *, warehouse: str, tables: list[str], scopes: list[str]) -> None:
    """The warehouse's listings (``list_tables``, ``list_trash``) against its records read by
    key over the universe (``assert_catalog_matches``' reads): for a machine that compares the
    listings once, at the end of a sequence, not after every step."""
    items = catalog.store.get_many([keys.table(TableName.parse(t)) for t in tables])
    records = [decode(TableRecord, item.value, item.key) for item in items if item is not None]
    registered = {r.name: (r.incarnation, r.current_version) for r in records}
    check_listings(catalog, warehouse, registered, trash_by_target(catalog, scopes))


def check_listings(
    catalog: Catalog, warehouse: str, registered: dict[str, tuple[str, int]], trash: list[TrashRecord]
) -> None:
    """The listings answer exactly the records read by key: nothing registered or trashed
    outside the universe, nothing of it missing."""
    listed = {r.name: (r.incarnation, r.current_version) for r in catalog.reads.list_tables(warehouse)}
    assert listed == registered, "the warehouse's table listing against its table records"
    assert sorted(catalog.trash.list_trash(warehouse), key=_trash_key) == sorted(trash, key=_trash_key)


def trash_by_target(catalog: Catalog, scopes: list[str]) -> list[TrashRecord]:
    """The trash records of every name in ``scopes``, one single-partition query each."""
    return [
        decode(TrashRecord, i.value, i.key)
        for scope in scopes
        for i in catalog.store.scan_prefix(keys.trash_prefix(scope + "/"))
    ]


def check_registered(catalog: Catalog, name: str, inc: Incarnation, record: TableRecord) -> None:
    """``record``: the table's record, as the comparison read it."""
    snap = catalog.reads.open_table(name)
    assert (snap.version, ids_of(snap)) == (inc.current, inc.rows), f"{name}: current version or rows"
    assert engine.tagged_versions(snap.dataset) == inc.tags, f"{name}: tags"
    assert record.protected == inc.protected, f"{name}: protected"
    for version, rows in inc.history.items():
        if version != inc.current:
            assert ids_of(catalog.reads.open_table(name, version)) == rows, f"{name}: rows at v{version}"
    for version in range(1, inc.current):
        if version not in inc.history:
            with pytest.raises(TableVersionNotFound):
                catalog.reads.open_table(name, version)
    check_kept(catalog, inc)


def check_kept(catalog: Catalog, inc: Incarnation) -> None:
    """Registered or trashed: every live version is registered and has its manifest on
    storage, and nothing newer than the registered version is there (invariant 1)."""
    assert registry_versions(catalog, inc) == sorted(inc.history), f"{inc.location}: registered versions"
    on_disk = engine.versions_on_disk(inc.location, catalog.settings.storage_options(inc.location))
    assert set(inc.history) <= set(on_disk), f"{inc.location}: versions on storage {on_disk}"
    assert max(on_disk) == inc.current, f"{inc.location}: versions on storage {on_disk}"


def check_purged(catalog: Catalog, inc: Incarnation) -> None:
    assert registry_versions(catalog, inc) == [], f"{inc.location}: version records left after purge"
    left = [f.path for f in engine.list_files(inc.location, catalog.settings.storage_options(inc.location))]
    assert left == [], f"{inc.location}: files left after purge: {left[:5]}"


def registry_versions(catalog: Catalog, inc: Incarnation) -> list[int]:
    return [int(i.key.rsplit("/", 1)[1]) for i in catalog.store.scan_prefix(keys.versions(inc.id))]


def ids_of(snapshot: Any) -> tuple[int, ...]:
    return tuple(sorted(snapshot.to_reader(columns=["id"]).read_all().column("id").to_pylist()))


def _trash_key(record: TrashRecord) -> tuple[str, int, str]:
    return (record.target, record.dropped_at_ms, record.table.incarnation if record.table else "")


def undo_list(trash_keys: list[str]) -> list[tuple[str, int]]:
    """A cascade's table trash keys ``trs/<name>/<dropped_at>-<incarnation>`` → sorted
    (incarnation, dropped_at) pairs, as the model keeps them."""
    pairs = []
    for key in trash_keys:
        stamp, _, incarnation = key.rsplit("/", 1)[1].partition("-")
        pairs.append((incarnation, int(stamp)))
    return sorted(pairs)

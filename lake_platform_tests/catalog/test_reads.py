"""Opening a version while its writer is still publishing the manifest. A writer registers the
version at its canonical path and links the file there right after the registry commit, so an
open in between finds the version registered and its file not there yet: it waits for the file
(a version committed within ``PUBLISH_GRACE_SECONDS``), as a query does; an older missing
version is refused at once. And what an open or a describe costs in registry requests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidTableState, LakeError, NamespaceNotFound, TableNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode
from lake_platform_tests.catalog.conftest import ids_of, lake_settings, rows
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.flight.helpers import CountingStore

T = "p.w.ns.t"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    c = Catalog(lake_settings(tmp_path / "home", warehouse_roots=str(tmp_path / "wh")))
    c.containers.create_project("p")
    c.containers.create_warehouse("p.w", root=str(tmp_path / "wh"))
    c.containers.create_namespace("p.w.ns")
    c.tables.create_table(T, rows([1]))
    c.tables.append(T, rows([2]))
    return c


def version_item(c: Catalog, version: int) -> tuple[VersionRecord, int]:
    record = decode(TableRecord, c.store.get(keys.table(TableName.parse(T))).value)  # type: ignore[union-attr]
    item = c.store.get(keys.version(record.incarnation, version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key), item.revision


def manifest_file(c: Catalog, version: int) -> Path:
    ver, _ = version_item(c, version)
    assert ver.staged_from is not None  # registered at its canonical path by its commit
    return Path("/" + ver.manifest_path.lstrip("/"))


def test_an_open_waits_for_the_manifest_of_a_version_being_published(catalog: Catalog) -> None:
    path = manifest_file(catalog, 2)
    aside = path.with_name(path.name + ".publishing")
    waits: list[float] = []

    def publish_during_the_wait(seconds: float) -> None:
        waits.append(seconds)
        os.rename(aside, path)  # the writer's link lands while the open waits

    fresh = Catalog(catalog.settings)  # no dataset cached from the writes
    os.rename(path, aside)
    try:
        fresh.reads.pause = publish_during_the_wait
        assert ids_of(fresh.reads.open_table(T)) == [1, 2]
    finally:
        if aside.exists():
            os.rename(aside, path)
        fresh.close()
    assert len(waits) == 1 and waits[0] <= 0.01  # the first check comes after a few milliseconds


def test_an_old_version_without_its_manifest_is_refused_at_once(catalog: Catalog) -> None:
    ver, revision = version_item(catalog, 2)
    old = ver.model_copy(update={"committed_at_ms": ver.committed_at_ms - 60_000})
    catalog.store.compare_and_swap(keys.version(ver.incarnation, 2), revision, old.encode())
    path = manifest_file(catalog, 2)
    aside = path.with_name(path.name + ".gone")
    waits: list[float] = []
    fresh = Catalog(catalog.settings)
    os.rename(path, aside)
    try:
        fresh.reads.pause = waits.append
        with pytest.raises(InvalidTableState, match="manifest is missing"):
            fresh.reads.open_table(T)
    finally:
        os.rename(aside, path)
        fresh.close()
    assert waits == []
    assert ids_of(catalog.reads.open_table(T)) == [1, 2]  # nothing else changed


def test_an_open_and_a_describe_with_stats_read_the_registry_twice(catalog: Catalog) -> None:
    # The head, then one multi-get: the version opened and the key above the head (a multi-table
    # commit's); the namespace answers Lance's DescribeTableVersion from that read. A separate get
    # for the key above the head would make three.
    for read in (
        lambda c: c.reads.open_table(T),
        lambda c: c.reads.open_table(T, 1),
        lambda c: c.reads.describe_table(T),
    ):
        store = CountingStore(catalog.store)
        with Catalog(catalog.settings, store) as fresh:
            read(fresh)
        assert (store.gets, store.scans) == (2, 0)
    store = CountingStore(catalog.store)
    with Catalog(catalog.settings, store) as fresh:
        assert fresh.reads.describe_table(T, with_stats=False).current_version == 2
    assert (store.gets, store.scans) == (2, 0)  # the head and the key above it: no version opened


def test_a_prefix_naming_a_table_lists_that_table_and_the_namespace_of_its_name(catalog: Catalog) -> None:
    """Whole segments: ``p.w.ns.t`` names the table itself and the tables of namespace
    ``ns.t`` (a namespace may share a table's name), never ``p.w.ns.t2``."""
    catalog.containers.create_namespace("p.w.ns.t")
    catalog.tables.create_table("p.w.ns.t.inner", rows([3]))
    catalog.tables.create_table("p.w.ns.t2", rows([4]))
    assert sorted(r.name for r in catalog.reads.list_tables(T)) == [T, "p.w.ns.t.inner"]


@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        ("q", NamespaceNotFound),
        ("p.nope", NamespaceNotFound),
        ("p.w.nope", NamespaceNotFound),
        ("p.w.ns.nope", TableNotFound),
    ],
)
def test_a_log_prefix_naming_nothing_is_not_found(
    catalog: Catalog, prefix: str, error: type[LakeError]
) -> None:
    """A typo was an empty log, as if nothing had happened there: the same answer a describe of
    it gives, while an existing object with no entries (a registry older than the log) is an
    empty log, and a dropped one keeps its entries."""
    with pytest.raises(error, match=prefix.replace(".", r"\.")):
        catalog.reads.log(prefix)
    ns_entries = [i.key for i in catalog.store.scan_prefix(keys.log_prefix("p.w.ns"))]
    for key in ns_entries:
        item = catalog.store.get(key)
        assert item is not None
        catalog.store.compare_and_delete(key, item.revision)
    assert catalog.reads.log("p.w.ns") != []  # its table's entries
    catalog.containers.create_namespace("p.w.empty")
    empty = catalog.store.scan_prefix(keys.log_prefix("p.w.empty"))
    for item in list(empty):
        catalog.store.compare_and_delete(item.key, item.revision)
    assert catalog.reads.log("p.w.empty") == []
    catalog.trash.drop_table(T, purge=True)
    assert [e.operation for e in catalog.reads.log(T)][-1] == "purge"


def test_a_log_prefix_in_another_tenants_project_looks_missing(catalog: Catalog) -> None:
    outsider = Provenance(principal=Principal("eve", "user", "q", "admin"))
    answers = []
    for prefix in ("p.w.ns", "p.w.nope"):
        with pytest.raises(NamespaceNotFound) as err:
            catalog.reads.log(prefix, by=outsider)
        answers.append(str(err.value).replace(prefix, "X"))
    assert answers[0] == answers[1]


def counted(catalog: Catalog) -> tuple[Catalog, RegistryCalls]:
    """A catalog over ``catalog``'s registry whose registry calls are listed and counted."""
    calls = RegistryCalls(catalog.store)
    return Catalog(catalog.settings, calls), calls


def test_a_page_of_child_namespaces_reads_no_grandchildren(catalog: Catalog) -> None:
    # A page of p.w's namespaces read every namespace nested under each child it passed: at
    # ns.s0 .. ns.s39 it read 42 records to answer [ns, other].
    for i in range(40):
        catalog.containers.create_namespace(f"p.w.ns.s{i}")
    catalog.containers.create_namespace("p.w.other")
    fresh, calls = counted(catalog)
    with fresh:
        assert fresh.reads.namespaces_in("p.w", limit=2) == ["ns", "other"]
        assert calls.items_scanned <= 4
        calls.items_scanned = 0
        assert fresh.reads.namespaces_in("p.w", after="ns", limit=2) == ["other"]
        assert calls.items_scanned <= 2
        assert fresh.reads.namespaces_in("p.w.ns", limit=3) == ["s0", "s1", "s10"]


def test_the_log_of_one_table_reads_no_other_tables_entries(catalog: Catalog) -> None:
    # ``lake log p.w.ns.t`` scanned log/p.w.ns.t: every entry of t2, t10, tt... too.
    for name in ("p.w.ns.t2", "p.w.ns.tt"):
        catalog.tables.create_table(name, rows([1]))
        catalog.tables.append(name, rows([2]))
    catalog.containers.create_namespace("p.w.ns.t")  # a namespace of the table's name
    catalog.tables.create_table("p.w.ns.t.inner", rows([3]))
    fresh, calls = counted(catalog)
    with fresh:
        entries = fresh.reads.log(T)
    assert {e.target for e in entries} == {T, "p.w.ns.t.inner"}
    assert calls.items_scanned == len(entries)


def test_a_warehouse_listing_reads_no_sibling_warehouses_tables(tmp_path: Path) -> None:
    # ``list_tables("p.w")`` scanned tbl/p/w: every table of p.w2 (and p.wx...) too, then
    # filtered them out; the same for a project prefix and p2's tables.
    roots = f"{tmp_path / 'wh'},{tmp_path / 'wh2'}"
    catalog = Catalog(lake_settings(tmp_path / "home", warehouse_roots=roots))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w", root=str(tmp_path / "wh"))
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table(T, rows([1]))
    catalog.containers.create_warehouse("p.w2", root=str(tmp_path / "wh2"))
    catalog.containers.create_namespace("p.w2.ns")
    for name in ("p.w2.ns.a", "p.w2.ns.b"):
        catalog.tables.create_table(name, rows([1]))
    fresh, calls = counted(catalog)
    with fresh:
        assert [r.name for r in fresh.reads.list_tables("p.w")] == [T]
        assert calls.items_scanned == 1
        calls.items_scanned = 0
        assert sorted(r.name for r in fresh.reads.list_tables("p.w2")) == ["p.w2.ns.a", "p.w2.ns.b"]
        assert calls.items_scanned == 2

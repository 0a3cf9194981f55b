"""pylance as a governed client: it writes and reads through the catalog's Lance Namespace."""

from __future__ import annotations

from typing import Any

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

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import TableNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform_tests.catalog.conftest import EVENTS, Lake, events, ids_of, storage_options_of
from lake_platform_tests.catalog.registry_calls import RegistryCalls


def test_pylance_creates_appends_and_reads_registered_versions(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    ds = lance.write_dataset(
        events([1, 2]),
        namespace_client=ns,
        table_id=EVENTS,
        mode="create",
        storage_options=storage_options_of(lake),
    )
    assert ds.version == 1
    lance.write_dataset(
        events([3]),
        namespace_client=ns,
        table_id=EVENTS,
        mode="append",
        storage_options=storage_options_of(lake),
    )
    snap = lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 2 and ids_of(snap) == [1, 2, 3]
    assert snap.schema.names == ["id", "v"] and snap.record.schema_ipc  # schema captured at first commit
    opened = lance.dataset(namespace_client=ns, table_id=EVENTS, storage_options=storage_options_of(lake))
    assert opened.version == 2 and opened.count_rows() == 3
    assert (
        lance.dataset(
            namespace_client=ns, table_id=EVENTS, version=1, storage_options=storage_options_of(lake)
        ).count_rows()
        == 2
    )
    history = lake.catalog.reads.history("p.w.ns.events")
    # Each commit is logged as what the client did, with the rows and files it added.
    assert [(e.operation, e.to_version, e.rows_added, e.files_added) for e in history] == [
        ("declare", None, 0, 0),
        ("create", 1, 2, 1),
        ("append", 2, 1, 1),
    ]
    assert all(e.bytes_added > 0 for e in history[1:])
    # Reads never write: no stray manifest copies appear however often we open.
    before = sorted(f.path for f in engine.list_files(snap.record.location, storage_options_of(lake)))
    for _ in range(3):
        lance.dataset(
            namespace_client=ns, table_id=EVENTS, storage_options=storage_options_of(lake)
        ).count_rows()
    assert sorted(f.path for f in engine.list_files(snap.record.location, storage_options_of(lake))) == before


def test_pylance_open_follows_registry_not_disk(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    lance.write_dataset(
        events([1]),
        namespace_client=ns,
        table_id=EVENTS,
        mode="create",
        storage_options=storage_options_of(lake),
    )
    location = lake.catalog.reads.open_table("p.w.ns.events").record.location
    lance.write_dataset(
        events([99]), location, mode="append", storage_options=storage_options_of(lake)
    )  # rogue, bypassing
    assert (
        lance.dataset(
            namespace_client=ns, table_id=EVENTS, storage_options=storage_options_of(lake)
        ).count_rows()
        == 1
    )


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
    lance.write_dataset(
        events([1]),
        namespace_client=ns,
        table_id=EVENTS,
        mode="create",
        storage_options=storage_options_of(lake),
    )
    assert ns.list_tables(ListTablesRequest(id=["p", "w", "ns"])).tables == ["events"]
    ns.table_exists(TableExistsRequest(id=EVENTS))
    with pytest.raises(ns_errors.TableNotFoundError):
        ns.table_exists(TableExistsRequest(id=["p", "w", "ns", "missing"]))
    with pytest.raises(ns_errors.InvalidInputError):
        ns.table_exists(TableExistsRequest(id=["p", "w", "ns", "Bad"]))
    with pytest.raises(ns_errors.UnsupportedOperationError):
        ns.rename_table({"id": EVENTS})


def test_pylance_obeys_permissions_and_tenancy(lake: Lake) -> None:
    reader = LakeNamespace(lake.catalog, Principal("r", "user", "p", "reader"))
    with pytest.raises(ns_errors.PermissionDeniedError) as err:
        lance.write_dataset(
            events([1]),
            namespace_client=reader,
            table_id=EVENTS,
            mode="create",
            storage_options=storage_options_of(lake),
        )
    assert "may not" in str(err.value)
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table("p.w.ns.events")
    owner = LakeNamespace(lake.catalog)
    lance.write_dataset(
        events([1]),
        namespace_client=owner,
        table_id=EVENTS,
        mode="create",
        storage_options=storage_options_of(lake),
    )
    outsider = LakeNamespace(lake.catalog, Principal("o", "user", "q", "admin"))
    with pytest.raises(ns_errors.TableNotFoundError):  # another tenant's table does not exist for them
        lance.dataset(namespace_client=outsider, table_id=EVENTS, storage_options=storage_options_of(lake))


def test_tags_through_the_namespace(lake: Lake) -> None:
    ns = LakeNamespace(lake.catalog)
    lance.write_dataset(
        events([1]),
        namespace_client=ns,
        table_id=EVENTS,
        mode="create",
        storage_options=storage_options_of(lake),
    )
    lance.write_dataset(
        events([2]),
        namespace_client=ns,
        table_id=EVENTS,
        mode="append",
        storage_options=storage_options_of(lake),
    )
    ns.create_table_tag({"id": EVENTS, "tag": "gold", "version": 1})
    assert ns.get_table_tag_version({"id": EVENTS, "tag": "gold"}).version == 1
    assert set(ns.list_table_tags({"id": EVENTS}).tags) == {"gold"}
    with pytest.raises(ns_errors.TableTagAlreadyExistsError):
        ns.create_table_tag({"id": EVENTS, "tag": "gold", "version": 2})
    ns.delete_table_tag({"id": EVENTS, "tag": "gold"})
    with pytest.raises(ns_errors.TableTagNotFoundError):
        ns.get_table_tag_version({"id": EVENTS, "tag": "gold"})


def test_a_pylance_index_build_is_a_registered_commit(lake: Lake) -> None:
    """A pylance user's ``create_scalar_index`` commits through the namespace like an append:
    the registry numbers the version and logs it; the catalog's readers see the index."""
    ns = LakeNamespace(lake.catalog)
    lance.write_dataset(
        events(list(range(100))),
        namespace_client=ns,
        table_id=EVENTS,
        mode="create",
        storage_options=storage_options_of(lake),
    )
    ds = lance.dataset(namespace_client=ns, table_id=EVENTS, storage_options=storage_options_of(lake))
    ds.create_scalar_index("id", "BTREE")
    snap = lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 2
    assert [(i.name, i.kind, i.rows_indexed) for i in lake.catalog.indexes.list_indexes("p.w.ns.events")] == [
        ("id_idx", "BTREE", 100)
    ]
    last = lake.catalog.reads.history("p.w.ns.events")[-1]
    assert (last.operation, last.to_version) == ("create-index", 2)


def test_a_schema_change_lands_in_the_versions_own_transaction(lake: Lake) -> None:
    """pylance declares without a schema and may change it with any commit: the commit reads
    the schema from the staged manifest and registers it with the version, in one transaction
    (no second write of the table record, no moment where the version and schema disagree)."""
    import pyarrow as pa

    from lake_platform.naming import TableName
    from lake_platform.registry import keys

    ns = LakeNamespace(lake.catalog)
    opts = storage_options_of(lake)
    lance.write_dataset(
        events([1, 2]), namespace_client=ns, table_id=EVENTS, mode="create", storage_options=opts
    )
    key = keys.table(TableName.parse("p.w.ns.events"))
    before = lake.catalog.store.get(key)
    assert before is not None
    wider = pa.table({"id": pa.array([7], pa.int64()), "v": ["x"], "w": pa.array([1.5], pa.float64())})
    lance.write_dataset(wider, namespace_client=ns, table_id=EVENTS, mode="overwrite", storage_options=opts)
    after = lake.catalog.store.get(key)
    assert after is not None and after.revision == before.revision + 1  # one write of the record
    snap = lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 2 and snap.schema.names == ["id", "v", "w"]
    assert lake.catalog.schemas.table_schema("p.w.ns.events").names == ["id", "v", "w"]
    lance.write_dataset(
        events([3]).append_column("w", pa.array([2.5])),
        namespace_client=ns,
        table_id=EVENTS,
        mode="append",
        storage_options=opts,
    )
    assert lake.catalog.reads.open_table("p.w.ns.events").schema.names == ["id", "v", "w"]


def test_listing_versions_after_its_own_commit_checks_no_file(lake: Lake) -> None:
    """A client's next commit starts with ListTableVersions: for a version this process has just
    committed and published it needs no stat of the manifest (a HEAD request on S3); a version
    another process committed moments ago is still checked (and published if its writer was
    stopped before the link)."""
    from lance_namespace_urllib3_client.models import ListTableVersionsRequest

    ns = LakeNamespace(lake.catalog)
    opts = storage_options_of(lake)
    lance.write_dataset(
        events([1]), namespace_client=ns, table_id=EVENTS, mode="create", storage_options=opts
    )
    lance.write_dataset(
        events([2]), namespace_client=ns, table_id=EVENTS, mode="append", storage_options=opts
    )
    checked = lake.catalog.published_versions.checks
    request = ListTableVersionsRequest(id=EVENTS, descending=True, limit=1)
    assert [v.version for v in ns.list_table_versions(request).versions] == [2]
    assert lake.catalog.published_versions.checks == checked
    with lake.new_catalog() as replica:  # another process's catalog
        listed = LakeNamespace(replica).list_table_versions(request)
        assert [v.version for v in listed.versions] == [2]
        assert replica.published_versions.checks == 1


class ReadsDuringCommits(LakeNamespace):
    """A LakeNamespace over a catalog whose registry is ``calls``: ``keys_read`` lists the
    registry keys read inside its create_table_version (a client's commit), in order."""

    def __init__(self, lake: Lake, calls: RegistryCalls, **catalog: Any) -> None:
        super().__init__(Catalog(lake.settings, calls, **catalog))
        self.calls = calls
        self.keys_read: list[str] = []

    def create_table_version(self, request: Any, check: Any = None) -> Any:
        self.calls.calls.clear()
        try:
            return super().create_table_version(request, check)
        finally:
            self.keys_read += self.calls.keys_read()


def test_a_commit_under_a_free_lease_reads_the_table_once(lake: Lake) -> None:
    """A client's CreateTableVersion when nobody holds the lease: the table's record and the
    lease, two registry reads (round trips on DynamoDB); the record is not read again, since the
    one commit is conditional on the revision read."""
    ns = ReadsDuringCommits(lake, RegistryCalls(lake.catalog.store))
    opts = storage_options_of(lake)
    with ns.catalog:
        lance.write_dataset(
            events([1]), namespace_client=ns, table_id=EVENTS, mode="create", storage_options=opts
        )
        record = lake.catalog.reads.open_table("p.w.ns.events").record
        ns.keys_read.clear()
        lance.write_dataset(
            events([2]), namespace_client=ns, table_id=EVENTS, mode="append", storage_options=opts
        )

    assert ns.keys_read == [keys.table(TableName.parse("p.w.ns.events")), keys.lease(record.incarnation)]
    assert ids_of(lake.catalog.reads.open_table("p.w.ns.events")) == [1, 2]


def test_a_record_changed_before_a_free_lease_commit_is_read_again_under_the_lease(lake: Lake) -> None:
    """The table's record changes between the commit's first read and its transaction (here:
    deletion protection turned on, when the client's data is staged): the commit under the free
    lease fails with nothing landed, and is made again under an acquired lease, which reads the
    record again. The append lands once, and the change made meanwhile stays."""
    changed: list[str] = []

    def protect(point: str) -> None:
        if point == "append:staged" and not changed:
            lake.catalog.containers.set_protected("p.w.ns.events")
            changed.append(point)

    ns = ReadsDuringCommits(lake, RegistryCalls(lake.catalog.store), hook=protect)
    opts = storage_options_of(lake)
    with ns.catalog:
        lance.write_dataset(
            events([1]), namespace_client=ns, table_id=EVENTS, mode="create", storage_options=opts
        )
        ns.keys_read.clear()
        lance.write_dataset(
            events([2]), namespace_client=ns, table_id=EVENTS, mode="append", storage_options=opts
        )

    snap = lake.catalog.reads.open_table("p.w.ns.events")
    assert changed == ["append:staged"]
    assert ids_of(snap) == [1, 2] and snap.version == 2
    assert snap.record.protected  # the retry committed over the changed record, not the one read first
    table_reads = ns.keys_read.count(keys.table(TableName.parse("p.w.ns.events")))
    assert table_reads >= 2  # read again under the lease
    assert [e.operation for e in lake.catalog.reads.history("p.w.ns.events")][-1:] == ["append"]


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda ns, tid: ns.describe_table_version({"id": tid, "version": "abc"}), "version"),
        (lambda ns, tid: ns.describe_table_version({"id": tid, "version": None}), "version"),
        (lambda ns, tid: ns.describe_table_version({"id": tid, "version": True}), "version"),
        (lambda ns, tid: ns.describe_table({"id": tid, "version": "x"}), "version"),
        (lambda ns, tid: ns.list_table_versions({"id": tid, "limit": "x"}), "limit"),
        (lambda ns, tid: ns.list_table_versions({"id": tid, "limit": -1}), "limit"),
    ],
)
def test_a_request_field_that_is_no_integer_is_the_specs_invalid_input(
    lake: Lake, call: Any, field: str
) -> None:
    """Before: ValueError or TypeError out of int() (a limit of -1 listed every version but the
    last): a careless caller of the namespace got no error of the spec's."""
    lake.catalog.tables.create_table("p.w.ns.t", pa.table({"id": [1]}).to_reader())
    with pytest.raises(ns_errors.InvalidInputError, match=field):
        call(LakeNamespace(lake.catalog), ["p", "w", "ns", "t"])


def test_create_namespace_follows_its_mode(lake: Lake) -> None:
    """The spec's modes, as the REST server answers them: before, LakeNamespace ignored the mode
    (ExistOk was NamespaceAlreadyExists, a bogus mode created the namespace)."""
    ns = LakeNamespace(lake.catalog)
    assert ns.create_namespace({"id": ["p", "w", "ns"], "mode": "ExistOk"}).properties == {
        "kind": "namespace"
    }
    with pytest.raises(ns_errors.NamespaceAlreadyExistsError):
        ns.create_namespace({"id": ["p", "w", "ns"]})
    with pytest.raises(ns_errors.UnsupportedOperationError, match="drop the namespace"):
        ns.create_namespace({"id": ["p", "w", "ns"], "mode": "overwrite"})
    with pytest.raises(ns_errors.InvalidInputError, match="mode"):
        ns.create_namespace({"id": ["p", "w", "other"], "mode": "bogus"})
    assert [n.name for n in lake.catalog.containers.list_namespaces("p.w")] == ["p.w.ns"]


def test_drop_namespace_refuses_a_behavior_it_does_not_know(lake: Lake) -> None:
    """Before, any behavior but Cascade was Restrict: the namespace was dropped."""
    with pytest.raises(ns_errors.InvalidInputError, match="behavior"):
        LakeNamespace(lake.catalog).drop_namespace({"id": ["p", "w", "ns"], "behavior": "purge"})
    assert [n.name for n in lake.catalog.containers.list_namespaces("p.w")] == ["p.w.ns"]


def walk(listing: Any, request: dict[str, Any], member: str) -> list[list[str]]:
    """Every page of ``listing`` at limit 2, following next tokens."""
    pages, token = [], None
    while True:
        answer = listing({**request, "limit": 2, "page_token": token})
        pages.append(getattr(answer, member))
        token = answer.page_token
        if token is None:
            return pages


def test_listings_page_by_limit_and_token_as_rest_does(lake: Lake) -> None:
    """Before, limit and page_token were ignored: all five names, no next token."""
    ns = LakeNamespace(lake.catalog)
    for name in ["e", "c", "a", "d", "b"]:
        ns.create_namespace({"id": ["p", "w", "ns", name]})
        lake.catalog.tables.create_table(f"p.w.ns.{name}", pa.table({"id": [1]}).to_reader())
    expected = [["a", "b"], ["c", "d"], ["e"]]
    assert walk(ns.list_namespaces, {"id": ["p", "w", "ns"]}, "namespaces") == expected
    assert walk(ns.list_tables, {"id": ["p", "w", "ns"]}, "tables") == expected
    first = ns.list_tables({"id": ["p", "w", "ns"], "limit": 4})
    assert (first.tables, first.page_token) == (["a", "b", "c", "d"], "d")
    assert ns.list_tables({"id": ["p", "w", "ns"], "page_token": "b"}).tables == ["c", "d", "e"]


@pytest.mark.parametrize(
    ("field", "value"), [("limit", 0), ("limit", -1), ("limit", "2"), ("limit", True), ("page_token", 3)]
)
def test_a_bad_limit_or_page_token_is_the_specs_invalid_input(lake: Lake, field: str, value: Any) -> None:
    ns = LakeNamespace(lake.catalog)
    with pytest.raises(ns_errors.InvalidInputError, match=field):
        ns.list_tables({"id": ["p", "w", "ns"], field: value})
    with pytest.raises(ns_errors.InvalidInputError, match=field):
        ns.list_namespaces({"id": ["p", "w"], field: value})


def test_a_listing_page_reads_about_one_page(lake: Lake) -> None:
    # ListTables read every table of the namespace and ListNamespaces every namespace under
    # the parent, nested ones too, to answer one page.
    from lake_platform_tests.registry.catalog_records import write_catalog

    names = write_catalog(lake.catalog.store, "p", namespaces=1, per_namespace=60, versions=1)
    for i in range(20):
        lake.catalog.containers.create_namespace(f"p.w.ns.s{i:02d}")
    calls = RegistryCalls(lake.catalog.store)
    ns = LakeNamespace(Catalog(lake.settings, calls))
    page = ns.list_tables(ListTablesRequest(id=["p", "w", "ns00000"], limit=2, page_token="t0010"))
    assert (page.tables, page.page_token) == (["t0011", "t0012"], "t0012") and len(names) == 60
    assert calls.items_scanned <= 3
    calls.items_scanned = 0
    page = ns.list_namespaces(ListNamespacesRequest(id=["p", "w"], limit=1))
    assert (page.namespaces, page.page_token) == (["ns"], "ns")
    assert calls.items_scanned <= 3
    page = ns.list_namespaces(ListNamespacesRequest(id=["p", "w", "ns"], limit=30))
    assert page.namespaces == [f"s{i:02d}" for i in range(20)] and page.page_token is None

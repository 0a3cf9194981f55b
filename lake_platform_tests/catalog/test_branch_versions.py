"""A Lance client's staged manifests committed on a branch (issue 46): pylance commits through a
namespace whose reads are the branch's line and whose CreateTableVersion is
``branch_versions.create_version``; each commit is one compare-and-swap of the branch's head
(logged with ``detail.branch``), main never moves, and a manifest that is not the branch's, or
names files outside the table, is refused with nothing registered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lance  # the test plays a pylance user; the package itself imports lance only in engine/
import pytest
from lance_namespace import LanceNamespace

from lake_platform.catalog.branches import branch_version
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import ConcurrentModification, InvalidInput, PermissionDenied, TableBranchNotFound
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows

T, OTHER = "p.w.ns.t", "p.w.ns.u"


class BranchClient(LanceNamespace):
    """What a Lance client bound to ``branch`` sees: the branch's line, commits through the
    catalog's branch_versions (the REST server's CreateTableVersion with ``branch``)."""

    def __init__(self, catalog: Catalog, name: str, branch: str, staged: list[dict[str, Any]]) -> None:
        self.catalog, self.name, self.branch, self.staged = catalog, name, branch, staged

    def namespace_id(self) -> str:
        return f"branch-client-{self.branch}"

    def _reads(self) -> Any:
        tname = TableName.parse(self.name)
        rec = self.catalog.branches.branch(tname, self.branch)[0]
        return self.catalog.branches.bound_namespace(
            tname, self.branch, self.catalog.ctx.storage(rec.location)
        )

    def describe_table(self, request: Any) -> Any:
        return self._reads().describe_table(request)

    def list_table_versions(self, request: Any) -> Any:
        return self._reads().list_table_versions(request)

    def describe_table_version(self, request: Any) -> Any:
        return self._reads().describe_table_version(request)

    def create_table_version(self, request: Any) -> Any:
        fields = dict(request) if isinstance(request, dict) else request.to_dict()
        self.staged.append(fields)
        self.catalog.branch_versions.create_version(
            self.name, self.branch, fields["version"], fields["manifest_path"]
        )
        return {}


@pytest.fixture
def table(lake: Lake) -> Iterator[Lake]:
    """``T`` at version 1 (ids 1, 2) with branch ``dev``; ``OTHER`` with branch ``dev`` too."""
    for name in (T, OTHER):
        lake.catalog.tables.create_table(name, rows([1, 2]))
        lake.catalog.branches.create_branch(name, "dev")
    yield lake


def head(lake: Lake, name: str = T) -> int:
    return lake.catalog.branches.branch(TableName.parse(name), "dev")[0].current_version


def test_pylance_commits_staged_manifests_on_the_branch_only(table: Lake) -> None:
    staged: list[dict[str, Any]] = []
    client = BranchClient(table.catalog, T, "dev", staged)
    lance.write_dataset(rows([3]).read_all(), namespace_client=client, table_id=T.split("."), mode="append")
    lance.write_dataset(
        rows([4, 5]).read_all(), namespace_client=client, table_id=T.split("."), mode="append"
    )
    assert head(table) == 3 and len(staged) == 2
    assert all("/tree/dev/_versions/" in s["manifest_path"] for s in staged)  # staged in the branch's dataset
    assert ids_of(table.catalog.branches.open_branch(T, "dev")) == [1, 2, 3, 4, 5]
    assert ids_of(table.catalog.branches.open_branch(T, "dev", 2)) == [1, 2, 3]
    main = table.catalog.reads.open_table(T)
    assert (main.version, ids_of(main)) == (1, [1, 2])
    entries = [
        (e.operation, e.from_version, e.to_version, e.rows_added, e.detail.get("branch"))
        for e in table.catalog.reads.history(T)
    ]
    assert entries[-2:] == [("append", 1, 2, 1, "dev"), ("append", 2, 3, 2, "dev")]


def test_a_manifest_not_the_branchs_next_is_refused_and_nothing_changes(table: Lake) -> None:
    staged: list[dict[str, Any]] = []
    other = BranchClient(table.catalog, OTHER, "dev", staged)
    lance.write_dataset(
        rows([9]).read_all(), namespace_client=other, table_id=OTHER.split("."), mode="append"
    )
    before = (head(table), len(table.catalog.reads.history(T)), table.catalog.reads.open_table(T).version)
    versions = table.catalog.branch_versions
    # another table's branch's manifest (as registered: the staged one is gone): its files are not T's
    tname = TableName.parse(OTHER)
    incarnation = table.catalog.ctx.table(tname)[0].incarnation
    path = branch_version(table.catalog.store, tname, incarnation, "dev", 2)[1].manifest_path
    assert staged and "/tree/dev/_versions/" in path
    with pytest.raises(InvalidInput, match="base path"):
        versions.create_version(T, "dev", 2, path)
    with pytest.raises(InvalidInput, match="does not exist"):
        versions.create_version(T, "dev", 2, path.replace("/_versions/", "/_versions/x"))
    with pytest.raises(InvalidInput):
        versions.create_version(T, "dev", 0, path)
    reader = Provenance(principal=Principal("viewer", "token", "p", "reader"))
    with pytest.raises(PermissionDenied):
        versions.create_version(T, "dev", 2, path, by=reader)
    # a branch the registry does not have, as lancedb's branches.create commits Lance's clone:
    # refused saying how a branch is made
    with pytest.raises(TableBranchNotFound, match=r"CreateTableBranch \(`lake branch create`\)"):
        versions.create_version(T, "feat", 1, path.replace("/tree/dev/", "/tree/feat/"))
    # the manifest is the branch's own, already registered: not its next version
    with pytest.raises(ConcurrentModification):
        versions.create_version(OTHER, "dev", 2, path)
    assert (
        head(table),
        len(table.catalog.reads.history(T)),
        table.catalog.reads.open_table(T).version,
    ) == before
    assert head(table, OTHER) == 2

"""Scalar indexes of a branch: build, list, refresh and drop, on the branch's own line.

Each is main's index change (``catalog/indexes.py``: the same checks, the same change to the
dataset, the same commit) under the branch's lease (its chain id), the branch record read
again (``Branches.held``) and a namespace bound to it (``Branches.writer_namespace``), so the
Lance commit is ONE registry transaction that compare-and-swaps the branch's head, with its
commit-log entry (``index create``/``index refresh``/``index drop`` with ``detail.branch``) and
commit marker; main never moves. The roles are main's (write to change, read to list); a
missing branch, or one in the trash, is TableBranchNotFound. Publishing the branch brings its
indexes into main with its head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.indexes import (
    IndexChange,
    OpenLine,
    building,
    chosen_options,
    commit_index_change,
    creation_detail,
    dropping_index,
    index_kind,
    index_writer,
    lagging_indexes,
    refreshing,
)
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import MaintenanceResult
from lake_platform.engine import indexes as engine_indexes
from lake_platform.engine import lance_engine as engine
from lake_platform.engine.indexes import IndexInfo
from lake_platform.naming import TableName
from lake_platform.registry.records import TableRecord


class BranchIndexes:
    def __init__(self, ctx: CatalogContext, branches: Branches, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.branches = branches
        self.commits = commits

    def list_indexes(
        self, name: str, branch: str, version: int | None = None, *, by: Provenance = UNSTATED
    ) -> list[IndexInfo]:
        """The indexes of the branch's head (or of its ``version``), with how many rows each
        does not cover yet."""
        snap = self.branches.open_branch(name, branch, version, by=by)
        return engine_indexes.list_indexes(snap.dataset)

    def create_index(
        self,
        name: str,
        branch: str,
        column: str,
        kind: str = "BTREE",
        *,
        replace: bool = False,
        options: Mapping[str, object] | None = None,
        detail: Mapping[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Build the index of ``column`` (``<column>_idx``) with ``options`` (as main's) over
        every row of the branch's head; an index of that name already there is refused unless
        ``replace``. ``detail`` and ``by.commit_id``: as main's."""
        kind = index_kind(kind)
        chosen = chosen_options(kind, options)
        tname, who = index_writer(self.ctx, name, by.principal)
        rec, _ = self.branches.branch(tname, branch)
        build = building(_label(tname, branch), rec, column, kind, replace, chosen)
        logged = {**(detail or {}), **creation_detail(column, kind, chosen)}
        return self._commit(IndexChange(tname, who, "index create", logged, build, by), branch)

    def refresh_indexes(
        self,
        name: str,
        branch: str,
        names: Sequence[str] | None = None,
        *,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Fold the branch's rows committed since the last build into its lagging indexes among
        ``names`` (default: every index). Nothing lags: ``nothing-to-do``, no commit."""
        tname, who = index_writer(self.ctx, name, by.principal)
        rec, _ = self.branches.branch(tname, branch)
        current = self.list_indexes(str(tname), branch, by=Provenance(principal=who))
        lagging = lagging_indexes(_label(tname, branch), current, names)
        if not lagging:
            return MaintenanceResult(str(tname), "index refresh", "nothing-to-do", rec.current_version)
        change = IndexChange(tname, who, "index refresh", {"indexes": lagging}, refreshing(lagging), by)
        return self._commit(change, branch)

    def drop_index(
        self,
        name: str,
        branch: str,
        column: str,
        *,
        detail: Mapping[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Drop the branch's index of ``column`` (or its index named ``column``); the branch's
        older versions, and main, keep theirs. ``detail`` and ``by.commit_id``: as main's."""
        tname, who = index_writer(self.ctx, name, by.principal)
        self.branches.branch(tname, branch)  # a missing branch is refused before the column is
        drop = dropping_index(_label(tname, branch), column)
        logged = {**(detail or {}), "column": column}
        return self._commit(IndexChange(tname, who, "index drop", logged, drop, by), branch)

    def _commit(self, change: IndexChange, branch: str) -> MaintenanceResult:
        change = replace(change, detail={**change.detail, "branch": branch}, branch=branch)
        tname = change.table

        def branch_line() -> tuple[str, OpenLine]:
            rec, _ = self.branches.branch(tname, branch)

            def open_branch(lease: Lease, pending: PendingCommit) -> tuple[TableRecord, Any, Any]:
                fresh, item = self.branches.held(
                    tname, branch, rec.incarnation, pending, at=rec.current_version
                )
                ns = self.branches.writer_namespace(
                    tname, fresh, item, pending, lease, change.operation, held=True
                )
                ds = engine.open_version(
                    namespace=ns,
                    table_id=tname.parts,
                    version=fresh.current_version,
                    storage_options=self.ctx.storage(fresh.location),
                )
                return fresh, ns, ds

            return rec.incarnation, open_branch

        return commit_index_change(self.ctx, self.commits, change, branch_line, hook="branch-")


def _label(tname: TableName, branch: str) -> str:
    return f"branch {branch} of {tname}"

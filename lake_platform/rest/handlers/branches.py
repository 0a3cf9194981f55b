"""Branches of a table over REST: ListTableBranches, CreateTableBranch, DeleteTableBranch, and
the reads the other handlers make when a request names a ``branch`` (DescribeTable, the version
operations; QueryTable reads a branch as SQL's ``"t@branch:dev"``, ``scan.table_sql``).

A branch is a registry object with a version chain of its own (``catalog/branches.py``): made
from a version of main or of another branch without copying a data file, written by
InsertIntoTable with ``branch`` (``catalog/branch_writes.py``), DeleteFromTable, UpdateTable,
MergeInsertIntoTable, the AlterTable*Columns operations, UpdateTableSchemaMetadata and
UpdateFieldMetadata (``catalog/branch_changes.py``) and a
Lance client's CreateTableVersion (``catalog/branch_versions.py``; with other tables' and lines'
versions, one atomic commit: BatchCreateTableVersions and BatchCommitTables), restored and its versions
deleted by RestoreTable and BatchDeleteTableVersions (``catalog/branch_history.py``), indexed by
the index operations (``catalog/branch_indexes.py``), main never moving; deleted into
the trash (the name stays taken until the table's ``trash_grace`` passes). Publishing a branch
into main and undropping one have no spec operation: they are lake's own routes
(``control.ROUTES``), as ``lake branch publish`` and ``lake branch undrop`` are. Each call goes
through the catalog's doors (tenant scoping, then read for a listing, write for a change), so a
refusal changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lance_namespace_urllib3_client.models import (
    BranchContents,
    DescribeTableResponse,
    ListTableBranchesResponse,
)

from lake_platform.catalog.branches import MAIN
from lake_platform.catalog.branches import branch_version as registered_branch_version
from lake_platform.catalog.namespace import BoundTableNamespace
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, TableBranchNotFound, TableVersionNotFound
from lake_platform.naming import TableName
from lake_platform.registry.records import BranchRecord, VersionRecord, new_id
from lake_platform.rest.handlers.common import paging, scoped, to_json
from lake_platform.rest.idempotency import keyed_body, once
from lake_platform.rest.json_schema import json_schema
from lake_platform.rest.request import RestRequest


def branch_of(request: RestRequest) -> str | None:
    """The ``branch`` a request names (a body member, or the query parameter some operations
    take); None for main (omitted, empty, or ``"main"``, the table's own line)."""
    return branch_in(request.body)


def branch_in(body: dict[str, Any]) -> str | None:
    """The ``branch`` member of ``body`` (a request's, or a batch entry's), as ``branch_of``."""
    branch = body.get("branch")
    if branch in (None, "", MAIN):
        return None
    if not isinstance(branch, str):
        raise InvalidInput(f"branch must be a string, got {branch!r}")
    return branch


def _name(request: RestRequest, member: str = "name") -> str:
    name = request.body.get(member)
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{member} is required (the branch's name)")
    return name


def list_table_branches(request: RestRequest) -> Any:
    """The table's live branches by name (paged like ListTables); each with where it was made
    from, when, and its head's manifest size. Lake's own facts ride in ``metadata``: the head
    ``version``, the ``main_version`` its line leaves main at (publishing needs main still
    there) and ``created_by``."""
    asked = paging(request.body)
    scoped(request, table=True)
    tname = request.table_name()
    catalog = request.service.catalog
    infos = {i.branch: i for i in catalog.branches.list_branches(str(tname), by=_by(request))}
    names, token = asked.of(list(infos))
    incarnation = catalog.ctx.table(tname)[0].incarnation
    branches = {}
    for name in names:
        try:
            rec, head = registered_branch_version(catalog.store, tname, incarnation, name, None)
        except (TableBranchNotFound, TableVersionNotFound):
            continue  # deleted or published since it was listed
        info = infos[rec.branch]
        size = head.manifest_size
        branches[rec.branch] = BranchContents(
            parent_branch=None if info.parent == MAIN else info.parent,
            parent_version=info.parent_version,
            create_at=info.created_at_ms // 1000,
            manifest_size=size or 0,
            metadata={
                "version": str(info.version),
                "main_version": str(info.main_version),
                "created_by": info.created_by,
            },
        )
    return to_json(ListTableBranchesResponse(branches=branches, page_token=token))


def create_table_branch(request: RestRequest) -> Any:
    """A branch from a version (default: the head) of main or of ``from_branch``: one registry
    commit, logged ``branch-create``; its ``transaction_id`` is that commit's id."""
    scoped(request, table=True)
    tname = request.table_name()
    name = _name(request)
    source = request.body.get("from_branch")
    if source is not None and not isinstance(source, str):
        raise InvalidInput(f"from_branch must be a string, got {source!r}")
    version = request.body.get("from_version")
    request_key = keyed_body(request, tname, "branch-create", {"branch-create"})
    if request_key.first is not None:  # the key's branch was made: its answer, not 409
        return {"transaction_id": request_key.first.commit_id}
    by = (
        request_key.by
        if request_key.by.commit_id
        else dataclasses.replace(request_key.by, commit_id=new_id())
    )
    request.service.catalog.branches.create_branch(
        str(tname), name, from_version=version, from_branch=source or None, detail=request_key.detail, by=by
    )
    return {"transaction_id": by.commit_id}


def delete_table_branch(request: RestRequest) -> Any:
    """The branch into the trash (recoverable, as DropTable is); refused on a protected table."""
    scoped(request, table=True)
    tname = request.table_name()
    name = _name(request)
    request_key = keyed_body(request, tname, "branch-delete", {"branch-delete"})
    if request_key.first is not None:  # the key's delete landed: its answer, not 404
        return {"transaction_id": request_key.first.commit_id}
    result = request.service.catalog.branch_trash.delete_branch(
        str(tname), name, detail=request_key.detail, by=request_key.by
    )
    return {"transaction_id": result.commit_id}


def publish_table_branch(request: RestRequest) -> Any:
    """Lake's own route (no spec operation): fast-forward main to the branch's head in one
    registry commit, logged ``publish``, as ``lake branch publish`` does; the branch is consumed.
    409 BranchDiverged (a ConcurrentModification) when main moved since the branch was made."""
    scoped(request, table=True)
    tname = request.table_name()
    name = _name(request)
    request_key = keyed_body(request, tname, "publish", {"publish"})
    if request_key.first is not None:  # the key's publish landed: its answer, the branch consumed
        entry = request_key.first
        return {
            "transaction_id": entry.commit_id,
            "from_version": entry.from_version,
            "version": entry.to_version,
        }
    result = request.service.catalog.branch_publish.publish_branch(
        str(tname), name, detail=request_key.detail, by=request_key.by
    )
    return {
        "transaction_id": result.commit_id,
        "from_version": result.from_version,
        "version": result.to_version,
    }


def undrop_table_branch(request: RestRequest) -> Any:
    """Lake's own route: a deleted branch back from the trash, as it was (``lake branch undrop``).
    An ``Idempotency-Key`` makes a retry answer the branch (as it is now) instead of
    TableBranchAlreadyExists: it is back already."""
    scoped(request, table=True)
    tname = request.table_name()
    name = _name(request)
    catalog = request.service.catalog
    return once(
        lambda: keyed_body(request, tname, "branch-undrop", {"branch-undrop"}),
        lambda request_key: catalog.branch_trash.undrop_branch(
            str(tname), name, detail=request_key.detail, by=request_key.by
        ).to_dict(),
        lambda _first: catalog.branches.info(
            tname, catalog.branches.branch(tname, name, trashed=True)[0]
        ).to_dict(),
    )


def _by(request: RestRequest) -> Provenance:
    return Provenance(principal=request.principal)


def branch_version(
    request: RestRequest, tname: TableName, branch: str, version: int | None
) -> tuple[BranchRecord, VersionRecord]:
    """The branch's record and its head's (or ``version``'s) record, for a reader of the table
    (registry only). TableBranchNotFound: no live branch of that name; TableVersionNotFound: a
    version outside the branch's line."""
    catalog = request.service.catalog
    catalog.ctx.readable(catalog.ctx.who(request.principal), tname)
    incarnation = catalog.ctx.table(tname)[0].incarnation
    return registered_branch_version(catalog.store, tname, incarnation, branch, version)


def describe_branch(request: RestRequest, tname: TableName, branch: str, version: int | None) -> Any:
    """DescribeTable of a branch: its head (or ``version``), at the branch's dataset root, with
    credentials for the table's folder (a branch's manifests name the parent's files there)."""
    rec, ver = branch_version(request, tname, branch, version)
    location = ver.location or rec.location
    storage = request.service.credentials.options_for(request.principal, tname.project, rec.folder_uri)
    answer = to_json(
        DescribeTableResponse(
            table=tname.table,
            namespace=tname.parts[:-1],
            location=location,
            table_uri=location,
            managed_versioning=True,
            version=ver.version,
            storage_options=storage or None,
            is_only_declared=False,
        )
    )
    if request.body.get("load_detailed_metadata"):
        snap = request.service.catalog.branches.open_branch(str(tname), branch, ver.version, by=_by(request))
        answer["schema"] = json_schema(snap.schema)
    return answer


def branch_namespace(request: RestRequest, tname: TableName, branch: str) -> BoundTableNamespace:
    """A namespace bound to the branch's line, for reading its versions (a reader of the table)."""
    catalog = request.service.catalog
    catalog.ctx.readable(catalog.ctx.who(request.principal), tname)
    rec, _ = catalog.branches.branch(tname, branch)
    return catalog.branches.bound_namespace(tname, branch, catalog.settings.storage_options(rec.location))


HANDLERS = {
    "ListTableBranches": list_table_branches,
    "CreateTableBranch": create_table_branch,
    "DeleteTableBranch": delete_table_branch,
}

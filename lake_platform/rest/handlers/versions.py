"""Managed versioning over REST: a Lance client's commit is ``CreateTableVersion``, which runs
the catalog's registry transaction (lease fencing, compare-and-swap on the version, commit log
and commit-id marker), exactly as an in-process pylance commit does; with ``branch``, on the
branch's own line (``catalog/branch_versions.py``). An ``Idempotency-Key``
header (or the staged transaction's ``idempotency-key`` property) makes a retry answer the
first outcome (``catalog/idempotency.py``)."""

from __future__ import annotations

from typing import Any

import lake_platform.rest.handlers.branches as branches
from lake_platform.catalog.namespace import table_version
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_commits import VersionCommits
from lake_platform.catalog.version_pages import page_after
from lake_platform.errors import InvalidInput
from lake_platform.naming import TableName
from lake_platform.rest.handlers.common import lake_namespace, paging, scoped, to_json
from lake_platform.rest.idempotency import idempotency_key
from lake_platform.rest.request import RestRequest


def _body(request: RestRequest) -> dict[str, Any]:
    return {**request.body, "id": request.ids}


def _versions_of(request: RestRequest) -> Any:
    """The namespace answering for the versions asked about: main's (the caller's catalog
    namespace), or a ``branch``'s line (``branches.branch_namespace``)."""
    branch = branches.branch_of(request)
    if branch is None:
        return lake_namespace(request)
    return branches.branch_namespace(request, request.table_name(), branch)


def list_table_versions(request: RestRequest) -> Any:
    """Main's versions, or a ``branch``'s (its line from the version it was made at), a page read
    at a time (``catalog/version_pages``)."""
    asked = paging(request.body)  # before the table or the branch is looked up
    limit, token = asked.limit, asked.after
    page_after(token)  # a token this server never handed out: 400, nothing read
    body = {k: v for k, v in _body(request).items() if k not in ("limit", "page_token")}
    scoped(request, table=True)
    request.table_name()
    namespace = _versions_of(request)
    if limit == 1 and token is None and body.get("descending"):
        # Lance's "which is the latest?" before each commit: one record read, not a scan. Its
        # token may lead to an empty page when every older version was cleaned up.
        answer = to_json(namespace.list_table_versions({**body, "limit": 1}))
        versions = answer.get("versions") or []
        older = bool(versions) and versions[0]["version"] > 1
        return {**answer, "versions": versions, "page_token": str(versions[0]["version"]) if older else None}
    answer = to_json(namespace.list_table_versions({**body, "limit": limit, "page_token": token}))
    return {**answer, "versions": answer.get("versions") or [], "page_token": answer.get("page_token")}


def describe_table_version(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    version = request.body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    return to_json(_versions_of(request).describe_table_version(_body(request)))


def create_table_version(request: RestRequest) -> Any:
    """A Lance client's staged manifest committed as main's next version, or as a ``branch``'s
    (``catalog.branch_versions``: the manifest must be in the branch's dataset; main never
    moves)."""
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    version, path = request.body.get("version"), request.body.get("manifest_path")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    if not isinstance(path, str) or not path:
        raise InvalidInput("manifest_path is required")
    if branch is not None:
        return _create_branch_version(request, tname, branch, version, path)
    # Checked against the record the commit reads first (no extra registry read), before the
    # lease; a caller without write permission is refused by the catalog before that. Called
    # directly, not through the namespace's spec errors, so a refusal keeps its own HTTP status
    # (a reused idempotency key is 422, not 400).
    commits = VersionCommits(request.service.catalog, request.principal)
    response = commits.create(
        _body(request),
        check=lambda record: check_manifest_path(record.location, path),
        idempotency_key=idempotency_key(request),
    )
    return to_json(response)


def _create_branch_version(
    request: RestRequest, tname: TableName, branch: str, version: int, path: str
) -> Any:
    """The branch's next version from the client's staged manifest. An ``Idempotency-Key``
    (or the staged transaction's property) replays as on main: a resend, or a client's retry
    that staged a new manifest for the same change, answers the first outcome."""
    body = request.body
    result = request.service.catalog.branch_versions.create_version(
        str(tname),
        branch,
        version,
        path,
        manifest_size=body.get("manifest_size"),
        e_tag=body.get("e_tag"),
        naming_scheme=body.get("naming_scheme"),
        check=lambda rec: check_manifest_path(rec.location, path),
        idempotency_key=idempotency_key(request),
        by=Provenance(principal=request.principal),
    )
    _, landed = branches.branch_version(request, tname, branch, result.to_version)
    return {"version": to_json(table_version(landed)), "transaction_id": result.commit_id}


def check_manifest_path(location: str, path: str) -> None:
    """A remote client names the manifest it staged; it must be a file directly in this table's
    ``_versions/`` (an object-store path, as Lance reports it), never another table's or any
    other object, which the catalog would then publish as this table's version."""
    if location.startswith("s3://"):
        base = location.removeprefix("s3://").partition("/")[2]
    else:
        base = location.removeprefix("file://").lstrip("/")
    prefix = base.rstrip("/") + "/_versions/"
    name = path.lstrip("/")[len(prefix) :] if path.lstrip("/").startswith(prefix) else ""
    if not name or "/" in name or ".." in name or not name.split(".manifest", 1)[0].isdigit():
        raise InvalidInput(f"manifest_path {path!r} is not a manifest in this table's _versions/ folder")


HANDLERS = {
    "ListTableVersions": list_table_versions,
    "DescribeTableVersion": describe_table_version,
    "CreateTableVersion": create_table_version,
}

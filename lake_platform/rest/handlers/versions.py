"""Managed versioning over REST: a Lance client's commit is ``CreateTableVersion``, which runs
the catalog's registry transaction (lease fencing, compare-and-swap on the version, commit log
and commit-id marker), exactly as an in-process pylance commit does."""

from __future__ import annotations

from typing import Any

from lake_platform.errors import InvalidInput
from lake_platform.rest.handlers.common import lake_namespace, scoped, to_json
from lake_platform.rest.request import RestRequest


def _body(request: RestRequest) -> dict[str, Any]:
    return {**request.body, "id": request.ids}


def _no_branch(request: RestRequest) -> None:
    if request.body.get("branch"):
        raise InvalidInput("branches are not registered by the catalog: omit 'branch'")


def list_table_versions(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    _no_branch(request)
    answer = to_json(lake_namespace(request).list_table_versions(_body(request)))
    answer.setdefault("versions", [])
    return answer


def describe_table_version(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    _no_branch(request)
    version = request.body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    return to_json(lake_namespace(request).describe_table_version(_body(request)))


def create_table_version(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    _no_branch(request)
    version, path = request.body.get("version"), request.body.get("manifest_path")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    if not isinstance(path, str) or not path:
        raise InvalidInput("manifest_path is required")
    return to_json(lake_namespace(request).create_table_version(_body(request)))


HANDLERS = {
    "ListTableVersions": list_table_versions,
    "DescribeTableVersion": describe_table_version,
    "CreateTableVersion": create_table_version,
}

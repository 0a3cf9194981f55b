"""Table metadata and tags, over the catalog's Lance Namespace. Drop and deregister go to the
trash (recoverable until its deadline, ``GET /v1/trash/{id}``)."""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput
from lake_platform.rest.handlers.common import lake_namespace, page, scoped, to_json
from lake_platform.rest.request import RestRequest


def _body(request: RestRequest) -> dict[str, Any]:
    return {**request.body, "id": request.ids}


def list_tables(request: RestRequest) -> Any:
    scoped(request, table=False)
    request.namespace_name()
    answer = lake_namespace(request).list_tables(_body(request))
    names, token = page(list(answer.tables), request.body)
    return {"tables": names, "page_token": token}


def list_all_tables(request: RestRequest) -> Any:
    delimiter = request.service.delimiter(request.query)
    declared = bool(request.body.get("include_declared"))
    records = request.service.catalog.reads.list_tables(by=Provenance(principal=request.principal))
    names = [delimiter.join(r.name.split(".")) for r in records if r.current_version > 0 or declared]
    found, token = page(names, request.body)
    return {"tables": found, "page_token": token}


def describe_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    answer = to_json(lake_namespace(request).describe_table(_body(request)))
    answer["table"] = tname.table
    answer["namespace"] = tname.parts[:-1]
    return answer


def table_exists(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    lake_namespace(request).table_exists(_body(request))
    return None


def declare_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    return to_json(lake_namespace(request).declare_table(_body(request)))


def drop_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    return to_json(lake_namespace(request).drop_table(_body(request)))


def deregister_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    return to_json(lake_namespace(request).deregister_table(_body(request)))


def get_table_stats(request: RestRequest) -> Any:
    scoped(request, table=True)
    info = request.service.catalog.reads.describe_table(
        str(request.table_name()), with_stats=True, by=Provenance(principal=request.principal)
    )
    fragments = info.fragments or 0
    rows = info.rows or 0
    return {
        "total_bytes": info.data_bytes or 0,
        "num_rows": rows,
        "num_indices": 0,
        "fragment_stats": {
            "num_fragments": fragments,
            "num_small_fragments": 0,
            "lengths": {"min": 0, "max": 0, "mean": 0, "p25": 0, "p50": 0, "p75": 0, "p99": 0},
        },
    }


def update_schema_metadata(request: RestRequest) -> Any:
    """Merges keys; a null value deletes its key (the spec's text says "replace", but backends
    merge, and a strict string map could not carry a delete)."""
    scoped(request, table=True)
    tname = request.table_name()
    if request.body.get("branch"):
        raise InvalidInput("branches are not registered by the catalog: omit 'branch'")
    values = request.body.get("metadata")
    if not isinstance(values, dict):
        raise InvalidInput("metadata must be a map of keys to strings (or null to delete a key)")
    result, merged = request.service.catalog.schemas.update_schema_metadata(
        str(tname), values, by=Provenance(principal=request.principal)
    )
    return {"metadata": merged, "transaction_id": result.commit_id}


def _tag_call(name: str) -> Any:
    def call(request: RestRequest) -> Any:
        scoped(request, table=True)
        request.table_name()
        return to_json(getattr(lake_namespace(request), name)(_body(request))) or {}

    return call


HANDLERS = {
    "ListTables": list_tables,
    "ListAllTables": list_all_tables,
    "DescribeTable": describe_table,
    "TableExists": table_exists,
    "DeclareTable": declare_table,
    "DropTable": drop_table,
    "DeregisterTable": deregister_table,
    "GetTableStats": get_table_stats,
    "UpdateTableSchemaMetadata": update_schema_metadata,
    "ListTableTags": _tag_call("list_table_tags"),
    "GetTableTagVersion": _tag_call("get_table_tag_version"),
    "CreateTableTag": _tag_call("create_table_tag"),
    "DeleteTableTag": _tag_call("delete_table_tag"),
    "UpdateTableTag": _tag_call("update_table_tag"),
}

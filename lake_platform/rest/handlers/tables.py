"""Table metadata and tag reads, over the catalog's Lance Namespace. Drop and deregister go to
the trash (recoverable until its deadline, ``GET /v1/trash/{id}``). Every tag read goes through
the registry's tags (``catalog/tags.py``), as ``lake tag`` does; tag changes: ``tags.py``."""

from __future__ import annotations

import json
from typing import Any

from lance_namespace_urllib3_client.models import DeclareTableResponse, TagContents

import lake_platform.rest.handlers.branches as branches
from lake_platform.catalog.branches import MAIN
from lake_platform.catalog.idempotency import commit_id_for, reused
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.schemas import schema_metadata_of
from lake_platform.engine import lance_engine as engine
from lake_platform.engine.fragments import fragment_sizes
from lake_platform.engine.indexes import list_indexes
from lake_platform.errors import (
    InvalidInput,
    TableAlreadyExists,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName
from lake_platform.rest.handlers.common import lake_namespace, paging, scoped, to_json
from lake_platform.rest.idempotency import confirm, idempotency_key, keyed, keyed_body
from lake_platform.rest.json_schema import json_schema
from lake_platform.rest.request import RestRequest


def _body(request: RestRequest) -> dict[str, Any]:
    return {**request.body, "id": request.ids}


def list_tables(request: RestRequest) -> Any:
    asked = paging(request.body)
    scoped(request, table=False)
    if len(request.ids) < 3:
        # The root, a project or a warehouse holds no tables directly: an empty list (as the
        # reference answers for any namespace without tables), once the container is found.
        lake_namespace(request).describe_namespace(_body(request))
        return {"tables": [], "page_token": None}
    lake_namespace(request).namespace_exists(_body(request))  # NamespaceNotFound, as before
    # One page read from the registry, never the whole namespace.
    records = request.service.catalog.reads.tables_in(
        ".".join(request.ids),
        after=asked.after,
        limit=asked.read_limit,
        declared=bool(request.body.get("include_declared")),
        by=Provenance(principal=request.principal),
    )
    names, token = asked.of([r.name.rsplit(".", 1)[1] for r in records])
    return {"tables": names, "page_token": token}


def list_all_tables(request: RestRequest) -> Any:
    asked = paging(request.body)
    delimiter = request.service.delimiter(request.query)
    declared = bool(request.body.get("include_declared"))
    # One page read from the registry in key order (namespace by namespace), never the whole
    # lake; its token is the page's last name.
    records = request.service.catalog.reads.all_tables(
        after=".".join(asked.after.split(delimiter)) if asked.after else None,
        limit=asked.read_limit,
        declared=declared,
        by=Provenance(principal=request.principal),
    )
    names = [delimiter.join(r.name.split(".")) for r in records]
    if asked.limit is not None and len(names) > asked.limit:
        return {"tables": names[: asked.limit], "page_token": names[asked.limit - 1]}
    return {"tables": names, "page_token": None}


def describe_table(request: RestRequest) -> Any:
    """The table at its current version, or at the ``version`` or ``tag`` asked for (resolved in
    the registry: TableVersionNotFound / TableTagNotFound when it holds no such one), or a
    ``branch``'s head or version (``branches.describe_branch``); with ``load_detailed_metadata``,
    that version's schema (``json_schema.py``)."""
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    if branch is not None:
        if request.body.get("tag"):
            raise InvalidInput("a tag names a version of main: give a tag or a branch, not both")
        return branches.describe_branch(request, tname, branch, _version_asked(request))
    version = resolve_version(request, tname)
    answer = to_json(lake_namespace(request).describe_table({**_body(request), "version": version}))
    answer["table"] = tname.table
    answer["namespace"] = tname.parts[:-1]
    if request.body.get("load_detailed_metadata") and answer.get("version"):
        snap = request.service.catalog.reads.open_table(
            str(tname), answer["version"], by=Provenance(principal=request.principal)
        )
        answer["schema"] = json_schema(snap.schema)
    return answer


def resolve_version(request: RestRequest, tname: TableName) -> int | None:
    """The registered version ``version`` and/or ``tag`` name (None: the current one)."""
    version, tag = _version_asked(request), request.body.get("tag")
    if tag is not None and not isinstance(tag, str):
        raise InvalidInput(f"tag must be a string, got {tag!r}")
    if not version and not tag:
        return None
    if tag:
        tagged = tagged_version(request, tname, tag)
        if version and version != tagged:
            raise InvalidInput(f"tag {tag} is version {tagged} of {tname}, not {version}")
        return tagged
    _, versions = request.service.catalog.reads.readable_versions(
        str(tname), by=Provenance(principal=request.principal)
    )
    if version not in versions:
        raise TableVersionNotFound(f"version {version} of {tname} does not exist (or was cleaned up)")
    return version


def _version_asked(request: RestRequest) -> int | None:
    version = request.body.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise InvalidInput(f"version must be a non-negative integer, got {version!r}")
    return version or None


def tag_not_found(request: RestRequest, tname: TableName, tag: str) -> TableTagNotFound:
    """The registry holds the tags; a tag only Lance's files hold (written around the catalog,
    say with pylance's ``tags.create`` on the table's location, or by an older release) is a tag
    of no surface, and asking for it says so (only on this error path is the dataset opened)."""
    snap = request.service.catalog.reads.open_table(str(tname), by=Provenance(principal=request.principal))
    if tag in engine.tagged_versions(snap.dataset):
        return TableTagNotFound(
            f"no tag {tag} on {tname}: a tag of that name exists only in Lance's files (written "
            "around the catalog); UpdateTableTag (lake tag create --replace) makes it a catalog tag"
        )
    return TableTagNotFound(f"no tag {tag} on {tname}")


def table_exists(request: RestRequest) -> Any:
    scoped(request, table=True)
    request.table_name()
    lake_namespace(request).table_exists(_body(request))
    return None


def declare_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    key = idempotency_key(request)
    if key is None:
        return to_json(lake_namespace(request).declare_table(_body(request)))
    return declare_once(request, tname, key)


def declare_once(request: RestRequest, tname: TableName, key: str) -> Any:
    """DeclareTable under an idempotency key: the declare's commit id is the key's, so a retry
    whose first attempt landed answers what the first answered (the same incarnation and
    location) instead of TableAlreadyExists; the key used for another table is 422."""
    if request.body.get("location"):
        raise InvalidInput("locations are assigned by the catalog (unique per incarnation)")
    catalog, who = request.service.catalog, request.principal
    commit_id = commit_id_for(who, key, "declare")
    marker = catalog.ctx.commit_landed(commit_id)
    if marker is None:
        record = catalog.tables.declare_table(str(tname), by=Provenance(principal=who, commit_id=commit_id))
    else:
        if marker.target != str(tname) or marker.operation != "declare":
            raise reused(key, f"{marker.operation} of {marker.target}", f"declare of {tname}")
        record = catalog.ctx.table(tname, declared=True)[0]
        if record.incarnation != marker.incarnation:
            raise TableAlreadyExists(
                f"table {tname} was declared under idempotency key {key!r}, then dropped and made again"
            )
    storage = request.service.credentials.options_for(who, tname.project, record.location)
    return to_json(
        DeclareTableResponse(location=record.location, managed_versioning=True, storage_options=storage)
    )


def drop_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    if idempotency_key(request) is not None:
        return drop_once(request, tname, "drop")
    return to_json(lake_namespace(request).drop_table(_body(request)))


def deregister_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    if idempotency_key(request) is not None:
        return drop_once(request, tname, "deregister")
    return to_json(lake_namespace(request).deregister_table(_body(request)))


def drop_once(request: RestRequest, tname: TableName, kind: str) -> Any:
    """DropTable or DeregisterTable (both a drop into the trash) under an idempotency key: the
    drop's log entry keeps the location it answers, so a retry whose first attempt landed
    answers it again instead of TableNotFound (also once the name is taken by a new table: the
    key names the first drop, never this one); the key used for another table is 422."""
    request_key = keyed_body(request, tname, kind, {"drop"})
    if request_key.first is None:
        catalog = request.service.catalog
        location = catalog.ctx.table(tname, declared=True)[0].location
        detail = {**request_key.detail, "location": location}
        catalog.trash.drop_table(str(tname), detail=detail, by=request_key.by)
    else:
        location = str(request_key.first.detail.get("location", ""))
    return {"id": tname.parts, "location": location}


def get_table_stats(request: RestRequest) -> Any:
    """Counted from the current version (of main, or of a ``branch``): its live rows and data
    bytes, its indexes, and its fragments' live row counts (a fragment is small below the
    table's compaction target, ``target_rows_per_fragment``; percentiles by the reference's
    rule, ``_percentile``)."""
    scoped(request, table=True)
    tname = request.table_name()
    catalog = request.service.catalog
    branch, by = branches.branch_of(request), Provenance(principal=request.principal)
    if branch is None:
        snap = catalog.reads.open_table(str(tname), by=by)
    else:
        snap = catalog.branches.open_branch(str(tname), branch, by=by)
    sizes = fragment_sizes(snap.dataset)
    lengths = sorted(f.rows for f in sizes)
    target = catalog.policies.effective_policy(str(tname)).policy.target_rows_per_fragment
    rows = sum(lengths)
    return {
        "total_bytes": sum(f.bytes for f in sizes),
        "num_rows": rows,
        "num_indices": len(list_indexes(snap.dataset)),
        "fragment_stats": {
            "num_fragments": len(lengths),
            "num_small_fragments": sum(1 for n in lengths if n < target),
            "lengths": {
                "min": lengths[0] if lengths else 0,
                "max": lengths[-1] if lengths else 0,
                "mean": rows // len(lengths) if lengths else 0,
                **{f"p{p}": _percentile(lengths, p) for p in (25, 50, 75, 99)},
            },
        },
    }


def _percentile(ordered: list[int], p: int) -> int:
    """The ``p``th percentile of ascending ``ordered`` as the reference server computes it: the
    value at index floor(p/100 * (n - 1))."""
    return ordered[p * (len(ordered) - 1) // 100] if ordered else 0


def update_schema_metadata(request: RestRequest) -> Any:
    """Merges keys; a null value deletes its key (the spec's text says "replace", but backends
    merge, and a strict string map could not carry a delete).

    The body is the spec's bare map (``{"owner": "etl"}``, what pylance's ``RestNamespace``
    sends), answered with the merged map; ``{"metadata": {...}}``, the namespace model's form,
    is taken too and answered in that form with the commit id. A ``branch`` (a member of that
    form, or the query parameter) changes the branch's metadata in one commit on its own line
    (``catalog.branch_changes``); main never moves. An ``Idempotency-Key`` is honoured
    (``rest/idempotency.keyed``): a retry answers the metadata its first commit left."""
    scoped(request, table=True)
    tname = request.table_name()
    body = request.body
    wrapped = isinstance(body.get("metadata"), dict) and set(body) <= {"id", "metadata", "branch"}
    if wrapped:
        values, branch = body["metadata"], body.get("branch")
    else:  # the id (checked against the path) and a branch given as a query parameter are not keys
        values = {
            k: v for k, v in body.items() if k != "id" and not (k == "branch" and "branch" in request.query)
        }
        branch = request.query.get("branch")
    if branch in (None, "", MAIN):
        branch = None
    elif not isinstance(branch, str):
        raise InvalidInput(f"branch must be a string, got {branch!r}")
    if not all(isinstance(v, str | None) for v in values.values()):
        raise InvalidInput("metadata must be a map of keys to strings (or null to delete a key)")
    catalog = request.service.catalog
    payload = json.dumps([branch, values], sort_keys=True).encode()
    request_key = keyed(request, tname, "schema-metadata", payload, {"schema-metadata"})
    if request_key.first is not None:  # the metadata as the first commit left it
        version, reader = request_key.first.to_version, Provenance(principal=request.principal)
        if branch is None:
            schema = catalog.reads.open_table(str(tname), version, by=reader).schema
        else:
            schema = catalog.branches.open_branch(str(tname), branch, version, by=reader).schema
        merged, commit_id = schema_metadata_of(schema), request_key.first.commit_id
        return {"metadata": merged, "transaction_id": commit_id} if wrapped else merged
    by, detail = request_key.by, request_key.detail
    if branch is None:
        result, merged = catalog.schemas.update_schema_metadata(str(tname), values, detail=detail, by=by)
    else:
        result, merged = catalog.branch_changes.update_schema_metadata(
            str(tname), branch, values, detail=detail, by=by
        )
    confirm(request, tname, request_key, result.commit_id)
    return {"metadata": merged, "transaction_id": result.commit_id} if wrapped else merged


def list_table_tags(request: RestRequest) -> Any:
    """The registry's tags (what ``lake tag list`` shows), never Lance's tag files: one truth."""
    asked = paging(request.body)
    scoped(request, table=True)
    tname = request.table_name()
    tags = request.service.catalog.tags.tagged_versions(
        str(tname), by=Provenance(principal=request.principal)
    )
    found, token = asked.of(list(tags))
    return {
        # The spec's TagContents, spelled as its model spells it (``manifestSize``).
        "tags": {
            t: TagContents(version=tags[t].version, manifest_size=tags[t].manifest_size or 0).to_dict()
            for t in found
        },
        "page_token": token,
    }


def get_table_tag_version(request: RestRequest) -> Any:
    scoped(request, table=True)
    tag = request.body.get("tag")
    if not isinstance(tag, str) or not tag:
        raise InvalidInput("tag is required")
    return {"version": tagged_version(request, request.table_name(), tag)}


def tagged_version(request: RestRequest, tname: TableName, tag: str) -> int:
    """The version the registry's tag ``tag`` names, or TableTagNotFound."""
    tags = request.service.catalog.tags.list_tags(str(tname), by=Provenance(principal=request.principal))
    if tag not in tags:
        raise tag_not_found(request, tname, tag)
    return tags[tag]


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
    "ListTableTags": list_table_tags,
    "GetTableTagVersion": get_table_tag_version,
}

"""Table indexes over REST, through the catalog's index commits (``catalog/indexes.py``): a
build or a drop is one registry commit under the table's lease, logged ``index create`` /
``index drop`` under the caller's name, exactly as ``lake index create``/``drop``. Listing and
stats read the current version (or the ``version`` asked for) through the catalog's read path.
With a ``branch`` (body member or query parameter; ``main`` is the table's own line) each is the
same on the branch's own line (``catalog/branch_indexes.py``): main never moves.

The catalog builds the scalar kinds (``engine/indexes.KINDS``); a vector index kind is
Unsupported (the catalog does not build vector indexes), an unknown kind InvalidInput. An index
is named ``<column>_idx`` (Lance's own default): a ``name`` other than that is refused. The
spec's full-text options (``with_position``, ``language``, ...) are passed to Lance for an
FTS/INVERTED index and logged; on another kind, or with a value Lance would not take, they are
InvalidInput, as is a vector index parameter. A build or a drop honours an ``Idempotency-Key``
(``rest/idempotency.keyed``): a retry whose first attempt landed answers its commit."""

from __future__ import annotations

from typing import Any

import lake_platform.rest.handlers.branches as branches
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import indexes as engine_indexes
from lake_platform.engine.indexes import IndexInfo
from lake_platform.errors import InvalidInput, TableIndexNotFound, Unsupported
from lake_platform.naming import TableName
from lake_platform.rest.handlers.common import paging, scoped
from lake_platform.rest.idempotency import keyed_body
from lake_platform.rest.request import RestRequest

#: The spec's vector index types: the catalog builds none of them.
VECTOR_KINDS = (
    "IVF_FLAT",
    "IVF_PQ",
    "IVF_SQ",
    "IVF_RQ",
    "IVF_HNSW_FLAT",
    "IVF_HNSW_PQ",
    "IVF_HNSW_SQ",
    "HNSW",
)
#: The spec's vector index parameters: none applies to the indexes the catalog builds.
VECTOR_OPTIONS = (
    "distance_type",
    "num_partitions",
    "num_sub_vectors",
    "num_bits",
    "sample_rate",
    "max_iterations",
    "target_partition_size",
    "m",
    "ef_construction",
)


def _table(request: RestRequest) -> tuple[TableName, str | None]:
    """The table and the branch asked for (None: main)."""
    scoped(request, table=True)
    return request.table_name(), branches.branch_of(request)


def _string(request: RestRequest, member: str) -> str:
    value = request.body.get(member)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{member} is required (a non-empty string)")
    return value


def _options(request: RestRequest) -> dict[str, object]:
    """The spec's full-text index options the body sets (a null is one not set); a vector
    index parameter is refused, the catalog building no vector index."""
    for option in VECTOR_OPTIONS:
        if request.body.get(option) is not None:
            raise InvalidInput(f"{option} applies to vector indexes, which this catalog does not build")
    return {o: request.body[o] for o in engine_indexes.FULL_TEXT_OPTIONS if request.body.get(o) is not None}


def create_index(request: RestRequest) -> Any:
    """CreateTableIndex and CreateTableScalarIndex: one ``index create`` commit, with the
    full-text options the body sets (the catalog refuses one the index type has not, or a
    value Lance would not take, before anything is built)."""
    tname, branch = _table(request)
    column = _string(request, "column")
    kind = _string(request, "index_type")
    if kind.strip().upper() in VECTOR_KINDS:
        raise Unsupported(f"{kind} indexes are not built by this catalog: it builds scalar indexes only")
    name = request.body.get("name")
    if name is not None and name != engine_indexes.index_name(column):
        raise InvalidInput(
            f"the catalog names the index of {column!r} {engine_indexes.index_name(column)!r}: "
            "omit 'name' or use that one"
        )
    options = _options(request)
    request_key = keyed_body(request, tname, "index-create", {"index create"}, branch)
    if request_key.first is not None:  # the key's build landed: its answer, nothing built
        return {"transaction_id": request_key.first.commit_id}
    by, detail, catalog = request_key.by, request_key.detail, request.service.catalog
    if branch is None:
        result = catalog.indexes.create_index(str(tname), column, kind, options=options, detail=detail, by=by)
    else:
        result = catalog.branch_indexes.create_index(
            str(tname), branch, column, kind, options=options, detail=detail, by=by
        )
    return {"transaction_id": result.commit_id}


def _indexes(request: RestRequest, tname: TableName, branch: str | None) -> list[IndexInfo]:
    version = request.body.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise InvalidInput(f"version must be a non-negative integer, got {version!r}")
    by = Provenance(principal=request.principal)
    if branch is not None:
        return request.service.catalog.branch_indexes.list_indexes(str(tname), branch, version or None, by=by)
    snap = request.service.catalog.reads.open_table(str(tname), version or None, by=by)
    return engine_indexes.list_indexes(snap.dataset)


def _lance_type(info: IndexInfo) -> str:
    return engine_indexes.KINDS.get(info.kind, info.kind)


def list_indices(request: RestRequest) -> Any:
    asked = paging(request.body)
    tname, branch = _table(request)
    found = {i.name: i for i in _indexes(request, tname, branch)}
    names, token = asked.of(list(found))
    return {
        "indexes": [
            {
                "index_name": n,
                "index_uuid": found[n].uuid,
                "columns": [found[n].column],
                "status": "SUCCEEDED",  # the catalog registers an index once it is built
                "index_type": _lance_type(found[n]),
                "num_indexed_rows": found[n].rows_indexed,
                "num_unindexed_rows": found[n].rows_unindexed,
                "size_bytes": found[n].size_bytes,
            }
            for n in names
        ],
        "page_token": token,
    }


def describe_index_stats(request: RestRequest) -> Any:
    tname, branch = _table(request)
    name = _string(request, "index_name")
    found = {i.name: i for i in _indexes(request, tname, branch)}
    if name not in found:
        where = str(tname) if branch is None else f"branch {branch} of {tname}"
        raise TableIndexNotFound(f"{where} has no index {name}")
    info = found[name]
    return {
        "index_type": _lance_type(info),
        "num_indexed_rows": info.rows_indexed,
        "num_unindexed_rows": info.rows_unindexed,
        "num_indices": 1,
    }


def drop_index(request: RestRequest) -> Any:
    tname, branch = _table(request)
    name = _string(request, "index_name")
    request_key = keyed_body(request, tname, "index-drop", {"index drop"}, branch)
    if request_key.first is not None:  # the key's drop landed: its answer, not TableIndexNotFound
        return {"transaction_id": request_key.first.commit_id}
    by, detail, catalog = request_key.by, request_key.detail, request.service.catalog
    if branch is None:
        result = catalog.indexes.drop_index(str(tname), name, detail=detail, by=by)
    else:
        result = catalog.branch_indexes.drop_index(str(tname), branch, name, detail=detail, by=by)
    return {"transaction_id": result.commit_id}


HANDLERS = {
    "CreateTableIndex": create_index,
    "CreateTableScalarIndex": create_index,
    "ListTableIndices": list_indices,
    "DescribeTableIndexStats": describe_index_stats,
    "DropTableIndex": drop_index,
}

"""Tag changes over REST: CreateTableTag, UpdateTableTag (a move) and DeleteTableTag, each one
registry commit under the table's lease (``catalog/tags.py``, as ``lake tag create``/``delete``),
logged ``tag`` / ``untag``. Each honours an ``Idempotency-Key`` (``rest/idempotency.keyed``): a
retry whose first attempt landed answers as the first did (finishing Lance's copy of the tag if
the first call failed after its commit) instead of TableTagAlreadyExists or TableTagNotFound;
the key with another tag or version is 422. Tags name main's versions: a ``branch`` is
Unsupported."""

from __future__ import annotations

from typing import Any

import lake_platform.rest.handlers.branches as branches
from lake_platform.errors import InvalidInput, Unsupported
from lake_platform.naming import TableName
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.idempotency import Keyed, keyed_body
from lake_platform.rest.request import RestRequest


def _tag_change(request: RestRequest, kind: str, operation: str) -> tuple[TableName, str, Keyed]:
    """The table, the tag and the change under the request's key (``kind`` of request, logged
    as ``operation``)."""
    scoped(request, table=True)
    tname = request.table_name()
    if branches.branch_of(request) is not None:
        # The spec lets a tag name a branch's version; the registry's tags name main's. Read
        # as main's, the branch's version number would tag other data.
        raise Unsupported("tags name versions of main; a branch's versions cannot be tagged")
    tag = request.body.get("tag")
    if not isinstance(tag, str) or not tag:
        raise InvalidInput("tag is required (a non-empty string)")
    return tname, tag, keyed_body(request, tname, kind, {operation})


def _tag(request: RestRequest, *, replace: bool) -> Any:
    tname, tag, request_key = _tag_change(request, "tag-update" if replace else "tag-create", "tag")
    request.service.catalog.tags.create_tag(
        str(tname),
        tag,
        request.body.get("version"),
        replace=replace,
        detail=request_key.detail,
        by=request_key.by,
    )
    return {}


def create_table_tag(request: RestRequest) -> Any:
    return _tag(request, replace=False)


def update_table_tag(request: RestRequest) -> Any:
    return _tag(request, replace=True)


def delete_table_tag(request: RestRequest) -> Any:
    tname, tag, request_key = _tag_change(request, "tag-delete", "untag")
    request.service.catalog.tags.delete_tag(str(tname), tag, detail=request_key.detail, by=request_key.by)
    return {}


HANDLERS = {
    "CreateTableTag": create_table_tag,
    "UpdateTableTag": update_table_tag,
    "DeleteTableTag": delete_table_tag,
}

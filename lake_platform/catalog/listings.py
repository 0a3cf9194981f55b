"""Namespace listings: the child names under a container, and one page of a listing as the
Lance Namespace spec pages (the in-process LakeNamespace's; here, where REST may share it, as
catalog/ may not import rest/)."""

from __future__ import annotations

from typing import Any

from lake_platform.errors import InvalidInput
from lake_platform.naming import NamespaceName
from lake_platform.registry import keys
from lake_platform.registry.records import NamespaceRecord, TableRecord, WarehouseRecord, decode
from lake_platform.registry.store import MetaStore


def child_names(store: MetaStore, ident: list[str]) -> list[str]:
    """The last parts of the warehouses of project ``[p]`` or the namespaces directly under
    ``[p, w, ...]`` (the container is checked by the caller)."""
    if len(ident) == 1:
        return [
            decode(WarehouseRecord, i.value).name.split(".")[-1]
            for i in store.scan_prefix(keys.warehouses(ident[0]))
        ]
    children = [
        decode(NamespaceRecord, i.value).name
        for i in store.scan_prefix(keys.namespaces(ident[0], ident[1], ident[2:]))
    ]
    return [c.split(".")[-1] for c in children if c.count(".") == len(ident)]


def table_names(store: MetaStore, nname: NamespaceName, *, declared: bool) -> list[str]:
    """The tables of ``nname`` with a version (and the declared ones, without, when asked)."""
    records = (decode(TableRecord, i.value) for i in store.scan_prefix(keys.tables_in_namespace(nname)))
    return [r.name.split(".")[-1] for r in records if r.current_version > 0 or declared]


def page_of(names: list[str], limit: Any, page_token: Any) -> tuple[list[str], str | None]:
    """Sorted ``names`` after ``page_token`` (the last name of the previous page), at most
    ``limit`` of them, and the next page's token (None on the last page). A limit below 1 or
    no integer, or a token that is no string, is InvalidInput naming it."""
    names = sorted(names)
    if page_token is not None and not isinstance(page_token, str):
        raise InvalidInput(f"page_token {page_token!r} is not one this server handed out (a string)")
    if page_token:
        names = [n for n in names if n > page_token]
    if limit is None:
        return names, None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidInput(f"limit must be a positive integer, got {limit!r}")
    if len(names) > limit:
        return names[:limit], names[limit - 1]
    return names, None

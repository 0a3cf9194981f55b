"""One REST call after identity and shape checks: what a handler gets, and what it answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.principals import Principal
from lake_platform.errors import InvalidInput
from lake_platform.naming import NamespaceName, TableName

if TYPE_CHECKING:
    from lake_platform.rest.server import RestService


@dataclass
class RestRequest:
    service: RestService
    operation: str
    principal: Principal
    id: list[str] | None  # None: the route has no {id}
    body: dict[str, Any]  # the JSON body (with the id and the spec's query parameters merged in)
    query: Mapping[str, str] = field(default_factory=dict)
    raw: bytes = b""  # the Arrow IPC body of create/insert/merge_insert
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ids(self) -> list[str]:
        return list(self.id or [])

    def table_name(self) -> TableName:
        ident = self.ids
        if len(ident) < 4:
            raise InvalidInput(
                f"a table id has at least 4 segments (project, warehouse, namespace, table); got {len(ident)}"
            )
        return TableName.from_parts(ident)

    def namespace_name(self) -> NamespaceName:
        ident = self.ids
        if len(ident) < 3:
            raise InvalidInput("a namespace id has at least 3 segments (project, warehouse, namespace)")
        return NamespaceName.parse(".".join(ident))


@dataclass
class Reply:
    """A non-JSON answer: ``content`` goes out as is with ``media_type``."""

    content: bytes | str
    media_type: str
    status: int = 200

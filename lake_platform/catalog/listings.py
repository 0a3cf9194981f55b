"""Namespace listings: the warehouses of a project, and one page of a listing as the
Lance Namespace spec pages (the in-process LakeNamespace's; here, where REST may share it, as
catalog/ may not import rest/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lake_platform.errors import InvalidInput
from lake_platform.registry import keys
from lake_platform.registry.records import WarehouseRecord, decode
from lake_platform.registry.store import MetaStore


def warehouse_names(store: MetaStore, project: str) -> list[str]:
    """The last parts of the warehouses of ``project`` (checked by the caller). Namespaces and
    tables are listed a page at a time (``Reads.namespaces_in``, ``Reads.tables_in``)."""
    return [
        decode(WarehouseRecord, i.value).name.split(".")[-1]
        for i in store.scan_prefix(keys.warehouses(project))
    ]


@dataclass(frozen=True)
class Paging:
    """One page of a listing as a caller asked for it: at most ``limit`` names (all without
    one) after ``after`` (the previous page's token: its last name). Made by :meth:`asked`,
    before the listing (or the container it lists) is read: a bad request costs no read."""

    limit: int | None
    after: str | None

    @classmethod
    def asked(cls, limit: Any, page_token: Any) -> Paging:
        """A limit below 1 or no integer, or a token that is no string, is InvalidInput naming it."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise InvalidInput(f"limit must be a positive integer, got {limit!r:.40}")
        if page_token is not None and not isinstance(page_token, str):
            raise InvalidInput(f"page_token {page_token!r:.40} is not one this server handed out (a string)")
        return cls(limit, page_token or None)

    @property
    def read_limit(self) -> int | None:
        """How many names to read after ``after``: one more than the page (is there a next one?)."""
        return None if self.limit is None else self.limit + 1

    def of(self, names: list[str]) -> tuple[list[str], str | None]:
        """This page of ``names`` (sorted) and the next page's token (None on the last page)."""
        names = sorted(names)
        if self.after:
            names = [n for n in names if n > self.after]
        if self.limit is not None and len(names) > self.limit:
            return names[: self.limit], names[self.limit - 1]
        return names, None

"""A session's default catalog (warehouse) and schema (namespace), carried in the SQL text.

A Flight SQL session may set a default catalog and schema (SetSessionOptions), so that
``orders`` and ``raw.orders`` resolve as ``w.raw.orders`` does. The defaults travel *with the
statement*: the endpoint prefixes the SQL with a directive comment, ``/*lake:defaults
catalog=w schema=raw*/``, before it plans it or seals it into a prepared handle or a ticket. So
every plan cache key, handle and ticket holds them, and any replica plans the statement exactly
as the one that planned it, from the ticket alone (no session state on any replica). The
directive is a comment: anything else reading the text ignores it, and a user writing it by hand
only names defaults inside their own project, as SetSessionOptions would.

Planning applies the defaults with DataFusion's ``SET datafusion.catalog.default_catalog`` (and
``default_schema``) on the pooled context, and puts the context's neutral values back before it
returns to the pool (:func:`applied`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lake_platform.errors import LakeError, TableNotFound

#: DataFusion's own defaults (the context's config): what a context holds outside a planning.
NEUTRAL_CATALOG = "datafusion"
NEUTRAL_SCHEMA = "public"
_SEGMENT = r"[a-z_][a-z0-9_]{0,62}"
_NOT_FOUND = re.compile(r"table (\S+) not found")
_DIRECTIVE = re.compile(
    rf"/\*lake:defaults(?: catalog=({_SEGMENT}))?(?: schema=({_SEGMENT}(?:\.{_SEGMENT})*))?\*/ "
)


@dataclass(frozen=True)
class NameDefaults:
    """The warehouse and namespace path (levels joined by ".") that shorter names resolve in."""

    catalog: str | None = None
    schema: str | None = None

    def __bool__(self) -> bool:
        return self.catalog is not None or self.schema is not None

    def written(self, completed: str) -> str:
        """A name DataFusion completed with its neutral defaults, as the user wrote it:
        ``datafusion.raw.orders`` -> ``raw.orders``, and with a catalog but no schema set,
        ``w.public.orders`` -> ``orders``."""
        parts = completed.split(".")
        if self.catalog is None and parts[0] == NEUTRAL_CATALOG:
            return ".".join(parts[1:])
        if self.schema is None and len(parts) == 3 and parts[:2] == [self.catalog, NEUTRAL_SCHEMA]:
            return parts[2]
        return completed


def with_defaults(sql: str, defaults: NameDefaults) -> str:
    """``sql`` with its session defaults in front (unchanged without defaults, or when the text
    already carries a directive: a prepared statement keeps the defaults it was prepared with)."""
    if not defaults or _DIRECTIVE.match(sql):
        return sql
    words = "".join(
        f" {k}={v}" for k, v in (("catalog", defaults.catalog), ("schema", defaults.schema)) if v is not None
    )
    return f"/*lake:defaults{words}*/ {sql}"


def defaults_of(sql: str) -> NameDefaults:
    """The defaults a statement's text carries (none: no directive first)."""
    m = _DIRECTIVE.match(sql)
    return NameDefaults(m.group(1), m.group(2)) if m else NameDefaults()


@contextmanager
def applied(ctx: Any, defaults: NameDefaults) -> Iterator[None]:
    """Plan in ``ctx`` (a DataFusion ``SessionContext``) with ``defaults``; the neutral values
    are back when the block ends. Nothing is set without defaults (the common case costs
    nothing; each SET costs ~0.03 ms)."""
    if not defaults:
        yield
        return
    _set(ctx, defaults.catalog or NEUTRAL_CATALOG, defaults.schema or NEUTRAL_SCHEMA)
    try:
        yield
    finally:
        _set(ctx, NEUTRAL_CATALOG, NEUTRAL_SCHEMA)


def _set(ctx: Any, catalog: str, schema: str) -> None:
    # Both values match _DIRECTIVE's segments (or are DataFusion's own names): no quoting needed.
    ctx.sql(f"SET datafusion.catalog.default_catalog = '{catalog}'")
    ctx.sql(f"SET datafusion.catalog.default_schema = '{schema}'")


def implicit(error: str, named: NameDefaults, warehouses: list[str]) -> NameDefaults:
    """The default catalog a statement without defaults gets after DataFusion failed to find a
    name it completed with its own (``datafusion.ns.t``): the project's warehouse when it has
    exactly one, so ``ns.t`` reads as ``w.ns.t`` in tools that qualify names only by schema.
    The planner plans the text again with that directive, so tickets carry it (none: no retry)."""
    if named or len(warehouses) != 1 or f"'{NEUTRAL_CATALOG}." not in error:
        return NameDefaults()
    if f"'{NEUTRAL_CATALOG}.information_schema." in error:  # DataFusion's own: stays refused
        return NameDefaults()
    return NameDefaults(catalog=warehouses[0])


def not_found(exc: LakeError, defaults: NameDefaults) -> LakeError:
    """A missing-table error about a name DataFusion completed with its neutral defaults,
    reworded to name the table as the user wrote it (never ``datafusion.raw.orders``)."""
    m = _NOT_FOUND.fullmatch(exc.message) if isinstance(exc, TableNotFound) else None
    if m is None or defaults.written(m.group(1)) == m.group(1):
        return exc
    hint = (
        "name it warehouse.namespace.table, or set the session's default catalog (SetSessionOptions "
        "'catalog'; ADBC: adbc_current_catalog)"
        if defaults.catalog is None
        else "name it namespace.table or warehouse.namespace.table, or set the session's default schema "
        "(SetSessionOptions 'schema'; ADBC: adbc_current_db_schema)"
    )
    return TableNotFound(f"table {defaults.written(m.group(1))} not found: {hint}")


__all__ = [
    "NEUTRAL_CATALOG",
    "NEUTRAL_SCHEMA",
    "NameDefaults",
    "applied",
    "defaults_of",
    "not_found",
    "with_defaults",
]

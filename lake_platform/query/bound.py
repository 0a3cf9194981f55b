"""A prepared key lookup bound to new values, answered from the plan of an earlier binding.

A service runs one prepared statement with a new key each time (``SELECT a, b FROM t WHERE
id = ?``: DoPut binds, GetFlightInfo plans, DoGet runs). Its SQL text does not change, so the
first binding is planned as any other; when that plan is a key lookup Lance answers from its
index (``lookup``) and every term's value is exactly one bound parameter's, each parameter
one term's (``Lookup.parameters_of``), it is kept as a :class:`BoundLookup` for this
principal, text, the parameters' types and that very project view (``plans.bound_key``). A
later binding of the same types over the same view gets a plan of the kept one's snapshots,
schema and structure facts with its own values (``Lookup.with_parameters``) and its own
parameters (part of its ticket and its result's key). DataFusion plans it only if something
asks for its frame; a lookup's way never does. A value the lookup cannot take (NULL, an
integer beyond Int64 or Int64's least value, a string with a quote) is planned.

A lookup's plan holds only columns and ``column = literal`` conjuncts over one scan, and
DataFusion's unoptimized plan keeps a parameter inside an expression (``id = ? % 1000``) as
that expression, so a term's value is a parameter's only when the text compares the column to
the parameter itself. Why: the bound way planned every run (0.16 ms in process, more in a
server) and worked the lookup out again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from lake_platform.query.planner import PlannedQuery


def values_of(params: pa.RecordBatch) -> list[Any]:
    """The values of a one-row parameter batch, in parameter order."""
    return [column[0].as_py() for column in params.columns]


class _PlannedOnUse:
    """A bound plan's DataFusion frame, planned from its own text and values the first time
    anything asks for it: any use gets the real frame of exactly that binding over the same
    view (the same snapshots)."""

    def __init__(self, plan: Callable[[], Any]) -> None:
        self._plan = plan
        self._df: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._df is None:
            self._df = self._plan()
        return getattr(self._df, name)


@dataclass(frozen=True, eq=False)
class BoundLookup:
    """A binding's key lookup plan kept for other values of the same types."""

    template: PlannedQuery
    order: tuple[int, ...]  # which parameter each of the lookup's terms takes its value from

    @classmethod
    def of(cls, planned: PlannedQuery, params: pa.RecordBatch) -> BoundLookup | None:
        """``planned`` (planned with ``params`` bound) kept for other values, when it is a
        deterministic key lookup whose every term takes one parameter's value; else None."""
        if params.num_rows != 1 or not planned.deterministic or planned.lookup is None:
            return None
        order = planned.lookup.parameters_of(values_of(params))
        return None if order is None else cls(planned, order)

    def bind(self, params: pa.RecordBatch, plan_frame: Callable[[], Any]) -> PlannedQuery | None:
        """The plan of the kept text with ``params`` bound (a binding of the kept types); None
        when the lookup cannot take these values (then the binding is planned).
        ``plan_frame``: plans the binding's DataFusion frame, if anything asks for it."""
        if params.num_rows != 1:
            return None
        assert self.template.lookup is not None  # kept only as a lookup (``of``)
        lookup = self.template.lookup.with_parameters(values_of(params), self.order)
        if lookup is None:
            return None
        return replace(self.template, df=_PlannedOnUse(plan_frame), params=params, lookup=lookup)


__all__ = ["BoundLookup", "values_of"]

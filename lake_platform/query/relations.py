"""A bound on the relations one query combines, checked before DataFusion optimizes its plan.

DataFusion's optimizer cannot be interrupted (the time limit is checked only between the steps
of planning), and its time grows with the cube of a query's joins and faster than the square of
a union's branches. Measured on DataFusion 54.1, optimizing and physical planning, one core:

- a chain of keyed joins: 64 relations 0.35 s, 128 1.8 s, 192 7.3 s, 256 12 s;
- comma joins (cross joins): 128 0.25 s, 400 9.5 s; 2,000 held a core for over seven minutes
  and then the endpoint died;
- a ``UNION ALL`` chain: 250 branches 0.22 s, 500 0.75 s, 1,000 3.8 s, 2,000 17 s.

Building the unoptimized plan is cheap (2,000 relations: 0.8 s, most of it parsing), so the
relations are counted there: the leaves of the logical plan (each table, table function,
``VALUES`` list, ``SELECT`` without ``FROM``, each branch of a set operation and each
recursive term's work table). Past ``max_relations`` the query is refused (INVALID_ARGUMENT,
RelationsTooMany) before the optimizer sees it. Subqueries in expressions (``x IN (SELECT ...)``)
are opaque to Python and not counted: 128 correlated scalar subqueries plan in about a second.
"""

from __future__ import annotations

from typing import Any

from lake_platform.query.errors import RelationsTooMany
from lake_platform.query.limits import QueryLimits


def count_relations(root: Any) -> int:
    """The leaves of the logical plan ``root`` (a DataFusion ``LogicalPlan``)."""
    stack, leaves = [root], 0
    while stack:  # not recursive: a plan may be a thousand levels deep
        inputs = stack.pop().inputs()
        if inputs:
            stack.extend(inputs)
        else:
            leaves += 1
    return leaves


def check_relations(df: Any, limits: QueryLimits) -> None:
    """RelationsTooMany if the unoptimized plan of ``df`` combines more than ``max_relations``
    relations (0: no limit)."""
    bound = limits.max_relations
    if not bound:
        return
    relations = count_relations(df.logical_plan())
    if relations > bound:
        raise RelationsTooMany(
            f"the query combines {relations} relations (tables, subqueries, VALUES lists, table "
            f"functions, branches of a UNION), more than {limits.named('max_relations')}: DataFusion "
            "takes minutes to plan that many and cannot be stopped while it does; split the query"
        )


__all__ = ["check_relations", "count_relations"]

"""Whether a query gives the same rows every time it runs over the same snapshots.

DataFusion fixes its clock functions (``now()``, ``current_date``, ...) when a plan is made, and
draws ``random()`` and ``uuid()`` anew on every run; every other built-in is immutable. So a plan
that calls one of them must not be kept for a later request (every re-run would get the first
run's time: a dashboard's ``WHERE ts > now() - INTERVAL '1 hour'`` would never move on), and its
result must never be reused (``results``). The names are DataFusion's own
(``information_schema.routines`` where ``is_deterministic`` is false, aliases included), so a
function a DataFusion upgrade adds is covered without a change here.

They are found in the SQL text: a call spells its function's name (this server has no views or
macros; a function the deployment registers is taken as volatile, ``names_any``), so a query in
which none of the names appears as a word is deterministic. A name inside a string or a quoted
column counts as well; such a query only loses its kept plan and its result cache entry.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from datafusion import SessionConfig, SessionContext


@functools.cache
def nondeterministic_functions() -> frozenset[str]:
    """The built-in functions (and aliases) of the pinned DataFusion that are not immutable."""
    ctx = SessionContext(SessionConfig().with_information_schema(True))
    table = ctx.sql(
        "SELECT DISTINCT routine_name FROM information_schema.routines WHERE NOT is_deterministic"
    ).to_arrow_table()
    return frozenset(name.lower() for name in table.column(0).to_pylist())


@functools.cache
def _calls() -> re.Pattern[str]:
    names = "|".join(sorted(map(re.escape, nondeterministic_functions())))
    return re.compile(rf"(?<![\w$])(?:{names})(?![\w$])", re.IGNORECASE)


def is_deterministic(sql: str) -> bool:
    """Whether ``sql`` calls no function whose result depends on when or how often it runs."""
    return _calls().search(sql) is None


def names_any(sql: str, names: Iterable[str]) -> bool:
    """Whether ``sql`` spells any of ``names`` as a word (as :func:`is_deterministic` finds a
    call): functions the deployment registered, all taken as volatile."""
    words = "|".join(sorted(map(re.escape, names)))
    return bool(words) and re.search(rf"(?<![\w$])(?:{words})(?![\w$])", sql, re.IGNORECASE) is not None


__all__ = ["is_deterministic", "names_any", "nondeterministic_functions"]

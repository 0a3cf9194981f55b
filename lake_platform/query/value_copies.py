"""How many copies of the columns it reads one value of an expression may hold: growth driven by
data, which ``value_compose``'s bounds in bytes count as nothing (a column's size is not known
before the query runs).

Nested ``encode(..., 'hex')`` doubles a value a level (exponential in a few hundred bytes of SQL),
a CTE chain of ``v || v`` the same, ``regexp_match`` holds the string once per group,
``regexp_replace``'s group references insert it again, ``replace`` of the empty pattern inserts
the replacement between every two bytes, ``array_to_string(string_to_array(s, NULL), sep)`` adds
the separator after each character. None of these names a sized call or a long literal. So each
value's bound carries, for each column it reads (by name), how many copies of that column's
value it may hold, and an expression that may hold more than :data:`MAX_COPIES` copies of any
column is refused at planning (ValueTooLarge), as are the columns one projection or aggregate
builds together past it (those that grow: more than one copy). The factor is of data the query
already holds, so it bounds the memory a query takes in proportion to what it reads:

- a column: one copy of itself; a literal or a sized call: none (its bytes are bounded);
- concatenation and the builders of lists, structs and maps: the sum (a ``concat_ws``
  separator once between each two); anything else (``upper``, ``CASE``, ``coalesce``, ``max``):
  the largest, column by column; comparisons, matches and measures (``SMALL``): none;
- ``replace``: ``s`` times ``1 + (len(to) - len(from)) / len(from)`` for a literal ``from``, times
  ``1 + len(to)`` otherwise (the empty pattern matches at every position);
- ``regexp_replace``: ``s`` times ``1 + len(to) + refs`` with the ``g`` flag, ``1 + refs`` without
  (``refs``: group references, each at most what its match took of ``s``);
- ``repeat``: ``s`` times a literal count; by a column's count, one copy of :data:`REPEATED` (a
  value ``capped.repeat`` keeps within the cap for a batch, as a column's is data already read);
- ``encode``: 2; ``to_char``: 16 a byte of its format; ``regexp_match``: one a group;
- ``array_to_string``: the list's copies times 3 (text of a number) plus the separator once an
  element (at most one a byte); ``array_replace*``: the replacement once an element;
- a column's value inserted at each match of another's (``replace(s, 'a', s)``): refused, the
  square of a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lake_platform.query.value_compose import (
    CONCATENATIONS,
    ELEMENT_REPLACEMENTS,
    ENCODED_PER_BYTE,
    ENCODES,
    FORMAT_PER_BYTE,
    FORMATS,
    GATHERS,
    JOINS,
    MATCHES,
    REPLACEMENTS,
    SMALL,
    TEXT_PER_BYTE,
    Part,
    Unbounded,
    groups,
    is_global,
    references,
)

#: The most copies of a column's value one value may hold (and the columns of one projection or
#: aggregate that grow, together).
MAX_COPIES = 16

#: What the copies of a ``repeat`` by a column's count are counted as: a value like a column's,
#: whose batch ``capped.repeat`` keeps within the cap (34 of them in one ``concat`` built 2.2 GB).
REPEATED = "repeat()"

Copies = dict[str, float]


def copies_of(function: str, parts: list[Part]) -> Copies:
    """The copies of each column one value of ``function`` over ``parts`` may hold (Unbounded:
    as many as a column's value is long)."""
    if function in SMALL or function in GATHERS:
        return {}
    if function in CONCATENATIONS:
        return _sum(p.copies for p in parts)
    if function == "concat_ws" and parts:
        rest = parts[1:]
        return _sum([*(p.copies for p in rest), _scaled(parts[0].copies, max(len(rest) - 1, 0))])
    if function in REPLACEMENTS and len(parts) >= 3:
        return _replaced(function, parts)
    if function in JOINS and len(parts) >= 2:
        return _each(function, parts[0], parts[1:3], TEXT_PER_BYTE)
    if function in ELEMENT_REPLACEMENTS and len(parts) >= 3:
        return _each(function, parts[0], parts[2:3], 1)
    if function == "repeat" and len(parts) >= 2:
        count = parts[1].integer
        return {REPEATED: 1.0} if count is None else _scaled(parts[0].copies, max(count, 0))
    if function in ENCODES and parts:
        return _scaled(parts[0].copies, ENCODED_PER_BYTE)
    if function in FORMATS and len(parts) >= 2:
        return _scaled(parts[1].copies, FORMAT_PER_BYTE)
    if function in MATCHES and len(parts) >= 2:
        if not parts[0].copies and not parts[1].copies:
            return {}
        return _sum([_scaled(parts[0].copies, groups(function, parts)), parts[1].copies])
    return _most(p.copies for p in parts)


def largest(copies: Mapping[str, float]) -> tuple[str, float]:
    """The column with the most copies, and how many ("", 0: none)."""
    return max(copies.items(), key=lambda item: item[1], default=("", 0.0))


def together(parts: Iterable[Part]) -> Copies:
    """What the columns of one node that grow (more than one copy of a column) hold together."""
    return _sum(p.copies for p in parts if largest(p.copies)[1] > 1)


def _replaced(function: str, parts: list[Part]) -> Copies:
    string, pattern, to = parts[:3]
    if string.copies and to.copies:
        raise Unbounded(
            f"{function} of a column's value by a column's value has no bound: each match may insert "
            "all of it (replace by a literal)"
        )
    string_bytes, to_bytes = _fixed(string), _fixed(to)
    if function == "replace":
        step = pattern.text or 0  # a literal pattern's length (0: empty, or a column's)
        if step:
            grow = 1 + max(0, to_bytes - step) / step
            return _sum([_scaled(string.copies, grow), _scaled(to.copies, string_bytes / step)])
        return _sum([_scaled(string.copies, 1 + to_bytes), _scaled(to.copies, string_bytes + 1)])
    again = references(function, parts)
    if not is_global(parts):
        return _sum([_scaled(string.copies, 1 + again), _scaled(to.copies, 1 + string_bytes)])
    return _sum([_scaled(string.copies, 1 + to_bytes + again), _scaled(to.copies, 2 * string_bytes + 1)])


def _each(function: str, items: Part, added: list[Part], per_byte: int) -> Copies:
    """A list's copies times ``per_byte`` and ``added`` once an element (one a byte at most)."""
    if items.copies and any(p.copies for p in added):
        raise Unbounded(f"{function} of a column's list with a column's separator or element has no bound")
    each = sum(_fixed(p) for p in added)
    return _sum([_scaled(items.copies, per_byte + each), *(_scaled(p.copies, _fixed(items)) for p in added)])


def _fixed(part: Part) -> int:
    """A part's bytes besides its columns' (a literal's, a sized call's)."""
    return part.built if part.built is not None else part.text or 0


def _sum(all_copies: Iterable[Mapping[str, float]]) -> Copies:
    total: Copies = {}
    for copies in all_copies:
        for name, factor in copies.items():
            total[name] = total.get(name, 0.0) + factor
    return total


def _most(all_copies: Iterable[Mapping[str, float]]) -> Copies:
    most: Copies = {}
    for copies in all_copies:
        for name, factor in copies.items():
            most[name] = max(most.get(name, 0.0), factor)
    return most


def _scaled(copies: Mapping[str, float], factor: float) -> Copies:
    return {name: value * factor for name, value in copies.items() if value * factor > 0}


__all__ = ["MAX_COPIES", "REPEATED", "copies_of", "largest", "together"]

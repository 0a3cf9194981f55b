"""What an expression over the calls ``value_bounds`` checks may build: bounds composed bottom-up.

Checking each sized call on its own let compositions escape the cap: ``replace(lpad(tag, 512,
'x'), 'x', lpad('y', 512, 'y'))`` passed (each ``lpad`` fits) and built about 800 MB on 2,000 rows
(8.6 GB for a batch of 32,768). So a call whose argument is built by a checked call gets a bound
from its arguments' bounds, checked against the cap like the call itself:

- concatenation (``concat``, ``||``, ``array_concat``, ``array_append``, ...) and the builders
  of lists, structs and maps (``make_array``, ``named_struct``, ``map``, ``arrays_zip``,
  ``array_union``...), which hold every argument: the sum; a ``concat_ws`` separator once between
  each two arguments;
- ``array_to_string``: the list's elements as text (at most :data:`TEXT_PER_BYTE` bytes per
  byte of the list: an Int64's 20 digits) and the separator, or NULL's text, once per element;
- ``array_replace``/``array_replace_n``/``array_replace_all``: the list and the replacement
  once per element (a list's bound counts at least a byte an element, unless known);
- ``replace``/``regexp_replace``: ``len(s) + (len(s) + 1) * len(to)`` (a pattern that can match
  the empty string inserts ``to`` at every position), less when ``from`` is a literal of known
  length; a ``regexp_replace`` group reference (``$1``, ``\\1``) counts as ``s`` once more over all
  matches (it inserts what its match took);
- ``repeat``: the string's bound times the count (``capped.repeat`` checks a repeat of a column
  itself, at execution);
- ``string_agg``/``array_agg`` of a built value: refused (one value of a whole group);
- anything else (``upper``, ``CASE``, ``coalesce``, ``length``, a comparison): the largest of its
  built arguments, as it builds at most one of them (or much less).

A text literal is a value of its length (copied to every row where a row holds it), but a
comparison, match or measure of values (``SMALL``: ``=``, ``LIKE``, ``IN``, ``regexp_like``,
``length``...) builds nothing of them; ``string_agg`` of literals and columns is a group's data
(DataFusion's pool holds it). ``regexp_replace`` without the ``g`` flag replaces one match.

- ``encode``: twice its argument; ``to_char``: 16 bytes a byte of its format; ``regexp_match``:
  the string once a group of its (literal) pattern.

A column is data already read (its size is not known at planning): it counts nothing in these
bytes, and a column on the other side of a ``replace`` of a sized call's value is refused; what a
value may hold of columns is counted in copies of them (``value_copies``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Functions whose value is the concatenation of their arguments.
CONCATENATIONS = frozenset(
    {
        "||",
        "concat",
        "array_concat",
        "array_cat",
        "list_concat",
        "list_cat",
        "array_append",
        "array_push_back",
        "list_append",
        "list_push_back",
        "array_prepend",
        "array_push_front",
        "list_prepend",
        "list_push_front",
        "overlay",
        # builders holding each of their arguments
        "make_array",
        "make_list",
        "struct",
        "named_struct",
        "row",
        "map",
        "arrays_zip",
        "list_zip",
        "array_union",
        "list_union",
    }
)
#: Functions that join a list's elements into text with a separator between each two.
JOINS = frozenset({"array_to_string", "list_to_string", "array_join", "list_join"})
#: Functions that replace a list's matching elements with their third argument.
ELEMENT_REPLACEMENTS = frozenset(
    {"array_replace", "array_replace_n", "array_replace_all"}
    | {"list_replace", "list_replace_n", "list_replace_all"}
)
#: The most bytes of text one byte of a list element is written as (an Int64's 8 bytes: 20 digits).
TEXT_PER_BYTE = 3
#: Functions that replace each match in their first argument with their third.
REPLACEMENTS = frozenset({"replace", "regexp_replace"})
#: Aggregates that build one value of a whole group's values.
GATHERS = frozenset({"string_agg", "array_agg", "listagg"})
#: Functions that write their first argument in another encoding, and how many bytes one byte
#: may become (hex: 2; base64: 4/3 and padding, counted as 2).
ENCODES = frozenset({"encode"})
ENCODED_PER_BYTE = 2
#: Functions that format a date or time by a format string (their second argument), and how
#: many bytes of text one byte of it may become (chrono's ``%c`` writes 24 of 2).
FORMATS = frozenset({"to_char", "date_format"})
FORMAT_PER_BYTE = 16
#: Functions that answer a list of what each group of a regular expression (their second
#: argument) matched: each group at most the string again.
MATCHES = frozenset({"regexp_match"})
#: Expression kinds whose value is a boolean or a number, whatever their operands hold.
SMALL_KINDS = frozenset(
    {"Like", "SimilarTo", "RLike", "InList", "Between", "Not", "Negative", "IsNull", "IsNotNull"}
    | {"IsTrue", "IsFalse", "IsUnknown", "IsNotTrue", "IsNotFalse", "IsNotUnknown"}
)
#: Functions and operators whose value is a boolean, a number or a fixed-size digest: a literal or
#: built value they compare, match or measure is not copied into their result. (Every operator but
#: ``||``: comparisons, logic, arithmetic, regular expression matches.)
SMALL = SMALL_KINDS | frozenset(
    {"character_length", "char_length", "length", "octet_length", "bit_length", "ascii"}
    | {"strpos", "instr", "position", "starts_with", "ends_with", "find_in_set", "levenshtein"}
    | {"regexp_like", "regexp_count", "regexp_instr", "md5", "sha224", "sha256", "sha384", "sha512"}
    | {"digest", "array_length", "cardinality", "array_has", "array_has_all", "array_has_any"}
    | {"array_position", "array_ndims", "=", "!=", "<", "<=", ">", ">=", "and", "or", "+", "-", "*"}
    | {"/", "%", "&", "|", "#", "<<", ">>", "~", "~*", "!~", "!~*", "~~", "~~*", "!~~", "!~~*"}
    | {"is distinct from", "is not distinct from", "@>", "<@"}
)


@dataclass(frozen=True)
class Part:
    """One argument: the bound of what a checked call built in it (None: nothing built), its
    bytes when it is a text literal, and the sized call it came from (for messages)."""

    built: int | None = None
    text: int | None = None
    source: str = ""
    literal: bool = False
    integer: int | None = None
    elements: int | None = None  # a list built by a checked call: how many elements at most
    references: int = 0  # ``$``/``\\`` in a text literal: a regular expression's group references
    flags: str | None = None  # a short text literal's value (``regexp_replace``'s flags)
    groups: int | None = None  # ``(`` in a text literal: a regular expression's groups at most
    #: copies of each column (by name) one value may hold (``value_copies``)
    copies: Mapping[str, float] = field(default_factory=dict)


class Unbounded(Exception):
    """A composition whose size cannot be bounded at planning (message: why)."""


def compose(function: str, parts: list[Part]) -> tuple[int, str] | None:
    """The most bytes one value of ``function`` over ``parts`` may take and the calls that built
    it, when an argument was built by a checked call (None: nothing built in it)."""
    built = [p for p in parts if p.built is not None]
    sources = ", ".join(dict.fromkeys(p.source for p in built if p.source))  # "": literals only
    if function in SMALL:
        return None
    if function == "repeat":
        return _repeat(parts, sources)
    if not built:
        return None
    sized = any(p.source for p in built)  # built by a sized call, not only literals
    if function in GATHERS:
        if not sized:
            return None  # ``string_agg(s || ',', '')``: a group's data, held in the memory pool
        raise Unbounded(f"{function} of values built by {sources} has no bound: one value of a whole group")
    if function == "concat_ws":
        separator, rest = _size(parts[0]), parts[1:]
        return sum(_size(p) for p in rest) + separator * max(len(rest) - 1, 0), sources
    if function in CONCATENATIONS:
        return sum(_size(p) for p in parts), sources
    if function in REPLACEMENTS and len(parts) >= 3:
        return _replaced(function, parts, sized), sources
    if function in JOINS and len(parts) >= 2:
        each = sum(_size(p) for p in parts[1:3])
        return _size(parts[0]) * TEXT_PER_BYTE + _elements(parts[0]) * each, sources
    if function in ELEMENT_REPLACEMENTS and len(parts) >= 3:
        return _size(parts[0]) + _elements(parts[0]) * _size(parts[2]), sources
    if function in ENCODES:
        return _size(parts[0]) * ENCODED_PER_BYTE, sources
    if function in FORMATS and len(parts) >= 2:
        return _size(parts[1]) * FORMAT_PER_BYTE, sources
    if function in MATCHES and len(parts) >= 2:
        return _size(parts[0]) * groups(function, parts), sources
    return max(p.built for p in built if p.built is not None), sources


def _size(part: Part) -> int:
    """A part's bytes in a sum: a column's are data already read (counted nowhere else either)."""
    if part.built is not None:
        return part.built
    return part.text or 0


def _elements(part: Part) -> int:
    """At most how many elements a list has: as known, else one a byte of its bound."""
    return part.elements if part.elements is not None else _size(part)


def _known(function: str, part: Part, role: str, other: str, sized: bool) -> int:
    size = part.built if part.built is not None else part.text
    if size is None and not sized:
        return 0  # a column's data, next to literals only
    if size is None:
        raise Unbounded(
            f"{function}'s {role} must be a literal when its {other} is built by a sized call "
            "(a column's size is not known before the query runs)"
        )
    return size


def _replaced(function: str, parts: list[Part], sized: bool) -> int:
    string = _known(function, parts[0], "string", "replacement", sized)
    to = _known(function, parts[2], "replacement", "string", sized)
    # A group reference inserts what its group matched: over all matches, at most ``s`` again.
    again = string * references(function, parts)
    step = parts[1].text if function == "replace" and parts[1].text else 0
    if step:
        return string + (string // step) * max(0, to - step)
    if function == "regexp_replace" and not is_global(parts):
        return string + to + again  # without the 'g' flag only the first match is replaced
    return string + (string + 1) * to + again


def references(function: str, parts: list[Part]) -> int:
    """The group references (``$1``, ``\\1``) of a ``regexp_replace``'s literal replacement."""
    return parts[2].references if function == "regexp_replace" and parts[2].text is not None else 0


def groups(function: str, parts: list[Part]) -> int:
    """The groups of a ``regexp_match``'s literal pattern (Unbounded when it is not a literal)."""
    if parts[1].groups is None:
        raise Unbounded(f"{function}'s pattern must be a literal (each of its groups may hold the string)")
    return max(1, parts[1].groups)


def is_global(parts: list[Part]) -> bool:
    """Whether a ``regexp_replace`` replaces every match: its flags have a 'g' (or are not a
    literal); without them it replaces the first match only."""
    if len(parts) < 4:
        return False
    return parts[3].flags is None or "g" in parts[3].flags


def _repeat(parts: list[Part], sources: str) -> tuple[int, str] | None:
    string, count = parts[0], parts[1] if len(parts) > 1 else Part()
    if string.built is None and string.text is None:
        return None  # a column repeated: ``capped.repeat`` checks what it builds, at execution
    if count.integer is None:
        if not string.source:
            return None  # a column or literal repeated a column's times: ``capped.repeat`` checks it
        raise Unbounded(f"repeat's count must be an integer literal when its string is built by {sources}")
    size = string.built if string.built is not None else string.text or 0
    return size * max(count.integer, 0), sources


__all__ = [
    "CONCATENATIONS",
    "ELEMENT_REPLACEMENTS",
    "ENCODED_PER_BYTE",
    "ENCODES",
    "FORMATS",
    "FORMAT_PER_BYTE",
    "GATHERS",
    "JOINS",
    "MATCHES",
    "REPLACEMENTS",
    "SMALL",
    "SMALL_KINDS",
    "TEXT_PER_BYTE",
    "Part",
    "Unbounded",
    "compose",
    "groups",
    "is_global",
    "references",
]

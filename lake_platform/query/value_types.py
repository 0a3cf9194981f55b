"""How wide one value of an Arrow type named in a cast is, when the type has a fixed-size part.

``arrow_cast(NULL, 'FixedSizeList(1000000, Int64)')`` is a NULL of a type whose every value,
NULL or not, holds its whole width: Arrow stores a fixed-size list's or binary's children for
each row, so the cast builds 8 MB a row from nothing (a query over a table: gigabytes a batch),
outside DataFusion's memory pool. ``value_bounds`` checks that width against the cap like what
``lpad`` builds. The width is read from the type's text as DataFusion parses it
(``FixedSizeList(3, Int64)`` or ``FixedSizeList(3 x Int64)``, ``FixedSizeBinary(16)``, nested in
``List``/``Struct``/``Map``/``Dictionary`` ...): a fixed-size list its length times its element's
width, a fixed-size binary its length, any other type with parts the sum of its parts' (a list
counted as one element), a scalar its Arrow width (a string's offset or view: 16), any other
:data:`SCALAR_BYTES` (the widest scalar's).
"""

from __future__ import annotations

import re

#: What a type not named below counts as: Decimal256, the widest scalar.
SCALAR_BYTES = 32
#: Scalars' Arrow widths, by their name's start (an element of a string type: its offset or view).
_SCALARS = (
    ("Null", 1),
    ("Boolean", 1),
    ("Int8", 1),
    ("UInt8", 1),
    ("Int16", 2),
    ("UInt16", 2),
    ("Float16", 2),
    ("Int32", 4),
    ("UInt32", 4),
    ("Float32", 4),
    ("Date32", 4),
    ("Time32", 4),
    ("Decimal32", 4),
    ("Int64", 8),
    ("UInt64", 8),
    ("Float64", 8),
    ("Date64", 8),
    ("Time64", 8),
    ("Timestamp", 8),
    ("Duration", 8),
    ("Decimal64", 8),
    ("Decimal128", 16),
    ("Interval", 16),
    ("Utf8", 16),
    ("LargeUtf8", 16),
    ("Binary", 16),
    ("LargeBinary", 16),
)

_FIXED = re.compile(r"FixedSize(?:List|Binary)", re.IGNORECASE)
_LIST = re.compile(r"\s*FixedSizeList\s*\(\s*(\d+)\s*(?:,|\bx\b)(.*)\)\s*$", re.IGNORECASE | re.DOTALL)
_BINARY = re.compile(r"\s*FixedSizeBinary\s*\(\s*(\d+)\s*\)\s*$", re.IGNORECASE)
_NESTED = re.compile(r"\s*\w+\s*\((.*)\)\s*$", re.DOTALL)
_FIELD_NAME = re.compile(r'^\s*"(?:[^"\\]|\\.)*"\s*:')


def fixed_width(type_text: str) -> int | None:
    """The most bytes one value of the type ``type_text`` holds; None when it has no fixed-size
    part (its values are as large as what is cast)."""
    if not _FIXED.search(type_text):
        return None
    return _width(type_text)


def _width(text: str) -> int:
    listed = _LIST.match(text)
    if listed:
        return int(listed.group(1)) * _width(listed.group(2))
    binary = _BINARY.match(text)
    if binary:
        return int(binary.group(1))
    nested = _NESTED.match(text)
    if nested:
        parts = [_FIELD_NAME.sub("", part) for part in _split(nested.group(1))]
        if not nested.group(0).lstrip().startswith(("Timestamp", "Interval", "Decimal")):
            return sum(_width(part) for part in parts) or SCALAR_BYTES
    name = text.strip()
    return next((width for scalar, width in _SCALARS if name.startswith(scalar)), SCALAR_BYTES)


def _split(inner: str) -> list[str]:
    """The comma-separated parts of a type's parentheses, at its own level (quotes respected)."""
    parts, depth, start, quoted = [], 0, 0, False
    for index, char in enumerate(inner):
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:index])
            start = index + 1
    parts.append(inner[start:])
    return parts


__all__ = ["SCALAR_BYTES", "fixed_width"]

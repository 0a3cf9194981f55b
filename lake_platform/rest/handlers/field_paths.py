"""QueryTable's ``columns``: Lance field paths, as the Lance Namespace spec writes them
(``QueryTableRequestColumns.column_names``) and Lance's own scanner reads them.

A path is dot-separated segments: ``s.a`` is field ``a`` of the struct column ``s``. A segment
in backticks is taken literally (``s.`b.c``` is field ``b.c`` of ``s``), a doubled backtick
inside one is one backtick. Each answered column is named by its path as sent, as Lance names
it (``columns=["s.a"]`` gives a column ``s.a``). A path that names no field, or goes into a
column that is not a struct, is InvalidInput saying which segment.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from datafusion import Expr, col

from lake_platform.errors import InvalidInput


def segments(path: str) -> list[str]:
    """The field names along ``path``. InvalidInput for an empty segment or an unclosed
    backtick."""
    found: list[str] = []
    i, n = 0, len(path)
    while True:
        if i < n and path[i] == "`":
            name, i = _quoted(path, i + 1)
        else:
            end = path.find(".", i)
            end = n if end < 0 else end
            name, i = path[i:end], end
            if "`" in name:
                raise InvalidInput(f"column {path!r}: a backtick may only quote a whole segment")
        if not name:
            raise InvalidInput(f"column {path!r} has an empty segment")
        found.append(name)
        if i == n:
            return found
        if path[i] != ".":
            raise InvalidInput(f"column {path!r}: a quoted segment must be followed by '.' or end")
        i += 1


def _quoted(path: str, i: int) -> tuple[str, int]:
    """The backtick-quoted segment starting after its opening backtick at ``i - 1``, and the
    index after its closing one."""
    out: list[str] = []
    while i < len(path):
        if path[i] == "`":
            if path.startswith("``", i):
                out.append("`")
                i += 2
                continue
            return "".join(out), i + 1
        out.append(path[i])
        i += 1
    raise InvalidInput(f"column {path!r} has an unclosed backtick")


def projection(path: str, schema: pa.Schema) -> Expr:
    """The expression selecting ``path`` from a frame of ``schema``, named ``path``."""
    names = segments(path)
    if names[0] not in schema.names:
        raise InvalidInput(f"column {path!r}: the table has no column {names[0]!r}")
    field: Any = schema.field(names[0])
    expr = col('"' + names[0].replace('"', '""') + '"')  # quoted: the exact name
    for name in names[1:]:
        if not pa.types.is_struct(field.type):
            raise InvalidInput(f"column {path!r}: {field.name!r} is a {field.type}, not a struct")
        if field.type.get_field_index(name) < 0:
            raise InvalidInput(f"column {path!r}: struct {field.name!r} has no field {name!r}")
        field = field.type.field(name)
        expr = expr[name]
    return expr if path == names[0] else expr.alias(path)

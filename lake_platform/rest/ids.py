"""Identifiers on the wire: ``{id}`` in a path is the id's segments joined by a delimiter
(``$`` by default, ``LAKE_REST_ID_DELIMITER``; a request may override it with ``?delimiter=``).
The root namespace is the delimiter alone (``/v1/namespace/$/list``).

The hierarchy maps onto ids in one way: segment 1 is the project, segment 2 the warehouse, then
the namespace path, and for a table the table name last (``demo$main$raw$events`` is the table
``demo.main.raw.events``). Every segment follows the platform's naming rule; a segment holding
the delimiter (possible only in a JSON body) is refused, since it could not travel in a path.
"""

from __future__ import annotations

from typing import Any

from lake_platform.errors import InvalidInput
from lake_platform.naming import check_segment

#: The longest delimiter (as ``LAKE_REST_ID_DELIMITER``).
MAX_DELIMITER = 8


def check_delimiter(delimiter: str) -> str:
    """``delimiter`` if it can join segments unambiguously: 1-8 printable characters, none a
    letter, digit, ``_``, ``/`` or space (the rule ``LAKE_REST_ID_DELIMITER`` follows). A
    request's ``?delimiter=_`` made ``p_w_ns_a_b`` name both ``p.w.ns.a_b`` and ``p.w.ns.a.b``."""
    if not delimiter or len(delimiter) > MAX_DELIMITER:
        raise InvalidInput(f"the id delimiter must be 1 to {MAX_DELIMITER} characters")
    if any(c.isalnum() or c == "_" or c.isspace() or c == "/" or not c.isprintable() for c in delimiter):
        raise InvalidInput(
            f"the id delimiter {delimiter[:MAX_DELIMITER]!r} must not contain letters, digits, '_', '/', "
            "spaces or control characters: a name may contain them"
        )
    return delimiter


def parse_path_id(raw: str, delimiter: str) -> list[str]:
    if not delimiter:
        raise InvalidInput("the id delimiter must not be empty")
    if raw == delimiter or raw == "":
        return []
    parts = raw.split(delimiter)
    for part in parts:
        check_segment(part, "id segment")
    return parts


def parse_transaction_id(raw: str, delimiter: str) -> list[str]:
    """A transaction's id: its table's id, then the commit id (letters, digits and dashes,
    which need not follow the naming rule: a commit id may start with a digit)."""
    if not delimiter:
        raise InvalidInput("the id delimiter must not be empty")
    *table, commit = raw.split(delimiter)
    for part in table:
        check_segment(part, "id segment")
    if not 8 <= len(commit) <= 128 or not commit.replace("-", "").isalnum():
        raise InvalidInput("a transaction id ends with a commit id (8-128 letters, digits or dashes)")
    return [*table, commit]


def check_body_id(value: Any, delimiter: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise InvalidInput(f"invalid id {value!r}: expected a list of names")
    for part in value:
        if delimiter in part:
            raise InvalidInput(f"id segment {part!r} contains the delimiter {delimiter!r}")
        check_segment(part, "id segment")
    return list(value)


def merge_ids(
    path_id: list[str] | None, body: dict[str, Any], delimiter: str, *, transaction: bool = False
) -> list[str] | None:
    """The request's id: the path's, unless the body names another (then 400). A transaction's
    body id is only compared with its path's (already checked)."""
    if "id" not in body or body["id"] is None:
        return path_id
    if transaction and body["id"] == path_id:
        return path_id
    body_id = check_body_id(body["id"], delimiter)
    if path_id is not None and body_id != path_id:
        raise InvalidInput(
            f"the id in the path ({delimiter.join(path_id) or delimiter}) differs from the id in the body "
            f"({delimiter.join(body_id) or delimiter})"
        )
    return body_id

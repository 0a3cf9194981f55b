"""The query layer's errors, and DataFusion's and Lance's failures translated into them.

DataFusion reports every problem as one exception type with a message, so the translation reads
the message: a missing table, exhausted memory, bad input at execution (a division by zero, a
failed cast) and files vanished under a scan each get their typed error. Whatever is left is an
internal error, logged here and shown to the client without paths or URLs.
"""

from __future__ import annotations

import logging
import re

from lake_platform.errors import (
    Internal,
    InvalidInput,
    LakeError,
    TableNotFound,
    TableVersionNotFound,
    Throttling,
)
from lake_platform.naming import SEGMENT
from lake_platform.query.capped import MARKER
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import TableRef

log = logging.getLogger(__name__)

_PATHISH = re.compile(r"(?:[a-z][a-z0-9+.-]*://[^\s'\"]+)|(?:/[^\s'\"/]+){2,}/?", re.IGNORECASE)
_NOT_FOUND = re.compile(r"table '([^']+)' not found", re.IGNORECASE)
#: What DataFusion says when a string or list column of one batch passes 2 GiB (``concat``).
_OFFSET_OVERFLOW = "offset overflow"
#: The SQL parser's errors, as DataFusion prints them (Rust's debug form, quotes escaped).
_SYNTAX = re.compile(r'(?:Parser|Tokenizer)Error\("(.*)"\)')


class QueryTimeout(LakeError):
    grpc_status = "DEADLINE_EXCEEDED"


class QueryCancelled(LakeError):
    grpc_status = "CANCELLED"


class ResultTooLarge(InvalidInput):
    """The result outgrew ``max_result_bytes`` (INVALID_ARGUMENT: retrying cannot help)."""


class ValueTooLarge(InvalidInput):
    """A function would build values past ``max_value_bytes`` (``query.capped``)."""


class JoinTooLarge(InvalidInput):
    """A join without an equality key may do more than ``max_join_pairs`` row pairs' work of a
    simple comparison: its pairs times what each costs (``query.join_bounds``)."""


class RelationsTooMany(InvalidInput):
    """A query combines more than ``max_relations`` relations: DataFusion's optimizer, which
    cannot be stopped, would take minutes over it (``query.relations``)."""


def timed_out(limits: QueryLimits, doing: str = "the query") -> QueryTimeout:
    """The error a query past its ``query_timeout_seconds`` ends with."""
    verb = "took" if doing.startswith("planning") else "ran"
    return QueryTimeout(f"{doing} {verb} longer than {limits.named('query_timeout_seconds')} and was stopped")


def too_large(limits: QueryLimits) -> ResultTooLarge:
    return ResultTooLarge(
        f"the result is larger than {limits.named('max_result_bytes')}; narrow the query or add a LIMIT"
    )


def gone(ref: TableRef) -> TableVersionNotFound:
    return TableVersionNotFound(
        f"version {ref.version} of {ref.name} is no longer available "
        "(cleaned up or dropped); run the query again"
    )


def is_missing(exc: BaseException) -> bool:
    """Whether a storage error says the object is not there (rather than unreachable)."""
    text = str(exc).lower()
    return "not found" in text or "no such file" in text or "does not exist" in text


#: How DataFusion chains a wrapped error ("Optimizer rule 'x' failed", then what failed).
_CAUSED_BY = "\ncaused by\n"


def clean_message(exc: BaseException, limit: int = 400) -> str:
    """First line of a DataFusion/Lance message's innermost cause, without prefixes, paths or
    URLs (the wrapping lines name an optimizer rule, not what was wrong with the query)."""
    text = str(exc).strip().rsplit(_CAUSED_BY, 1)[-1].strip()
    for prefix in (
        "DataFusion error: ",
        "Error during planning: ",
        "Execution error: ",
        "External error: ",
        "SQL error: ",
        "Schema error: ",
        "This feature is not implemented: ",
        "Optimizer rule",
    ):
        text = text.replace(prefix, "")
    text = text.splitlines()[0] if text else type(exc).__name__
    syntax = _SYNTAX.fullmatch(text)
    if syntax:
        text = "syntax error: " + re.sub(r"\\(.)", r"\1", syntax.group(1))
    text = _PATHISH.sub("<path>", text)
    return text[:limit]


def planning_error(exc: BaseException, limits: QueryLimits | None = None) -> LakeError:
    text = str(exc)
    m = _NOT_FOUND.search(text)
    if m:
        name = m.group(1)
        if name.startswith(("datafusion.public.", "datafusion.information_schema.")):
            short = _PATHISH.sub("<path>", name.split(".", 2)[2])[:120]
            return InvalidInput(f"name tables as warehouse.namespace.table (got {short!r})")
        parts = name.split(".")
        if len(parts) < 3 or not all(SEGMENT.fullmatch(p) for p in parts):
            return InvalidInput(f"invalid table name {_PATHISH.sub('<path>', name)[:120]!r}")
        return TableNotFound(f"table {name} not found")
    if "Resources exhausted" in text:
        return _out_of_memory(exc, limits)
    return InvalidInput(clean_message(exc))


def _out_of_memory(exc: BaseException, limits: QueryLimits | None) -> Throttling:
    pool = limits.named("memory_limit_bytes") if limits is not None else "memory_limit_bytes"
    return Throttling(
        f"the query needs more memory than {pool} allows, even spilling to "
        f"disk (the pool is shared by all running queries): {clean_message(exc)}"
    )


def execution_error(
    exc: BaseException, limits: QueryLimits | None = None, refs: tuple[TableRef, ...] = ()
) -> LakeError:
    if isinstance(exc, LakeError):
        return exc
    text = str(exc)
    if MARKER in text:
        built = text.split(MARKER, 1)[1].split("'", 1)[0].split('"', 1)[0].strip()
        limit = limits.named("max_value_bytes") if limits is not None else "max_value_bytes"
        return ValueTooLarge(f"{built}, more than {limit}: values this large are refused")
    if "Resources exhausted" in text:
        return _out_of_memory(exc, limits)
    if _OFFSET_OVERFLOW in text:
        # Arrow's string and list offsets are 32-bit: retrying cannot help, narrowing can.
        return ValueTooLarge(
            "a column of the query grew past 2 GiB in one batch, the most an Arrow string or list "
            "column holds; build smaller values (or fewer per row) and aggregate less per group"
        )
    # Parameters are bound when the plan runs, so a bound value of a type the query cannot
    # take fails here with a planning error: bad input, like the other failures named.
    if any(
        s in text
        for s in (
            "Error during planning",
            "Arrow error: Divide by zero",
            "Cast error",
            "Invalid argument",
            "Compute error",
            "Arithmetic overflow",
            "Overflow",
            "Parser error",  # a string a function cannot parse: to_timestamp, to_date
            "regex parse error",  # a pattern from a column that does not compile
            "is out of range",  # make_date's month 13
            # An argument a function refuses for its value (DataFusion's "Execution error"s)
            "field position must not be zero",  # split_part
            "invalid Unicode scalar value",  # chr
            "negative substring length",  # overlay
            "position overflow",  # substr's start, in a filter Lance evaluates
            "negative count not allowed",  # substr's length, likewise
            "got invalid index",  # array_slice, array_element
            "stride must be non-zero",  # date_bin
            "step can't be 0",  # range, generate_series
            "array_resize: failed to convert size",  # a negative size
            "Failed to decode from",  # decode of a value that is not hex or base64
            "Unsupported date_trunc granularity",  # date_trunc('nope', ...)
            "Granularity of `date_trunc` must be",  # a granularity from a column
        )
    ):
        return InvalidInput(clean_message(exc))
    if "not found" in text.lower() and ("object" in text.lower() or "file" in text.lower()):
        # Files vanished under a running scan (cleaned up or purged meanwhile): name the
        # snapshots the query reads, as the check before the scan would have.
        which = ", ".join(f"version {r.version} of {r.name}" for r in refs[:5])
        return TableVersionNotFound(
            f"a table version this query reads ({which}) is no longer available"
            if which
            else "a table version this query reads is no longer available"
        )
    log.warning("query failed: %s", exc)
    return Internal(f"the query failed: {clean_message(exc)}")


__all__ = [
    "JoinTooLarge",
    "QueryCancelled",
    "QueryTimeout",
    "RelationsTooMany",
    "ResultTooLarge",
    "ValueTooLarge",
    "clean_message",
    "execution_error",
    "gone",
    "is_missing",
    "planning_error",
    "timed_out",
    "too_large",
]

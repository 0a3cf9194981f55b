"""Key lookups on an indexed column, read straight from Lance's scanner.

``SELECT a, b FROM t WHERE id = 4242`` over one Lance snapshot, with ``id`` indexed, is answered
by Lance from the index in about a millisecond; through DataFusion over Lance's table provider
the same read costs ~3-4 ms more (optimizing the plan again, physical planning across the FFI
boundary, and the stream hand-offs between the two runtimes; ``bench/indexes.py``). DataFusion
still plans every query (its schema, the captured snapshots, the read-only checks; a prepared
lookup's later bindings share its first binding's plan: ``bound``); only the execution of this
one shape goes to Lance's scanner:

- the plan is a projection of plain columns over a filter over a scan of exactly one snapshot,
  read from Lance (not the snapshot cache, not a part), with no scan filters or limit of its own;
- the filter is an ``AND`` of ``column = literal``, each literal of exactly its column's type
  (signed or unsigned integers but Int64's least value, or a string without quotes or
  backslashes), so Lance's filter text means exactly what DataFusion would evaluate: no
  coercion, no NULL literal;
- at least one of those columns has a scalar index in the snapshot (a lookup Lance answers
  from the index, never a long scan the time limit could not interrupt).

Anything else, or any doubt, runs through DataFusion as before. The rows are the same: the
same snapshot, the same predicate, conformed to the planned schema (tests compare the two).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from lake_platform.lru import BoundedLRU
from lake_platform.query.batches import conformer, split_batch
from lake_platform.query.errors import execution_error, timed_out, too_large
from lake_platform.query.facts import variant_of
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import TableRef

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INTS = {
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
}


#: The largest value an integer literal in SQL text is an Int64 for (DataFusion types a larger
#: one otherwise, and the comparison is then no lookup).
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


class Term(NamedTuple):
    """One conjunct ``column = value``: an integer compared to a column of the literal's integer
    type (Int64 for a literal of SQL text), or a string to a string column."""

    column: str
    value: int | str

    def text(self) -> str:
        """The conjunct in Lance's filter syntax. The column is quoted: unquoted, Lance reads a
        column named ``null`` as NULL (no rows), and ``true`` or ``interval`` as errors."""
        if isinstance(self.value, int):
            return f"`{self.column}` = {self.value}"
        return f"`{self.column}` = '{self.value}'"


@dataclass(frozen=True)
class Lookup:
    ref: TableRef
    columns: tuple[str, ...]
    terms: tuple[Term, ...]  # in the order the predicate has them
    keys: frozenset[str]  # the columns compared

    @property
    def filter(self) -> str:
        """Lance's SQL filter text."""
        return " AND ".join(term.text() for term in self.terms)

    def with_parameters(self, values: Sequence[Any], order: Sequence[int]) -> Lookup | None:
        """This lookup with each term's value the parameter ``order`` names for it (from
        :meth:`parameters_of`), given a binding of the same types; None when a value would not
        be what DataFusion plans as a lookup: an integer beyond Int64, or one (or a string)
        Lance's filter text could not say."""
        terms = []
        for term, i in zip(self.terms, order, strict=True):
            value = values[i]
            if type(value) is not type(term.value) or not _plain(value):
                return None
            terms.append(Term(term.column, value))
        return Lookup(self.ref, self.columns, tuple(terms), self.keys)

    def parameters_of(self, values: Sequence[Any]) -> tuple[int, ...] | None:
        """Which of ``values`` (the bound parameters this lookup was planned with, in order)
        each term takes its value from, when that is beyond doubt: every term's value is
        exactly one parameter's, of the same kind, and each parameter is one term's. None
        otherwise (a term compares a literal of the text, or two parameters have equal values):
        such a lookup is not bound again (:meth:`with_parameters`) to other values. (A
        parameter anywhere else, say inside an expression, makes the plan no lookup at all.)"""
        if len(values) != len(self.terms):
            return None
        order = []
        for term in self.terms:
            found = [i for i, v in enumerate(values) if type(v) is type(term.value) and v == term.value]
            if len(found) != 1 or found[0] in order:
                return None
            order.append(found[0])
        return tuple(order)


def _plain(value: int | str) -> bool:
    """Whether a value bound to a kept prepared lookup is planned as exactly this value and
    Lance's filter text says it: an integer within Int64 (one beyond it is planned), or a
    string as :func:`_sayable` has it."""
    if isinstance(value, int):
        return _sayable(value) and value <= _INT64_MAX
    return _sayable(value)


def _sayable(value: int | str) -> bool:
    """Whether Lance's filter text says ``value`` as it is: any integer of the integer types but
    Int64's least (``-9223372036854775808`` is minus a number beyond Int64 to Lance's parser, a
    Float64 it will not compare to an Int64 column); a string without quotes or backslashes."""
    if isinstance(value, int):
        return value != _INT64_MIN
    return "'" not in value and "\\" not in value


def lookup_of(df: Any, ref: TableRef, result: pa.Schema, schema: pa.Schema) -> Lookup | None:
    """The lookup DataFusion's ``df`` (answering ``result``, reading only ``ref``) is, given the
    table's ``schema``; None for any other plan."""
    root = df.logical_plan()
    proj = root.to_variant()
    if type(proj).__name__ != "Projection" or len(root.inputs()) != 1:
        return None
    columns = []
    for expr in proj.projections():
        v = variant_of(expr, "Column")
        if v is None:
            return None
        columns.append(v.name())
    (filt,) = root.inputs()
    fv = filt.to_variant()
    if type(fv).__name__ != "Filter" or len(filt.inputs()) != 1:
        return None
    (scan,) = filt.inputs()
    sv = scan.to_variant()
    if type(sv).__name__ != "TableScan" or sv.filters() or sv.fetch() is not None:
        return None
    terms: list[Term] = []
    if not _conjuncts(fv.predicate(), schema, terms):
        return None
    if [f.name for f in result] != columns or any(c not in schema.names for c in columns):
        return None
    return Lookup(ref, tuple(columns), tuple(terms), frozenset(t.column for t in terms))


def lookup_of_filter(
    ref: TableRef, columns: Sequence[str], predicate: Any, schema: pa.Schema
) -> Lookup | None:
    """The lookup that reads ``columns`` of the rows of ``ref`` (whose table has ``schema``)
    matching ``predicate``, a filter expression parsed on its own (REST's QueryTable: no plan
    around it to read the shape from, see :func:`lookup_of`); None when the predicate is not an
    ``AND`` of ``column = literal`` terms as :func:`lookup_of` takes them."""
    terms: list[Term] = []
    if not columns or any(c not in schema.names for c in columns) or not _conjuncts(predicate, schema, terms):
        return None
    return Lookup(ref, tuple(columns), tuple(terms), frozenset(t.column for t in terms))


def _conjuncts(expr: Any, schema: pa.Schema, terms: list[Term]) -> bool:
    v = variant_of(expr, "BinaryExpr")
    if v is None:
        return False
    if v.op() == "AND":
        return _conjuncts(v.left(), schema, terms) and _conjuncts(v.right(), schema, terms)
    if v.op() != "=":
        return False
    kinds = [v.left().variant_name(), v.right().variant_name()]
    if sorted(kinds) != ["Column", "Literal"]:
        return False
    sides = [v.left().to_variant(), v.right().to_variant()]
    col, lit = (sides[0], sides[1]) if kinds[0] == "Column" else (sides[1], sides[0])
    name = col.name()
    if not _NAME.match(name) or name not in schema.names:
        return False
    kind = schema.field(name).type
    dtype = lit.data_type()
    if dtype in _INTS and kind == _INTS[dtype]:
        value = lit.value_i64() if dtype.startswith("Int") else lit.value_u64()
        if value is None or not _sayable(int(value)):
            return False
        terms.append(Term(name, int(value)))
    elif dtype == "Utf8" and kind in (pa.string(), pa.large_string()):
        text = lit.value_string()
        if text is None or not _sayable(text):
            return False
        terms.append(Term(name, text))
    else:
        return False
    return True


def stream_lookup(
    scanner: Callable[[], Any],
    schema: pa.Schema,
    refs: Sequence[TableRef],
    limits: QueryLimits,
    cancelled: Callable[[], bool] = lambda: False,
) -> Iterator[pa.RecordBatch]:
    """The rows of a lookup (of ``refs``) read by Lance's ``scanner()`` (:class:`Scanners`),
    conformed to ``schema``, with the same result-size limit, time limit and
    cancellation as a DataFusion stream."""
    timeout = limits.query_timeout_seconds
    deadline = time.monotonic() + timeout if timeout else None
    try:
        reader = scanner().to_reader()
    except Exception as exc:  # noqa: BLE001
        raise execution_error(exc, limits, refs) from None
    conform = None
    sent = 0
    while True:
        failure = None
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001
            failure = execution_error(exc, limits, refs)
        if failure is not None:
            raise failure
        if deadline is not None and time.monotonic() >= deadline:
            raise timed_out(limits)
        if cancelled():
            return
        if not batch.num_rows:
            continue
        conform = conform or conformer(batch.schema, schema)
        batch = conform(batch)
        sent += batch.nbytes
        if limits.max_result_bytes and sent > limits.max_result_bytes:
            raise too_large(limits)
        yield from split_batch(batch, limits.max_message_bytes)


class Scanners:
    """Lance's scanner of each lookup over its opened dataset, made once (an LRU). Thread-safe.

    A kept plan is run again and again (an ADBC cursor re-running its query) over the same
    pinned snapshot, and a scanner reads the snapshot afresh on every ``to_reader()``. Its
    later reads cost less than its first (0.57-0.65 against 0.79 ms for a point lookup on 5M
    rows, in process: docs/benchmarks.md, sixteenth round). Readers of one scanner may run at
    once. A snapshot opened again (another dataset object) gets a scanner of its own."""

    def __init__(self, capacity: int) -> None:
        self._scanners: BoundedLRU[tuple[Lookup, int], tuple[Any, Any]] = BoundedLRU(capacity)
        self._counts_lock = threading.Lock()
        self._counts = {"built": 0, "reused": 0}

    def stats(self) -> dict[str, int]:
        """What ``/metrics`` reports: scanners kept now, scanners made and runs that read
        through a kept one."""
        with self._counts_lock:
            return {"entries": len(self._scanners), **self._counts}

    def scanner(self, dataset: Any, lookup: Lookup, batch_size: int) -> Any:
        key = (lookup, batch_size)
        kept = self._scanners.get(key, only_if=lambda kept: kept[0] is dataset)
        if kept is not None:
            self._count("reused")
            return kept[1]
        scanner = dataset.scanner(columns=list(lookup.columns), filter=lookup.filter, batch_size=batch_size)
        self._count("built")
        self._scanners.put(key, (dataset, scanner))
        return scanner

    def _count(self, figure: str) -> None:
        with self._counts_lock:
            self._counts[figure] += 1


__all__ = ["Lookup", "Scanners", "Term", "lookup_of", "lookup_of_filter", "stream_lookup"]

"""The SQLite registry's batches as statements: one statement per kind of op (``_Plan``), the
condition of each op its statement's own WHERE (or ON CONFLICT) clause, and, after a condition
failed, the one SELECT that names the first failing op (``first_failure``). ``SqliteMetaStore``
(``registry.sqlite``) runs them in autocommit mode (one op) or inside ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from lake_platform.errors import ConditionFailed, Internal
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

T = TypeVar("T")

#: Ops one multi-row statement covers (two parameters each, below SQLite's 999 before 3.32).
ROWS = 400


class Missed(Internal):
    """A statement of a batch changed fewer rows than it has ops: a condition failed. Caught by
    ``transact``, which rolls back; escaping it would be a bug, hence Internal."""

    def __init__(self) -> None:
        super().__init__("registry batch missed a condition it had checked")


@dataclass
class Plan:
    """A batch as one statement per kind of op. Keys are distinct within a batch (check_ops), so
    the statements touch disjoint rows and their order does not change the outcome."""

    ops: Sequence[Op]
    #: Check, and a Delete expecting ABSENT (it deletes nothing): a SELECT compared here.
    checks: list[Check | Delete] = field(default_factory=list)
    updates: list[Put] = field(default_factory=list)  # compare-and-swap of an existing key
    deletes: list[Delete] = field(default_factory=list)
    inserts: list[Put] = field(default_factory=list)  # create: expected ABSENT
    upserts: list[Put] = field(default_factory=list)  # unconditional

    @classmethod
    def of(cls, ops: Sequence[Op]) -> Plan:
        plan = cls(ops)
        for op in ops:
            if isinstance(op, Put) and op.expected is None:
                plan.upserts.append(op)
            elif isinstance(op, Put):
                (plan.inserts if op.expected == ABSENT else plan.updates).append(op)
            elif isinstance(op, Delete) and op.expected != ABSENT:
                plan.deletes.append(op)
            else:
                plan.checks.append(op)
        return plan

    def run(self, conn: sqlite3.Connection) -> list[Item | None]:
        """Run the statements (the ones that cannot fail last); raise Missed when a condition
        failed, after which the caller must roll back what ran before it."""
        if self.checks:
            found = _revisions(conn, [op.key for op in self.checks])
            if any(found.get(op.key, ABSENT) != op.expected for op in self.checks):
                raise Missed
        if self.updates:
            rows = [(op.value, op.key, op.expected) for op in self.updates]
            _changed(conn.executemany(_UPDATE, rows), len(rows))
        if self.deletes:
            keys = [(op.key, op.expected) for op in self.deletes]
            _changed(conn.executemany(_DELETE, keys), len(keys))
        for part in _parts(self.inserts):
            params = [x for op in part for x in (op.key, op.value)]
            _changed(conn.execute(_insert_sql(len(part)), params), len(part))
        written: dict[str, int] = {}
        for part in _parts(self.upserts):
            params = [x for op in part for x in (op.key, op.value)]
            # RETURNING: the revision it wrote, read in the same statement. fetchall runs the
            # statement to its end (in autocommit mode, that is its commit).
            written.update(conn.execute(_upsert_sql(len(part)), params).fetchall())
        return [_result(op, written) for op in self.ops]


def _result(op: Op, written: dict[str, int]) -> Item | None:
    if not isinstance(op, Put):
        return None
    revision = written[op.key] if op.expected is None else op.expected + 1
    return Item(op.key, op.value, revision)


def _changed(cursor: sqlite3.Cursor, ops: int) -> None:
    # Each op of a group changes its row iff its condition holds. rowcount counts rows changed
    # (summed over an executemany's rows).
    if cursor.rowcount != ops:
        raise Missed


def _revisions(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for part in _parts(keys):
        found.update(conn.execute(_revisions_sql(len(part)), part).fetchall())
    return found


def _parts(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in runs of at most ``ROWS`` (one multi-row statement each)."""
    for at in range(0, len(items), ROWS):
        yield items[at : at + ROWS]


def first_failure(conn: sqlite3.Connection, ops: Sequence[Op]) -> ConditionFailed | None:
    """The first op, in op order, whose condition does not hold now (one SELECT), as the error
    to raise; None when every condition holds."""
    conditional = [op for op in ops if not (isinstance(op, Put) and op.expected is None)]
    found = _revisions(conn, [op.key for op in conditional]) if conditional else {}
    for op in conditional:
        current = found.get(op.key, ABSENT)
        if current != op.expected:
            return ConditionFailed(
                f"registry condition failed on {op.key!r}: expected revision {op.expected}, found {current}",
                key=op.key,
            )
    return None


# The statements. A create, a batch's checks and its unconditional puts are one statement however
# many ops they cover (multi-row VALUES, ``key IN (...)``; built once per size, and prepared once
# per connection by sqlite3's statement cache). Compare-and-swaps and deletes are not: an UPDATE
# or DELETE over several keys runs SQLite's two-pass plan (collect the rows, then change them),
# measured slower than the one-key statement repeated by ``executemany``, which is still one call
# from Python and one prepared statement.

_UPDATE = "UPDATE kv SET value = ?, revision = revision + 1 WHERE key = ? AND revision = ?"
_DELETE = "DELETE FROM kv WHERE key = ? AND revision = ?"


def _marks(n: int) -> str:
    return ", ".join("?" * n)


@functools.cache
def select_sql(n: int) -> str:
    return f"SELECT key, value, revision FROM kv WHERE key IN ({_marks(n)})"


@functools.cache
def _revisions_sql(n: int) -> str:
    return f"SELECT key, revision FROM kv WHERE key IN ({_marks(n)})"


@functools.cache
def _insert_sql(n: int) -> str:
    rows = ", ".join(["(?, ?, 1)"] * n)
    return f"INSERT INTO kv (key, value, revision) VALUES {rows} ON CONFLICT(key) DO NOTHING"


@functools.cache
def _upsert_sql(n: int) -> str:
    rows = ", ".join(["(?, ?, 1)"] * n)
    return (
        f"INSERT INTO kv (key, value, revision) VALUES {rows} ON CONFLICT(key) DO UPDATE "
        "SET value = excluded.value, revision = kv.revision + 1 RETURNING key, revision"
    )

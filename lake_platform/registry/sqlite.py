"""SQLite MetaStore: the embedded default. WAL, a busy timeout, a small pool of connections.

Atomicity across processes comes from SQLite's own locking. Past the commit itself (writing the
changed pages to the WAL), statements are the cost: each is a round trip from Python into SQLite
(bind, step, reset; ~5 µs for a SELECT by key, more for a write), often more than the work it does
on a registry this size. So writes run as few statements as possible, and an op's condition is its
statement's own WHERE (or ON CONFLICT) clause, not a SELECT before it:

- One op (``put_if_absent``, ``compare_and_swap``, ``compare_and_delete``) is one statement in
  autocommit mode. A single statement is atomic, and whether it changed a row tells whether the
  condition held.
- A batch runs in one ``BEGIN IMMEDIATE`` transaction with one call per kind of op: every create
  in one INSERT, every check in one SELECT, every unconditional put in one upsert, and the
  compare-and-swaps (deletes) as one ``executemany`` of a one-key UPDATE (DELETE). A catalog
  commit of five puts is BEGIN, UPDATE, UPDATE, INSERT, COMMIT, not twelve statements. A group
  that changed fewer rows than it has ops means a condition failed; the batch is rolled back, so
  nothing is written.
- Revisions are read only for Checks (one SELECT for all of a batch's) and after a failed
  condition, to name the first failing op in op order (see ``transact``).
- One transaction has no item limit of its own, so a batch takes ``max_transact_ops`` (far above
  DynamoDB's 99): a 100-table catalog transaction is one SQLite transaction. A multi-row
  statement covers at most ``_ROWS`` ops, so its bound parameters stay within SQLite's oldest
  default limit (999).

Connections are pooled, not kept per thread: Lance calls the catalog's namespace back from
short-lived threads of its own, and a connection per thread meant opening one (connect and three
PRAGMAs, ~0.1 ms) on every commit and keeping it, with its file descriptors, until close.
A connection is used by one caller at a time, from whatever thread holds it.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from lake_platform import owner_only
from lake_platform.errors import ConditionFailed, Internal, ServiceUnavailable
from lake_platform.registry.changes import DEFAULT_SHARDS, ChangeWriter
from lake_platform.registry.store import (
    ABSENT,
    Check,
    Delete,
    Item,
    MetaStore,
    Op,
    Put,
    check_key,
    check_keys,
    check_ops,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key      TEXT PRIMARY KEY,
    value    BLOB NOT NULL,
    revision INTEGER NOT NULL
) WITHOUT ROWID
"""
T = TypeVar("T")

_PAGE = 500
#: Ops one multi-row statement covers (two parameters each, below SQLite's 999 before 3.32).
_ROWS = 400
#: Idle connections kept for reuse by default; more are opened under bursts and closed when returned.
POOL_SIZE = 8


class SqliteMetaStore(MetaStore):
    backend = "sqlite"
    #: A bound on a batch's size in memory and time, not an atomicity limit: one transaction.
    max_transact_ops = 10_000

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_seconds: float = 2.0,
        change_shards: int = DEFAULT_SHARDS,
        on_open: Callable[[sqlite3.Connection], None] | None = None,
        pool_size: int = POOL_SIZE,
    ) -> None:
        """``on_open``: called with each connection the store opens, once it is set up and before
        it reads or writes (to trace its statements, say: ``set_trace_callback``). ``pool_size``:
        idle connections kept for reuse."""
        self.path = Path(path)
        # Created 0600 before SQLite opens it: its WAL and shared-memory files take its mode.
        owner_only.touch(self.path)
        self.url = f"sqlite:///{self.path.as_posix()}"
        self._timeout = busy_timeout_seconds
        self._on_open = on_open
        self.pool_size = pool_size
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.changes = ChangeWriter(self, change_shards)
        # Only a new registry takes the write lock here: under WAL a reader never waits for a
        # writer, but an open that always created the table waited the busy timeout behind any
        # writer's transaction (a read-only ``lake sql`` failed "registry is busy").
        if not self._has_table():
            with self._tx() as conn:
                conn.execute(_SCHEMA)

    def _has_table(self) -> bool:
        try:
            with self._conn() as conn:
                found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kv'")
                return found.fetchone() is not None
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry read failed: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        try:
            # check_same_thread=False: a pooled connection moves between threads, one user at a time.
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable against process crashes in WAL mode; only an OS crash can
            # lose the last commits, never corrupt the database.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        except sqlite3.Error as exc:
            raise ServiceUnavailable(f"registry database cannot be opened: {exc}") from exc
        if self._on_open is not None:
            self._on_open(conn)
        return conn

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        return conn if conn is not None else self._open()

    def _give(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            keep = len(self._idle) < self.pool_size and not conn.in_transaction
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        conn = self._take()
        try:
            yield conn
        finally:
            self._give(conn)

    def connections(self) -> int:
        """Idle pooled connections (for tests: the pool stays bounded)."""
        with self._lock:
            return len(self._idle)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._conn() as conn, _Tx(conn) as tx:
            yield tx

    def get(self, key: str) -> Item | None:
        check_key(key)
        try:
            with self._conn() as conn:
                row = conn.execute("SELECT value, revision FROM kv WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry read failed: {exc}") from exc
        return Item(key, bytes(row[0]), row[1]) if row else None

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        check_keys(keys)
        if not keys:
            return []
        try:
            with self._conn() as conn:
                # One statement reads one snapshot (WAL): no writer's batch shows half-applied.
                rows = conn.execute(_select_sql(len(keys)), keys).fetchall()
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry read failed: {exc}") from exc
        found = {key: Item(key, bytes(value), revision) for key, value, revision in rows}
        return [found.get(key) for key in keys]

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        check_ops(ops, self.max_transact_ops)
        return self.changes.write(ops, self._apply)

    def _apply(self, ops: Sequence[Op]) -> list[Item | None]:
        plan = _Plan.of(ops)
        try:
            if len(ops) == 1:
                return self._run_one(plan)
            with self._tx() as conn:
                return plan.run(conn)
        except _Missed:
            pass  # rolled back (or nothing changed): find out which condition failed
        # Name the first failing op in op order, as of one snapshot read now. Should that snapshot
        # show every condition holding (a concurrent writer changed a key in between), the batch
        # is run again, checked first under the write lock: it then applies, or fails on exactly
        # what that lock saw. Either is an outcome the call could have had.
        try:
            with self._conn() as conn:
                failure = _first_failure(conn, ops)
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry read failed: {exc}") from exc
        if failure is not None:
            raise failure
        with self._tx() as conn:
            failure = _first_failure(conn, ops)
            if failure is not None:
                raise failure
            return plan.run(conn)  # cannot miss: its conditions hold under this lock

    def _run_one(self, plan: _Plan) -> list[Item | None]:
        """One op: one statement in autocommit mode, atomic on its own (no BEGIN, no COMMIT).
        The hot path, so no context managers (a generator one costs ~2.5 µs, about a BEGIN)."""
        conn = self._take()
        try:
            return plan.run(conn)
        except sqlite3.OperationalError as exc:
            # The statement takes the write lock itself, where a batch's BEGIN IMMEDIATE would.
            what = "registry is busy" if _busy(exc) else "registry write failed"
            raise ServiceUnavailable(f"{what}: {exc}") from exc
        finally:
            self._give(conn)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        # TEXT keys in a UTF-8 database compare with memcmp (BINARY collation): the order of
        # their UTF-8 bytes, the order DynamoDB uses. A key range (never a function of the key)
        # is what lets SQLite walk the primary key from the page's start to its end: a scan
        # reads what it yields, not the whole registry.
        cursor = start_after if start_after is not None and start_after >= prefix else None
        upper = _after_prefix(prefix)
        remaining = limit
        while remaining is None or remaining > 0:
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            lower = cursor if cursor is not None else prefix
            op = ">" if cursor is not None else ">="
            bound = "AND key < ? " if upper is not None else ""
            params = (lower, upper, page) if upper is not None else (lower, page)
            try:
                with self._conn() as conn:  # per page: an unfinished scan holds no connection
                    rows = conn.execute(
                        f"SELECT key, value, revision FROM kv WHERE key {op} ? {bound}ORDER BY key LIMIT ?",
                        params,
                    ).fetchall()
            except sqlite3.OperationalError as exc:
                raise ServiceUnavailable(f"registry scan failed: {exc}") from exc
            for key, value, revision in rows:
                yield Item(key, bytes(value), revision)
            if len(rows) < page:
                return
            cursor = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

    def close(self) -> None:
        # The store stays usable (later calls open connections again), as before pooling.
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``/``ROLLBACK``, mapping lock timeouts to ServiceUnavailable."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry is busy: {exc}") from exc
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.OperationalError as err:
                self.conn.execute("ROLLBACK")
                raise ServiceUnavailable(f"registry commit failed: {err}") from err
        else:
            self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise ServiceUnavailable(f"registry write failed: {exc}") from exc


def _after_prefix(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    if not stripped:
        return None
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


def _busy(exc: sqlite3.OperationalError) -> bool:
    """The busy timeout ran out waiting for another connection's lock ("database is locked")."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class _Missed(Internal):
    """A statement of a batch changed fewer rows than it has ops: a condition failed. Caught by
    ``transact``, which rolls back; escaping it would be a bug, hence Internal."""

    def __init__(self) -> None:
        super().__init__("registry batch missed a condition it had checked")


@dataclass
class _Plan:
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
    def of(cls, ops: Sequence[Op]) -> _Plan:
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
        """Run the statements (the ones that cannot fail last); raise _Missed when a condition
        failed, after which the caller must roll back what ran before it."""
        if self.checks:
            found = _revisions(conn, [op.key for op in self.checks])
            if any(found.get(op.key, ABSENT) != op.expected for op in self.checks):
                raise _Missed
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
        raise _Missed


def _revisions(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for part in _parts(keys):
        found.update(conn.execute(_revisions_sql(len(part)), part).fetchall())
    return found


def _parts(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """``items`` in runs of at most ``_ROWS`` (one multi-row statement each)."""
    for at in range(0, len(items), _ROWS):
        yield items[at : at + _ROWS]


def _first_failure(conn: sqlite3.Connection, ops: Sequence[Op]) -> ConditionFailed | None:
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
def _select_sql(n: int) -> str:
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

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
  statement covers at most ``ROWS`` ops, so its bound parameters stay within SQLite's oldest
  default limit (999). The statements are ``sqlite_plan``'s.

Connections are pooled, not kept per thread: Lance calls the catalog's namespace back from
short-lived threads of its own, and a connection per thread meant opening one (connect and three
PRAGMAs, ~0.1 ms) on every commit and keeping it, with its file descriptors, until close.
A connection is used by one caller at a time, from whatever thread holds it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lake_platform import owner_only
from lake_platform.errors import Internal, LakeError, ServiceUnavailable
from lake_platform.registry.changes import DEFAULT_SHARDS, ChangeWriter
from lake_platform.registry.sqlite_plan import Missed, Plan, first_failure, select_sql
from lake_platform.registry.store import (
    Item,
    MetaStore,
    Op,
    check_key,
    check_keys,
    check_ops,
    check_range,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key      TEXT PRIMARY KEY,
    value    BLOB NOT NULL,
    revision INTEGER NOT NULL
) WITHOUT ROWID
"""
_PAGE = 500
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
        except sqlite3.DatabaseError as exc:
            raise _failed("registry read failed", exc) from exc

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
        except sqlite3.DatabaseError as exc:
            raise _failed("registry read failed", exc) from exc
        return Item(key, bytes(row[0]), row[1]) if row else None

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        check_keys(keys)
        if not keys:
            return []
        try:
            with self._conn() as conn:
                # One statement reads one snapshot (WAL): no writer's batch shows half-applied.
                rows = conn.execute(select_sql(len(keys)), keys).fetchall()
        except sqlite3.DatabaseError as exc:
            raise _failed("registry read failed", exc) from exc
        found = {key: Item(key, bytes(value), revision) for key, value, revision in rows}
        return [found.get(key) for key in keys]

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        check_ops(ops, self.max_transact_ops)
        return self.changes.write(ops, self._apply)

    def _apply(self, ops: Sequence[Op]) -> list[Item | None]:
        plan = Plan.of(ops)
        try:
            if len(ops) == 1:
                return self._run_one(plan)
            with self._tx() as conn:
                return plan.run(conn)
        except Missed:
            pass  # rolled back (or nothing changed): find out which condition failed
        # Name the first failing op in op order, as of one snapshot read now. Should that snapshot
        # show every condition holding (a concurrent writer changed a key in between), the batch
        # is run again, checked first under the write lock: it then applies, or fails on exactly
        # what that lock saw. Either is an outcome the call could have had.
        try:
            with self._conn() as conn:
                failure = first_failure(conn, ops)
        except sqlite3.DatabaseError as exc:
            raise _failed("registry read failed", exc) from exc
        if failure is not None:
            raise failure
        with self._tx() as conn:
            failure = first_failure(conn, ops)
            if failure is not None:
                raise failure
            return plan.run(conn)  # cannot miss: its conditions hold under this lock

    def _run_one(self, plan: Plan) -> list[Item | None]:
        """One op: one statement in autocommit mode, atomic on its own (no BEGIN, no COMMIT).
        The hot path, so no context managers (a generator one costs ~2.5 µs, about a BEGIN)."""
        conn = self._take()
        try:
            return plan.run(conn)
        except sqlite3.DatabaseError as exc:
            # The statement takes the write lock itself, where a batch's BEGIN IMMEDIATE would.
            raise _failed("registry is busy" if _busy(exc) else "registry write failed", exc) from exc
        finally:
            self._give(conn)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        return self._scan(prefix, _after_prefix(prefix), start_after, limit)

    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        if not check_range(start, stop):
            return iter(())
        return self._scan(start, stop, start_after, limit)

    def _scan(
        self, lower: str, upper: str | None, start_after: str | None, limit: int | None
    ) -> Iterator[Item]:
        """Keys from ``lower`` (inclusive) to ``upper`` (exclusive; None: no bound).

        TEXT keys in a UTF-8 database compare with memcmp (BINARY collation): the order of
        their UTF-8 bytes, the order DynamoDB uses. A key range (never a function of the key)
        is what lets SQLite walk the primary key from the page's start to its end: a scan
        reads what it yields, not the whole registry."""
        cursor = start_after if start_after is not None and start_after >= lower else None
        remaining = limit
        while remaining is None or remaining > 0:
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            low = cursor if cursor is not None else lower
            op = ">" if cursor is not None else ">="
            bound = "AND key < ? " if upper is not None else ""
            params = (low, upper, page) if upper is not None else (low, page)
            try:
                with self._conn() as conn:  # per page: an unfinished scan holds no connection
                    rows = conn.execute(
                        f"SELECT key, value, revision FROM kv WHERE key {op} ? {bound}ORDER BY key LIMIT ?",
                        params,
                    ).fetchall()
            except sqlite3.DatabaseError as exc:
                raise _failed("registry scan failed", exc) from exc
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
        except sqlite3.DatabaseError as exc:
            raise _failed("registry is busy", exc) from exc
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.DatabaseError as err:
                self._rollback()
                raise _failed("registry commit failed", err) from err
        else:
            self._rollback()
            if isinstance(exc, sqlite3.DatabaseError):
                raise _failed("registry write failed", exc) from exc

    def _rollback(self) -> None:
        # A full disk or an I/O error can make SQLite roll the transaction back itself; a
        # ROLLBACK then fails ("no transaction is active") and would hide the cause. Should the
        # ROLLBACK itself fail, the connection stays in its transaction and the pool closes it
        # (closing rolls back), so nothing half-written can commit later.
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")


def _after_prefix(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    if not stripped:
        return None
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


def _failed(what: str, exc: sqlite3.DatabaseError) -> LakeError:
    """``exc`` as the typed error: trouble that passes (a lock held too long, a full disk, an
    I/O error) is ServiceUnavailable; a file SQLite finds malformed (any other DatabaseError) is
    Internal, which no retry mends."""
    if isinstance(exc, sqlite3.OperationalError):
        return ServiceUnavailable(f"{what}: {exc}")
    return Internal(f"{what}: the registry database is damaged: {exc}")


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """The busy timeout ran out waiting for another connection's lock ("database is locked")."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

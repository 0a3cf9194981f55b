"""The MetaStore contract: a strongly consistent key-value store with conditional writes.

Every value carries a *revision*: 1 when first written, +1 on every change. Revision 0 means
"absent", so one compare-and-swap covers create (expect 0), update (expect n) and, through
:class:`Delete`, delete. Backends (SQLite, DynamoDB) implement exactly this and pass one shared
contract suite (``lake_platform_tests/registry/test_contract.py``).
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lake_platform.errors import InvalidInput
from lake_platform.observability.hooks import observe_registry

ABSENT = 0
#: The most operations DynamoDB applies atomically (its TransactWriteItems limit).
BATCH_OPS = 100
#: The most operations one ``transact`` may carry on DynamoDB, and so on every backend (a
#: backend's own ``max_transact_ops`` is never lower): one slot of a batch is the change record
#: the store adds when the batch writes a catalog record (``registry.changes``).
MAX_TRANSACT_OPS = BATCH_OPS - 1
MAX_KEY_BYTES = 1024


@dataclass(frozen=True)
class Item:
    key: str
    value: bytes
    revision: int


@dataclass(frozen=True)
class Put:
    """Write ``value`` at ``key`` if its revision is ``expected`` (ABSENT: must not exist).

    ``expected=None`` writes unconditionally.
    """

    key: str
    value: bytes
    expected: int | None = ABSENT


@dataclass(frozen=True)
class Delete:
    """Delete ``key`` if its revision is ``expected``."""

    key: str
    expected: int


@dataclass(frozen=True)
class Check:
    """Write nothing; fail the batch unless ``key`` is at revision ``expected`` (ABSENT allowed)."""

    key: str
    expected: int


Op = Put | Delete | Check


class MetaStore(ABC):
    """Strongly consistent, conditional key-value store. Keys are strings, values bytes.

    A failed condition raises :class:`~lake_platform.errors.ConditionFailed` and writes
    nothing. Transient backend trouble raises ServiceUnavailable or Throttling.
    """

    #: A short, stable description for logs and for Lance's namespace id (no secrets).
    url: str
    #: The backend's name in metrics (lake_registry_operations_total{backend=...}).
    backend: str = "other"
    #: The most operations one ``transact`` takes on this backend (its change record aside):
    #: DynamoDB's one TransactWriteItems bounds it there; SQLite's one transaction barely does.
    max_transact_ops: int = MAX_TRANSACT_OPS
    #: The most bytes one ``transact`` carries on this backend, as ``op_bytes`` weighs its ops
    #: (DynamoDB: one TransactWriteItems' 4 MB, its change record's share included); None: only
    #: ``max_transact_ops`` bounds a batch.
    max_transact_bytes: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every backend's I/O is counted and timed (observability.metrics) without each backend
        # repeating it: its own get/transact/scans are wrapped once, at class creation.
        super().__init_subclass__(**kwargs)
        timed = (
            ("get", _timed_call),
            ("get_many", _timed_call),
            ("transact", _timed_call),
            ("scan_prefix", _timed_scan),
            ("scan_range", _timed_scan),
        )
        for name, wrap in timed:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "_lake_timed", False):
                setattr(cls, name, wrap(name, method))

    @abstractmethod
    def get(self, key: str) -> Item | None:
        """Strongly consistent read of one key."""

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        """Strongly consistent reads of distinct ``keys``, in their order (None: absent).

        Backends answer in one request, as one snapshot: the callers that read a record and
        what it points to together (a write's table and its parent, or its current version)
        pay one round trip instead of two. This fallback reads one key at a time."""
        check_keys(keys)
        return [self.get(key) for key in keys]

    @abstractmethod
    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        """Apply every op atomically if every condition holds, else none of them.

        Returns, per op, the item as written (Put), or None (Delete, Check). Keys must be
        distinct within one batch, and a batch holds at most ``max_transact_ops`` ops. A batch that
        writes a catalog record (``registry.changes.WATCHED``) also records the change in the
        registry's change feed, in the same atomic write.
        """

    @abstractmethod
    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        """Yield items whose key starts with ``prefix``, in ascending key order (byte order of
        the UTF-8 key), strongly consistent, paging internally to the end (or ``limit``)."""

    @abstractmethod
    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        """Yield items whose key is at least ``start`` and below ``stop`` (nothing when ``stop``
        is not above ``start``), with ``scan_prefix``'s order, consistency and paging.

        Adjacent prefixes are one range: ``x.`` and ``x/`` (bytes 0x2E, 0x2F) are the keys
        from ``x.`` up to ``x0`` (``keys.nested_and_own``), which a backend reads with one
        condition where two prefix scans made two requests per partition."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def op_bytes(self, op: Op) -> int:
        """What ``op`` weighs against ``max_transact_bytes`` (a backend without it: nothing)."""
        return 0

    def check_record(self, key: str, value: bytes) -> None:  # noqa: B027 - optional limit
        """Refuse (``RecordTooLarge``) a record this backend could not store, so a caller can
        learn it before writing anything else for it; a backend without a limit takes any."""

    # Single-key conveniences, all expressed through ``transact`` so backends need not repeat
    # the condition logic; backends may override them with a cheaper native call.

    def put_if_absent(self, key: str, value: bytes) -> Item:
        item = self.transact([Put(key, value, ABSENT)])[0]
        assert item is not None
        return item

    def compare_and_swap(self, key: str, expected: int, value: bytes) -> Item:
        item = self.transact([Put(key, value, expected)])[0]
        assert item is not None
        return item

    def compare_and_delete(self, key: str, expected: int) -> None:
        self.transact([Delete(key, expected)])

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_ops(ops: Sequence[Op], limit: int = MAX_TRANSACT_OPS) -> None:
    """Validate a batch the same way on every backend; ``limit``: the backend's
    ``max_transact_ops``."""
    if not ops:
        raise InvalidInput("transact needs at least one operation")
    if len(ops) > limit:
        raise InvalidInput(f"transact takes at most {limit} operations, got {len(ops)}")
    keys = [op.key for op in ops]
    if len(set(keys)) != len(keys):
        raise InvalidInput("transact keys must be distinct within one batch")
    for key in keys:
        check_key(key)


def pack(costs: Sequence[tuple[int, int]], max_ops: int, max_bytes: int | None) -> list[list[int]]:
    """Groups of ops that must be written together (each one's count and bytes, ``op_bytes``
    summed), packed in order into batches of at most ``max_ops`` ops and ``max_bytes`` bytes
    (None: any): each batch as its groups' places. A group over a limit alone is a batch of its
    own, which the store refuses, typed."""
    batches: list[list[int]] = []
    ops = size = 0
    for at, (count, nbytes) in enumerate(costs):
        over = ops + count > max_ops or (max_bytes is not None and size + nbytes > max_bytes)
        if not batches or over:
            batches.append([])
            ops = size = 0
        batches[-1].append(at)
        ops, size = ops + count, size + nbytes
    return batches


def cost(store: MetaStore, ops: Sequence[Op]) -> tuple[int, int]:
    """``ops``' count and weight on ``store``, as ``pack`` takes them."""
    return len(ops), sum(store.op_bytes(op) for op in ops)


def fits(store: MetaStore, ops: Sequence[Op], max_ops: int | None = None) -> bool:
    """Whether ``store.transact`` takes ``ops`` as one batch (of at most ``max_ops``, when less
    than the store's own)."""
    limit = min(max_ops or store.max_transact_ops, store.max_transact_ops)
    count, nbytes = cost(store, ops)
    return count <= limit and (store.max_transact_bytes is None or nbytes <= store.max_transact_bytes)


#: The most keys one ``get_many`` may read (DynamoDB's TransactGetItems limit).
MAX_GET_KEYS = 100


def get_all(store: MetaStore, keys: Sequence[str]) -> list[Item | None]:
    """``store.get_many`` of any number of distinct keys, ``MAX_GET_KEYS`` a request (each
    request is consistent in itself, not with the others)."""
    out: list[Item | None] = []
    for at in range(0, len(keys), MAX_GET_KEYS):
        out += store.get_many(list(keys[at : at + MAX_GET_KEYS]))
    return out


def check_keys(keys: Sequence[str]) -> None:
    """Validate a ``get_many`` the same way on every backend."""
    if isinstance(keys, str) or len(keys) > MAX_GET_KEYS:
        raise InvalidInput(f"get_many takes a sequence of at most {MAX_GET_KEYS} keys")
    if len(set(keys)) != len(keys):
        raise InvalidInput("get_many keys must be distinct")
    for key in keys:
        check_key(key)


def check_range(start: str, stop: str) -> bool:
    """Validate a ``scan_range``'s bounds the same way on every backend (both are key-shaped);
    False: the range is empty."""
    check_key(start)
    check_key(stop)
    return start < stop


def check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidInput(f"invalid registry key {key!r}")


def _timed_call(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(self: MetaStore, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        outcome = "ok"
        try:
            return method(self, *args, **kwargs)
        except BaseException as exc:
            outcome = type(exc).__name__
            raise
        finally:
            observe_registry(self.backend, name, outcome, time.perf_counter() - started)

    timed._lake_timed = True  # type: ignore[attr-defined]
    return timed


def _timed_scan(name: str, method: Callable[..., Iterator[Item]]) -> Callable[..., Iterator[Item]]:
    @functools.wraps(method)
    def timed(self: MetaStore, *args: Any, **kwargs: Any) -> Iterator[Item]:
        # Only the time spent producing items counts, not the caller's between them.
        items = method(self, *args, **kwargs)
        spent, outcome = 0.0, "ok"
        try:
            while True:
                started = time.perf_counter()
                try:
                    item = next(items)
                except StopIteration:
                    spent += time.perf_counter() - started
                    return
                spent += time.perf_counter() - started
                yield item
        except GeneratorExit:
            raise
        except BaseException as exc:
            outcome = type(exc).__name__
            raise
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
            observe_registry(self.backend, name, outcome, spent)

    timed._lake_timed = True  # type: ignore[attr-defined]
    return timed

"""Which DynamoDB partition holds a registry key, under each item layout (no I/O here).

Layout 1 (legacy): the partition key ``p`` is the key's first ``/``-segment, the record kind. Every
version record, table record, commit-log entry and commit marker of the whole lake then shares a
handful of partitions, so one partition's write throughput caps the lake's commit rate.

Layout 2 (current): each hot record kind is spread by the *group* that its scans select on, the
first ``n`` segments after the kind:

- ``ver`` (version records) and ``lse`` (write leases): one partition per table incarnation,
  ``ver/<incarnation>``. ``scan_prefix(keys.versions(inc))`` is one Query.
- ``tbl``, ``log``, ``cid``, ``trs``, ``rpt``: ``BUCKETS`` partitions per kind, ``tbl#07``, chosen
  by a stable hash of the group (the table name, the log target...). A prefix that pins the group
  (``keys.log_prefix(target)``) is one Query; a wider one (``keys.tables_under(...)``) queries every
  bucket of the kind and merges them in key order.
- ``chg`` (the change feed): one partition per feed shard, ``chg/r/<shard>``.
- Every other kind (projects, warehouses, namespaces, users, tokens, policies) is small and rarely
  written: it stays where layout 1 put it, so migrating never moves it.

A prefix that spans unbounded partitions (``ver/`` without an incarnation) or has no ``/`` falls
back to a consistent Scan; no registry code path scans that way.

The layout in force is recorded in one item (``LAYOUT_KEY``), whose partition no key can map to
(every partition ``partition_of`` makes is either a key's first segment, which the item's sort key
never equals, or contains ``/`` or ``#`` after a kind).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

LEGACY = "1"
FROZEN = "frozen"  # a migration is copying layout-1 items: reads use layout 1, writes wait
CURRENT = "2"

BUCKETS = 16
#: kind -> (segments in the group, bucketed); bucketed=False means one partition per group.
_SPREAD: dict[str, tuple[int, bool]] = {
    "ver": (1, False),
    "lse": (1, False),
    "tbl": (4, True),
    "log": (1, True),
    "cid": (1, True),
    "trs": (1, True),
    "rpt": (2, True),
    # The change feed (registry.changes): one partition per shard, ``chg/r/<shard>``, so the
    # feed's writes spread as its shards do and a shard's ring is one Query.
    "chg": (2, False),
}

LAYOUT_P = "#meta"
LAYOUT_K = "#layout"
LAYOUT_KEY = {"p": {"S": LAYOUT_P}, "k": {"S": LAYOUT_K}}


def partition_v1(key: str) -> str:
    # Key attributes may not be empty strings, so a leading "/" gets a partition of its own.
    return key.split("/", 1)[0] or "/"


def _bucket(group: str) -> int:
    # A stable hash (never Python's salted hash()): every process must agree.
    return int.from_bytes(hashlib.blake2b(group.encode(), digest_size=4).digest(), "big") % BUCKETS


def _partition_for(kind: str, group: str) -> str:
    _, bucketed = _SPREAD[kind]
    return f"{kind}#{_bucket(group):02d}" if bucketed else f"{kind}/{group}"


def partition_of(key: str) -> str:
    """Layout 2's partition of ``key``."""
    kind, sep, rest = key.partition("/")
    if not sep or kind not in _SPREAD:
        return partition_v1(key)
    n, _ = _SPREAD[kind]
    parts = rest.split("/")
    return _partition_for(kind, "/".join(parts[:n]))


def scan_partitions(prefix: str) -> list[str] | None:
    """Layout 2's partitions that may hold keys starting with ``prefix``, or None when only a
    Scan can find them (no ``/``, or an unbounded kind whose group the prefix leaves open)."""
    kind, sep, rest = prefix.partition("/")
    if not sep:
        return None
    if kind not in _SPREAD:
        return [partition_v1(prefix)]
    n, bucketed = _SPREAD[kind]
    parts = rest.split("/")
    if len(parts) > n:  # the group is whole: every matching key lives in its partition
        return [_partition_for(kind, "/".join(parts[:n]))]
    if bucketed:
        return [f"{kind}#{b:02d}" for b in range(BUCKETS)]
    return None


def partitioner(layout: str) -> Callable[[str], str]:
    return partition_of if layout == CURRENT else partition_v1


def moves(key: str) -> bool:
    """Whether migrating to layout 2 moves ``key`` (its partition changes)."""
    return partition_of(key) != partition_v1(key)

"""``scan_prefix`` and ``scan_range`` on DynamoDB: a prefix's (a key range's) items in key order,
read in pages.

A ``Span`` is what a scan reads: a prefix (``begins_with``) or a range (``BETWEEN`` its bounds,
the upper bound itself dropped here, as DynamoDB's BETWEEN includes it). A range is placed by
the prefix its bounds share: every key in it starts with that. One Query when the span pins the
partition, else a lazy key-ordered merge of the kind's layout-2 buckets, else (no ``/``, or an
unbounded kind left open) a consistent Scan filtered to the items at their home partition and
sorted here. Each page is fetched before it is yielded, so
``DynamoMetaStore``'s scans can confirm the layout it was read in before passing it on.

A merge needs every bucket's first key before it can yield its first item, so it reads the
buckets' first pages at once, one Query per bucket from a small thread pool (botocore clients are
thread-safe): a listing waits for one round trip, not sixteen in a row. Each bucket's later pages
(over 500 items, or 1 MB) are read when the merge reaches them, as a sequential merge reads them:
the same requests, so a bounded listing never reads a page it does not use.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from os.path import commonprefix
from typing import Any

from lake_platform.registry.dynamodb_items import Raw, item_of
from lake_platform.registry.dynamodb_layout import (
    BUCKETS,
    CURRENT,
    partition_v1,
    partitioner,
    scan_partitions,
)
from lake_platform.registry.dynamodb_retry import Sleep, retried_read
from lake_platform.registry.store import Item

_PAGE = 500
#: Buckets read at once by a merge: all of a kind's. The store's client keeps as many
#: connections, so none is opened and dropped per listing.
FETCHERS = BUCKETS


@dataclass(frozen=True)
class Span:
    """The keys a scan reads: those starting with ``start`` (``stop`` None), or those from
    ``start`` up to, not including, ``stop``."""

    start: str
    stop: str | None = None

    @property
    def prefix(self) -> str:
        """What every key of the span starts with: where its partitions are found."""
        return self.start if self.stop is None else commonprefix([self.start, self.stop])

    def holds(self, key: str) -> bool:
        if self.stop is None:
            return key.startswith(self.start)
        return self.start <= key < self.stop

    def past(self, key: str) -> bool:
        """Whether ``key`` sorts after every key of the span."""
        if self.stop is None:
            return key >= self.start and not key.startswith(self.start)
        return key >= self.stop

    def condition(self) -> tuple[str, dict[str, Any]]:
        """The span as a condition on ``k`` and its values (a range's includes ``stop``)."""
        if self.stop is None:
            return "begins_with(k, :lo)", {":lo": {"S": self.start}}
        return "k BETWEEN :lo AND :hi", {":lo": {"S": self.start}, ":hi": {"S": self.stop}}


def key_ordered_pages(
    client: Any,
    table: str,
    span: Span,
    start_after: str | None,
    limit: int | None,
    layout: str,
    sleep: Sleep,
) -> Iterator[Iterable[Item]]:
    """The items of ``table`` in ``span`` after ``start_after`` (at most ``limit``), in key
    order, in pages, as stored in ``layout``; ``sleep`` waits between a page read's attempts."""
    prefix = span.prefix
    if "/" not in prefix:
        yield _scan_all(client, table, span, start_after, limit, layout, sleep)
        return
    if start_after is not None and span.past(start_after):
        return  # start_after sorts after every key of the span
    if start_after is not None and start_after < span.start:
        start_after = None
    partitions = [partition_v1(prefix)] if layout != CURRENT else scan_partitions(prefix)
    if partitions is None:
        yield _scan_all(client, table, span, start_after, limit, layout, sleep)
    elif len(partitions) == 1:
        yield from _query_pages(client, table, partitions[0], span, start_after, limit, sleep)
    else:
        # Layout 2 only (never re-checked): merge the buckets lazily in key order.
        streams = _bucket_streams(client, table, partitions, span, start_after, limit, sleep)
        yield heapq.merge(*streams, key=lambda item: item.key)


def _bucket_streams(
    client: Any,
    table: str,
    partitions: list[str],
    span: Span,
    start_after: str | None,
    limit: int | None,
    sleep: Sleep,
) -> list[Iterator[Item]]:
    """Each partition's items in key order: its first page read now, all at once (a failed read
    raises here, the first partition's in order first); its later pages when they are reached."""

    def first(partition: str) -> tuple[list[Item], Raw | None]:
        return _query_page(client, table, partition, span, _start_key(partition, start_after), limit, sleep)

    with ThreadPoolExecutor(max_workers=min(FETCHERS, len(partitions))) as pool:
        firsts = list(pool.map(first, partitions))
    return [
        itertools.chain.from_iterable(_query_pages(client, table, p, span, None, limit, sleep, page))
        for p, page in zip(partitions, firsts, strict=True)
    ]


def _start_key(partition: str, start_after: str | None) -> Raw | None:
    # ExclusiveStartKey need not exist; it only has to satisfy the key condition.
    return None if start_after is None else {"p": {"S": partition}, "k": {"S": start_after}}


def _query_pages(
    client: Any,
    table: str,
    partition: str,
    span: Span,
    start_after: str | None,
    limit: int | None,
    sleep: Sleep,
    first: tuple[list[Item], Raw | None] | None = None,
) -> Iterator[list[Item]]:
    """``partition``'s pages; ``first``: its first page, already read (then ``start_after`` is
    not used)."""
    start = _start_key(partition, start_after)
    remaining = limit
    while True:
        if first is None:
            page, start = _query_page(client, table, partition, span, start, remaining, sleep)
        else:
            (page, start), first = first, None
        if page:
            yield page
        if remaining is not None:
            remaining -= len(page)
            if remaining <= 0:
                return
        if start is None:
            return


def _query_page(
    client: Any,
    table: str,
    partition: str,
    span: Span,
    start: Raw | None,
    limit: int | None,
    sleep: Sleep,
) -> tuple[list[Item], Raw | None]:
    """One Query: a page of at most ``limit`` items from ``start``, and where the next begins
    (None: the partition has no more). A range's page may come one short: a key equal to its
    ``stop`` (BETWEEN's upper end) is dropped, and it can only be the partition's last."""
    condition, values = span.condition()
    params: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": f"p = :p AND {condition}",
        "ExpressionAttributeValues": {":p": {"S": partition}, **values},
        "ConsistentRead": True,
        "Limit": _PAGE if limit is None else min(_PAGE, limit),
    }
    if start is not None:
        params["ExclusiveStartKey"] = start
    resp = retried_read(functools.partial(client.query, **params), table, sleep)
    items = [item_of(raw) for raw in resp.get("Items", [])]
    return [i for i in items if i.key != span.stop], resp.get("LastEvaluatedKey")


def _scan_all(
    client: Any,
    table: str,
    span: Span,
    start_after: str | None,
    limit: int | None,
    layout: str,
    sleep: Sleep,
) -> list[Item]:
    # A prefix without "/" (or a layout-2 prefix leaving an incarnation open) spans
    # partitions; no registry code path scans that way, so a full consistent Scan sorted
    # here is acceptable as the slow, correct fallback. Items not at their home partition in
    # ``layout`` (a migration's copies, the layout item) are not registry keys.
    part = partitioner(layout)
    params: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    if span.start:
        params["FilterExpression"], params["ExpressionAttributeValues"] = span.condition()
    found: list[Item] = []
    while True:
        resp = retried_read(lambda: client.scan(**params), table, sleep)
        found.extend(
            item_of(raw)
            for raw in resp.get("Items", [])
            if raw["p"]["S"] == part(raw["k"]["S"]) and span.holds(raw["k"]["S"])
        )
        if "LastEvaluatedKey" not in resp:
            break
        params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
    found.sort(key=lambda item: item.key.encode())
    if start_after is not None:
        found = [item for item in found if item.key.encode() > start_after.encode()]
    return found[:limit]

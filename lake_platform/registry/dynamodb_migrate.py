"""``lake registry migrate``: move a DynamoDB registry from item layout 1 to layout 2.

Layout 1 keeps every record of one kind in one partition; layout 2 spreads the hot kinds
(``dynamodb_layout``). The move is four steps, each idempotent, driven by the layout item, so a
crashed or interrupted run is finished by running the command again:

1. **freeze** (layout 1 -> FROZEN, a conditional put). Every layout-1 write carries a condition on
   the layout item, so from this moment no write can land; writers get a retryable
   ServiceUnavailable. Reads go on, from the layout-1 items, which no longer change.
2. **copy**: one consistent Scan deletes any layout-2 copies a previous, interrupted run left,
   a second copies every item whose partition changes, with its value, revision and writer id
   (so a writer resolving an unknown outcome still finds its own write).
3. **switch** (FROZEN -> layout 2, conditional). Layout-1 readers confirm the layout after every
   read, see the switch and re-read from the copies; writes resume, in layout 2.
4. **clean up**: delete the layout-1 originals (no reader looks at them any more).

Writes stall from step 1 to step 3 (two Scans and the copy); reads never stall.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lake_platform.errors import ServiceUnavailable
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_errors import translate
from lake_platform.registry.dynamodb_layout import (
    CURRENT,
    FROZEN,
    LAYOUT_P,
    LEGACY,
    partition_of,
    partition_v1,
)

_BATCH = 25  # BatchWriteItem's limit
_BATCH_ATTEMPTS = 8


@dataclass
class MigrationReport:
    layout_before: str
    layout_after: str
    copied: int = 0
    stale_copies_removed: int = 0
    originals_removed: int = 0


def migrate(store: DynamoMetaStore, *, on_step: Callable[[str], None] = lambda _: None) -> MigrationReport:
    """Bring ``store``'s table to layout 2 (see the module docstring); safe to re-run."""
    before = store.layout(refresh=True)
    report = MigrationReport(before, before)
    if before == LEGACY:
        on_step("freeze: layout-1 writes now fail (retryable) until the switch")
        store.write_layout(FROZEN, expect=LEGACY)
    if store.layout(refresh=True) == FROZEN:
        on_step("copy: removing stale layout-2 copies")
        report.stale_copies_removed = _delete(store, _items(store, at_layout2=True), partition_of)
        on_step("copy: copying layout-1 items to their layout-2 partitions")
        report.copied = _copy(store)
        on_step("switch: layout 2 in force, writes resume")
        store.write_layout(CURRENT, expect=FROZEN)
    on_step("clean up: removing layout-1 originals")
    report.originals_removed = _delete(store, _items(store, at_layout2=False), partition_v1)
    report.layout_after = store.layout(refresh=True)
    return report


def _items(store: DynamoMetaStore, *, at_layout2: bool) -> Iterator[dict[str, Any]]:
    """Raw items that sit at their layout-1 (or layout-2) home, for keys whose home moves."""
    params: dict[str, Any] = {"TableName": store.table, "ConsistentRead": True}
    while True:
        resp = _call(store, lambda: store.client.scan(**params))
        for raw in resp.get("Items", []):
            p, k = raw["p"]["S"], raw["k"]["S"]
            if p == LAYOUT_P or partition_of(k) == partition_v1(k):
                continue
            if p == (partition_of(k) if at_layout2 else partition_v1(k)):
                yield raw
        if "LastEvaluatedKey" not in resp:
            return
        params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _copy(store: DynamoMetaStore) -> int:
    # The Scan may meet the copies it makes; _items skips them (they sit at layout-2 homes).
    originals = _items(store, at_layout2=False)
    return _batch_write(
        store,
        ({"PutRequest": {"Item": {**raw, "p": {"S": partition_of(raw["k"]["S"])}}}} for raw in originals),
    )


def _delete(store: DynamoMetaStore, items: Iterator[dict[str, Any]], part: Callable[[str], str]) -> int:
    return _batch_write(
        store, ({"DeleteRequest": {"Key": {"p": {"S": part(r["k"]["S"])}, "k": r["k"]}}} for r in items)
    )


def _batch_write(store: DynamoMetaStore, requests: Iterable[dict[str, Any]]) -> int:
    done = 0
    for chunk in _chunks(requests, _BATCH):
        pending = {store.table: chunk}
        for _ in range(_BATCH_ATTEMPTS):
            resp = _call(store, lambda p=pending: store.client.batch_write_item(RequestItems=p))
            pending = resp.get("UnprocessedItems") or {}
            if not pending:
                break
        else:
            raise ServiceUnavailable("registry migration: DynamoDB kept items unprocessed; run it again")
        done += len(chunk)
    return done


def _chunks(items: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _call(store: DynamoMetaStore, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, (), store.table) from exc

"""One registry write on DynamoDB, and what it did: the request a batch of ops is sent as, and,
after it, the consistent reads that tell whether the call landed and at which revisions.

Every write carries the id of its logical call in ``w`` (``dynamodb_items``); after an unknown
outcome a Put carrying that id proves the whole batch landed (design invariant 5). The retry rule
that uses these is ``DynamoMetaStore.transact``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lake_platform.registry.dynamodb_items import (
    Raw,
    conditional_put,
    delete_request,
    item_of,
    transact_item,
    unconditional_put,
)
from lake_platform.registry.dynamodb_layout import CURRENT, LAYOUT_KEY, LEGACY, partitioner
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

#: Reads one key's raw item, consistently (None: absent).
RawGet = Callable[[str], Raw | None]


def write_once(client: Any, table: str, ops: Sequence[Op], write_id: str, layout: str) -> dict[str, Item]:
    """One request applying ``ops`` as the call ``write_id`` in ``layout``; returns the items it
    learned (unconditional single puts)."""
    if layout != CURRENT:
        part = partitioner(layout)
        client.transact_write_items(
            TransactItems=[transact_item(table, op, write_id, part) for op in ops] + [_layout_guard(table)],
            # Not the layout-2 token: a retry after the migration sends other items.
            ClientRequestToken=str(uuid.uuid5(uuid.NAMESPACE_OID, f"{write_id}/{layout}")),
        )
        return {}
    if len(ops) == 1 and not isinstance(ops[0], Check):
        # Single ops: a conditional single-item call is cheaper than a transaction.
        op = ops[0]
        if isinstance(op, Put) and op.expected is None:
            resp = client.update_item(**unconditional_put(table, op, write_id), ReturnValues="ALL_NEW")
            return {op.key: item_of(resp["Attributes"])}
        if isinstance(op, Put):
            client.put_item(**conditional_put(table, op, write_id))
        else:
            assert isinstance(op, Delete)
            client.delete_item(**delete_request(table, op))
        return {}
    client.transact_write_items(
        TransactItems=[transact_item(table, op, write_id) for op in ops],
        # Same token on every retry of this call: DynamoDB applies it at most once (10 min).
        ClientRequestToken=write_id,
    )
    return {}


def landed(get_raw: RawGet, ops: Sequence[Op], write_id: str) -> bool:
    """Consistent re-read: did the call ``write_id`` apply? Batches are atomic, so one Put
    carrying our id proves all of it landed."""
    puts = [op for op in ops if isinstance(op, Put)]
    for op in puts:
        raw = get_raw(op.key)
        if raw is not None and raw.get("w", {}).get("S") == write_id:
            return True
    if puts:
        return False
    # Deletes leave no id behind: all targets gone is the best available evidence.
    deletes = [op for op in ops if isinstance(op, Delete)]
    return bool(deletes) and all(get_raw(op.key) is None for op in deletes)


def results(get_raw: RawGet, ops: Sequence[Op], known: dict[str, Item]) -> list[Item | None]:
    """``transact``'s answer for ``ops`` that landed; ``known``: items the request returned."""
    found: list[Item | None] = []
    for op in ops:
        if not isinstance(op, Put):
            found.append(None)
        elif op.expected is not None:
            found.append(Item(op.key, op.value, op.expected + 1))
        elif op.key in known:
            found.append(known[op.key])
        else:
            # TransactWriteItems returns nothing, so read the revision back. Should a later
            # writer have replaced the item already, its (higher) revision is all we can know.
            raw = get_raw(op.key)
            revision = int(raw["r"]["N"]) if raw else ABSENT + 1
            found.append(Item(op.key, op.value, revision))
    return found


def _layout_guard(table: str) -> dict[str, Any]:
    """Fails a layout-1 write once a migration has frozen the table."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": LAYOUT_KEY,
            "ConditionExpression": "attribute_not_exists(k) OR s = :legacy",
            "ExpressionAttributeValues": {":legacy": {"S": LEGACY}},
        }
    }

"""A lease acquire or release whose answer is lost (DynamoDB on the suite's moto server): the
request landed, but every re-send and the store's read-back failed, so the call said
ServiceUnavailable. The record then names a holder of this very process that nobody holds; the
gate recognises it on its next acquire instead of waiting out the TTL behind its own live pid.
Faults go through the store's botocore event hooks, as in registry/test_dynamodb.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from lake_platform.catalog.gate import WriteGate
from lake_platform.errors import LeaseUnavailable, ServiceUnavailable
from lake_platform.registry import keys
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.records import LeaseRecord, decode
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.registry.dynamo_faults import apply, error_response
from lake_platform_tests.registry.dynamo_tables import fresh_store

INC = "inc0001"


@pytest.fixture
def store(dynamodb_url: str, tmp_path: Path) -> Iterator[DynamoMetaStore]:
    with fresh_store(dynamodb_url, tmp_path / "home", sleep=lambda _: None) as dynamo:
        yield dynamo


class LostAnswers:
    """``mode`` "lose": requests pass until the first write, which the server applies but which
    is answered 500, as is every request after it (re-sends, read-backs), unsent. "down": every
    request answered 500 unsent. None: all pass."""

    def __init__(self, store: DynamoMetaStore) -> None:
        self.mode: str | None = None
        self.applied = 0
        self._lost = False
        for operation in ("PutItem", "GetItem", "TransactWriteItems", "TransactGetItems", "Query"):
            store.events.register(f"before-send.dynamodb.{operation}", self._send)

    def set(self, mode: str | None) -> None:
        self.mode, self._lost = mode, False

    def _send(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        if self.mode is None:
            return None
        if self.mode == "lose" and not self._lost:
            target = request.headers["X-Amz-Target"]
            target = target.decode() if isinstance(target, bytes) else target
            if not target.endswith(("PutItem", "TransactWriteItems")):
                return None
            self._lost = True
            self.applied += 1
            apply(request)
        return error_response(request, 500, "InternalServerError")


def gate(store: DynamoMetaStore) -> WriteGate:
    return WriteGate(store, ttl=30.0, margin=5.0, wait=0.0, clock=ManualClock(), heartbeat=False)


def stored(store: DynamoMetaStore) -> LeaseRecord:
    item = store.get(keys.lease(INC))
    assert item is not None
    return decode(LeaseRecord, item.value, item.key)


def test_an_acquire_whose_answer_was_lost_does_not_block_the_next(store: DynamoMetaStore) -> None:
    writes = gate(store)
    lost = LostAnswers(store)
    lost.set("lose")
    with pytest.raises(ServiceUnavailable, match="outcome unknown"):
        writes.acquire(INC)
    lost.set(None)
    assert lost.applied == 1 and not stored(store).released  # it landed: held, by nobody
    lease = writes.acquire(INC)  # before: LeaseUnavailable until the 30 s TTL ran out
    assert lease.token == stored(store).token == 2
    writes.release(lease)
    assert stored(store).released


def test_a_release_whose_answer_was_lost_does_not_block_the_next_acquire(store: DynamoMetaStore) -> None:
    writes = gate(store)
    lost = LostAnswers(store)
    lease = writes.acquire(INC)
    lost.set("lose")
    writes.release(lease)  # the registry is away: the release says nothing
    lost.set(None)
    assert lost.applied == 1 and stored(store).released
    # One that did not land at all (the registry away before the request): the record still
    # names the holder as live, with this process's pid; this gate knows it let go of it.
    lease = writes.acquire(INC)
    lost.set("down")
    writes.release(lease)
    lost.set(None)
    assert not stored(store).released
    again = writes.acquire(INC)  # before: LeaseUnavailable until the TTL ran out
    assert again.token == lease.token + 1


def test_another_gate_still_waits_for_the_unknown_holder(store: DynamoMetaStore) -> None:
    """Only the gate whose call was lost knows nobody holds it: another waits for the deadline."""
    lost = LostAnswers(store)
    lost.set("lose")
    with pytest.raises(ServiceUnavailable):
        gate(store).acquire(INC)
    lost.set(None)
    with pytest.raises(LeaseUnavailable):
        gate(store).acquire(INC)

"""Two requests sent at once under one ``Idempotency-Key`` (``rest/idempotency.py``): both look
for the key's commit before either lands, so neither is refused there. The one that lands second
must not be answered with the first one's outcome unless it is the same request: with other rows
it is 422 (IdempotencyKeyReused) and its rows are not in the table; the same request twice is
answered twice with the one commit."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lake_platform.registry.store import Item, MetaStore, Op, Put
from lake_platform_tests.flight.helpers import CountingStore
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.test_idempotency import ipc, send, state

MARKERS = "cid/idem-"  # registry keys of the commits made under idempotency keys


class FirstCommitWaits(CountingStore):
    """The registry, except that the first commit under an idempotency key waits until another
    thread (another request) has looked for a key's commit: both requests then find none."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.looked = threading.Condition()
        self.lookers: set[int] = set()
        self.armed = False  # set once the table is made

    def get(self, key: str) -> Item | None:
        if key.startswith(MARKERS):
            with self.looked:
                self.lookers.add(threading.get_ident())
                self.looked.notify_all()
        return super().get(key)

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        if self.armed and any(isinstance(op, Put) and op.key.startswith(MARKERS) for op in ops):
            self.armed = False
            me = threading.get_ident()
            with self.looked:
                # A guard against a hang, not a synchronization: the other request's look
                # releases it, and a test that times out here fails.
                assert self.looked.wait_for(lambda: self.lookers - {me}, timeout=120)
        return super().transact(ops)


@pytest.fixture
def racing(tmp_path: Path) -> Iterator[tuple[RestLake, FirstCommitWaits]]:
    wrapped: list[FirstCommitWaits] = []

    def store(inner: MetaStore) -> FirstCommitWaits:
        wrapped.append(FirstCommitWaits(inner))
        return wrapped[0]

    for lake in start_rest_lake(tmp_path, store=store):
        assert send(lake, "create", "k-create", ipc([1, 2])).status_code == 200
        wrapped[0].armed = True
        yield lake, wrapped[0]


def both(lake: RestLake, *requests: tuple[Any, ...]) -> list[Any]:
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda r: send(lake, *r[:3], **r[3]), requests))


MERGE = {"on": "id", "when_not_matched_insert_all": "true"}


@pytest.mark.parametrize(
    ("first", "second", "ids"),
    [
        (("insert", "k-1", ipc([3]), {}), ("insert", "k-1", ipc([4]), {}), ([1, 2, 3], [1, 2, 4])),
        (
            ("delete", "k-2", None, {"predicate": "id = 1"}),
            ("delete", "k-2", None, {"predicate": "id = 2"}),
            ([2], [1]),
        ),
        (
            ("update", "k-3", None, {"updates": [["id", "id + 10"]], "predicate": "id = 1"}),
            ("update", "k-3", None, {"updates": [["id", "id + 10"]], "predicate": "id = 2"}),
            ([2, 11], [1, 12]),
        ),
        (
            ("merge_insert", "k-4", ipc([5]), MERGE),
            ("merge_insert", "k-4", ipc([6]), MERGE),
            ([1, 2, 5], [1, 2, 6]),
        ),
    ],
    ids=["insert", "delete", "update", "merge"],
)
def test_two_requests_at_once_under_one_key_land_one_and_refuse_the_other(
    racing: tuple[RestLake, FirstCommitWaits],
    first: tuple[Any, ...],
    second: tuple[Any, ...],
    ids: tuple[list[int], list[int]],
) -> None:
    lake, _ = racing
    answers = both(lake, first, second)
    assert sorted(a.status_code for a in answers) == [200, 422], [a.text for a in answers]
    assert state(lake) == (2, ids[0] if answers[0].status_code == 200 else ids[1])
    refused = next(a for a in answers if a.status_code == 422)
    assert "idempotency key" in refused.json()["detail"]


def test_the_same_request_twice_at_once_lands_once_and_answers_both(
    racing: tuple[RestLake, FirstCommitWaits],
) -> None:
    lake, _ = racing
    request = ("insert", "k-3", ipc([3]), {})
    answers = both(lake, request, request)
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert answers[0].json()["transaction_id"] == answers[1].json()["transaction_id"]
    assert state(lake) == (2, [1, 2, 3])


@pytest.mark.parametrize(
    ("first", "second", "ids"),
    [
        (
            ("delete", "k-5", None, {"predicate": "id > 5"}),
            ("delete", "k-5", None, {"predicate": "id > 6"}),
            ([1, 2], [1, 2]),
        ),
        (("insert", "k-6", ipc([]), {}), ("insert", "k-6", ipc([4]), {}), ([1, 2], [1, 2, 4])),
    ],
    ids=["deletes-of-nothing", "insert-of-nothing"],
)
def test_a_request_with_nothing_to_commit_and_another_at_once_under_one_key_answer_one(
    racing: tuple[RestLake, FirstCommitWaits],
    first: tuple[Any, ...],
    second: tuple[Any, ...],
    ids: tuple[list[int], list[int]],
) -> None:
    """A keyed request that commits nothing records its answer under the key (``no_ops``): the
    other request under the key, sent at the same time, is refused whichever lands first."""
    lake, _ = racing
    answers = both(lake, first, second)
    assert sorted(a.status_code for a in answers) == [200, 422], [a.text for a in answers]
    landed = ids[0] if answers[0].status_code == 200 else ids[1]
    assert state(lake) == (1 if landed == [1, 2] else 2, landed)

"""A Lance client's commit through the catalog in process (``LakeNamespace``): the idempotency
key a writer puts in its transaction properties makes a retried write land once."""

from __future__ import annotations

import lance  # the tests play the Lance client
import pytest

from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform_tests.catalog.conftest import EVENTS, Lake, rows

T = ".".join(EVENTS)


def write(lake: Lake, ids: list[int], key: str, mode: str = "append") -> None:
    location = lake.root
    lance.write_dataset(
        rows(ids).read_all(),
        namespace_client=LakeNamespace(lake.catalog),
        table_id=EVENTS,
        mode=mode,
        transaction_properties={"Idempotency-Key": key},
        storage_options=lake.settings.storage_options(location) or None,
    )


def ids(lake: Lake) -> list[int]:
    return sorted(lake.catalog.reads.open_table(T).dataset.to_table()["id"].to_pylist())


def test_a_write_retried_with_its_key_lands_once(lake: Lake) -> None:
    write(lake, [1], "first", mode="create")
    write(lake, [2, 3], "second")
    write(lake, [2, 3], "second")  # the retry: answered with the first outcome
    assert (lake.catalog.reads.open_table(T).version, ids(lake)) == (2, [1, 2, 3])
    write(lake, [2, 3], "third")  # another key is another commit
    assert ids(lake) == [1, 2, 2, 3, 3]


def test_the_key_reused_for_other_rows_commits_nothing(lake: Lake) -> None:
    write(lake, [1], "first", mode="create")
    write(lake, [2], "again")
    with pytest.raises(OSError):  # Lance reports the refusal (IdempotencyKeyReused) as its own error
        write(lake, [5, 6, 7], "again")
    assert (lake.catalog.reads.open_table(T).version, ids(lake)) == (2, [1, 2])

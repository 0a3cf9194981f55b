"""Two callers that pass one commit id at once: both look for the id's marker before either
lands, so neither is answered from it there. The one that commits second must not be told its
write landed when the other's did: with another write (other rows, another predicate) it is
CommitIdReused and nothing of it is in the table; the same write twice lands once and the
second is answered with it (``replayed``), except a write of rows, whose rows are never hashed:
refused too.

Driven deterministically in one thread: the second caller's registry runs the first caller's
whole write when it first looks for the id's marker, then answers what it read before (none)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.cli import cli
from lake_platform.errors import CommitIdReused
from lake_platform.registry import keys
from lake_platform.registry.store import Item, MetaStore
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.registry.wrapping import WrappedStore

T = "p.w.ns.t"
ID = "shared-commit-0001"
BY = Provenance(commit_id=ID)


class FirstLookupRaced(WrappedStore):
    """``inner``, except that the first lookup of ``ID``'s marker runs ``racer`` (the other
    caller's write, to its end) after reading, and answers what it read before the racer."""

    def __init__(self, inner: MetaStore, racer: Callable[[], object]) -> None:
        super().__init__(inner)
        self.racer: Callable[[], object] | None = racer

    def get(self, key: str) -> Item | None:
        item = self.inner.get(key)
        if key == keys.commit_marker(ID) and self.racer is not None:
            racer, self.racer = self.racer, None
            racer()
        return item


@pytest.fixture
def storage() -> dict[str, Any]:
    """Registry records decide it: the local warehouse is enough."""
    return {"root": None, "settings": {}}


@pytest.fixture
def table(lake: Lake) -> Lake:
    """``T`` with ids 1 and 2 at version 1, and a branch ``dev`` of it."""
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.branches.create_branch(T, "dev")
    return lake


def raced(lake: Lake, first: Callable[[Catalog], Any], second: Callable[[Catalog], Any]) -> Any:
    """``second`` by a catalog whose first look for ``ID`` lets ``first`` (another catalog's
    write under the same id) land; ``first``'s answer and ``second``'s answer (or error)."""
    answers: list[Any] = []
    racer = lake.new_catalog()
    loser = Catalog(lake.settings, FirstLookupRaced(racer.store, lambda: answers.append(first(racer))))
    try:
        try:
            answers.append(second(loser))
        except CommitIdReused as exc:
            answers.append(exc)
    finally:
        loser.close()
        racer.close()
    return answers


def main_ids(lake: Lake) -> list[int]:
    return ids_of(lake.catalog.reads.open_table(T))


def dev_ids(lake: Lake) -> list[int]:
    return ids_of(lake.catalog.branches.open_branch(T, "dev"))


def ops_logged(lake: Lake) -> list[str]:
    return [e.operation for e in lake.catalog.reads.log(T)]


CASES = {
    "append": (
        lambda c: c.tables.append(T, rows([3]), by=BY),
        lambda c: c.tables.append(T, rows([4]), by=BY),
        main_ids,
        [1, 2, 3],
    ),
    "delete": (
        lambda c: c.tables.delete_rows(T, "id = 1", by=BY),
        lambda c: c.tables.delete_rows(T, "id = 2", by=BY),
        main_ids,
        [2],
    ),
    "update": (
        lambda c: c.rows.update_rows(T, {"id": "id + 10"}, "id = 1", by=BY),
        lambda c: c.rows.update_rows(T, {"id": "id + 10"}, "id = 2", by=BY),
        main_ids,
        [2, 11],
    ),
    "branch-append": (
        lambda c: c.branch_writes.append(T, "dev", rows([3]), by=BY),
        lambda c: c.branch_writes.append(T, "dev", rows([4]), by=BY),
        dev_ids,
        [1, 2, 3],
    ),
    "branch-delete": (
        lambda c: c.branch_changes.delete_rows(T, "dev", "id = 1", by=BY),
        lambda c: c.branch_changes.delete_rows(T, "dev", "id = 2", by=BY),
        dev_ids,
        [2],
    ),
    "branch-update": (
        lambda c: c.branch_changes.update_rows(T, "dev", {"id": "id + 10"}, "id = 1", by=BY),
        lambda c: c.branch_changes.update_rows(T, "dev", {"id": "id + 10"}, "id = 2", by=BY),
        dev_ids,
        [2, 11],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_another_write_under_a_commit_id_landing_meanwhile_is_refused(table: Lake, case: str) -> None:
    first, second, ids, landed = CASES[case]
    before = len(ops_logged(table))
    answer, refusal = raced(table, first, second)
    assert isinstance(refusal, CommitIdReused), refusal
    assert ID in refusal.message and "nothing of this one was committed" in refusal.message
    assert ids(table) == landed
    assert len(ops_logged(table)) == before + 1  # the first write's entry only


#: Writes of rows: their rows are never hashed, so the same one sent twice at once is refused.
OF_ROWS = ("append", "branch-append")


@pytest.mark.parametrize("case", [c for c in CASES if c not in OF_ROWS])
def test_the_same_write_sent_twice_at_once_lands_once_and_answers_both(table: Lake, case: str) -> None:
    first, _, ids, landed = CASES[case]
    before = len(ops_logged(table))
    answer, again = raced(table, first, first)
    assert not isinstance(again, Exception), again
    assert ids(table) == landed
    assert len(ops_logged(table)) == before + 1
    if hasattr(answer, "replayed"):  # a CommitResult (appends, deletes); a RowChange has none
        assert again.replayed and not answer.replayed
        assert (again.from_version, again.to_version) == (answer.from_version, answer.to_version)
        assert again.rows_added == answer.rows_added
    else:
        assert again == answer


def test_lake_ingest_landing_meanwhile_with_other_files_refuses_the_other(
    table: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lake ingest --commit-id`` lands first; a caller that looked for the id before it
    landed, appending other rows, is refused and its rows are not in the table."""
    monkeypatch.setenv("LAKE_HOME", str(table.settings.home))
    source = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "tag": ["x"]}), source)
    ingest = ["--json", "ingest", T, str(source), "--commit-id", ID]

    def cli_ingest(_: Catalog) -> Any:
        result = CliRunner().invoke(cli, ingest)
        assert result.exit_code == 0, result.output
        return result.output

    _, refusal = raced(table, cli_ingest, lambda c: c.tables.append(T, rows([4]), by=BY))
    assert isinstance(refusal, CommitIdReused), refusal
    assert main_ids(table) == [1, 2, 3]
    # The same files again under the id: a replay of what landed, nothing appended.
    again = CliRunner().invoke(cli, ingest)
    assert again.exit_code == 0 and '"replayed": true' in again.output, again.output
    assert main_ids(table) == [1, 2, 3]


def merge(c: Catalog) -> Any:
    return c.rows.merge_insert(T, rows([5]), ["id"], insert_unmatched=True, by=BY)


@pytest.mark.parametrize("case", [*OF_ROWS, "merge"])
def test_a_write_of_rows_sent_twice_at_once_is_refused_its_rows_never_hashed(table: Lake, case: str) -> None:
    """Rows go to Lance unhashed, so the commit that landed under the id cannot be told the same
    write: refused (never answered as landed), the first write's rows alone in; a retry after it
    landed is answered from it."""
    first, ids, landed = (
        (merge, main_ids, [1, 2, 5]) if case == "merge" else (CASES[case][0], *CASES[case][2:])
    )
    answer, refusal = raced(table, first, first)
    assert isinstance(refusal, CommitIdReused), refusal
    assert ids(table) == landed
    again = first(table.catalog)
    assert ids(table) == landed
    if hasattr(again, "replayed"):
        assert again.replayed

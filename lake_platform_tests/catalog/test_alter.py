"""Explicit schema changes (``lake table alter``): adding, dropping and renaming a column are
registry commits, logged; bad input, a protected table's drop, the last column and a role short of
the change are refused with nothing changed; an alter landing between an append's planning and
its lease refuses the append."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import (
    InvalidInput,
    InvalidTableState,
    TableColumnNotFound,
    TableSchemaValidationError,
)
from lake_platform_tests.catalog.conftest import Lake, sent_at_once, staged_manifests, state
from lake_platform_tests.catalog.schema_tables import T, base, current_schema, rows_of, seed, table


@pytest.fixture
def seeded(lake: Lake) -> Lake:
    return seed(lake)


# -- explicit changes: add, drop, rename ----------------------------------------------------------


def test_alter_add_drop_rename_are_registry_commits(seeded: Lake) -> None:
    v = seeded.catalog.reads.open_table(T).record.current_version
    added = seeded.catalog.alter.add_column(T, "note", "string", by=Provenance(actor="ops"))
    renamed = seeded.catalog.alter.rename_column(T, "note", "remark", by=Provenance(actor="ops"))
    dropped = seeded.catalog.alter.drop_column(T, "score", by=Provenance(actor="ops"))
    assert [r.to_version for r in (added, renamed, dropped)] == [v + 1, v + 2, v + 3]
    assert current_schema(seeded).names == ["id", "name", "remark"]
    assert seeded.catalog.reads.open_table(T).dataset.schema.names == ["id", "name", "remark"]
    log = [(e.operation, e.actor, e.detail) for e in seeded.catalog.reads.log(T)][-3:]
    assert log == [
        ("add-column", "ops", {"column": "note", "type": "string"}),
        ("rename-column", "ops", {"column": "note", "new_name": "remark"}),
        ("drop-column", "ops", {"column": "score"}),
    ]
    assert rows_of(seeded) == {"id": [1, 2], "name": ["a", "b"], "remark": [None, None]}
    # Time travel still sees the dropped column.
    assert "score" in seeded.catalog.reads.open_table(T, version=v).dataset.schema.names
    # And appends follow the new schema.
    seeded.catalog.tables.append(
        T, table(id=pa.array([3], pa.int32()), name=pa.array(["c"]), remark=pa.array(["r"]))
    )
    assert rows_of(seeded)["remark"] == [None, None, "r"]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.alter.add_column(T, "name", "string"), TableSchemaValidationError, "already exists"),
        (lambda c: c.alter.add_column(T, "n2", "varchar"), InvalidInput, "unknown column type"),
        (lambda c: c.alter.add_column(T, "", "string"), InvalidInput, "invalid column name"),
        (lambda c: c.alter.add_column(T, "a.b", "string"), InvalidInput, "nested"),
        (lambda c: c.alter.drop_column(T, "nope"), TableColumnNotFound, "no column nope"),
        (lambda c: c.alter.rename_column(T, "nope", "x"), TableColumnNotFound, "no column nope"),
        (lambda c: c.alter.rename_column(T, "id", "name"), TableSchemaValidationError, "already exists"),
        (lambda c: c.alter.rename_column(T, "id", " x"), InvalidInput, "invalid new column name"),
        (lambda c: c.alter.add_column("p.w.ns.missing", "x", "string"), Exception, "missing"),
    ],
)
def test_bad_alter_input_changes_nothing(seeded: Lake, call: object, error: type, match: str) -> None:
    before = state(seeded)
    with pytest.raises(error, match=match):
        call(seeded.catalog)  # type: ignore[operator]
    assert state(seeded) == before


def test_dropping_a_column_of_a_protected_table_is_refused(seeded: Lake) -> None:
    seeded.catalog.containers.set_protected(T)
    before = state(seeded)
    with pytest.raises(InvalidTableState, match="protected"):
        seeded.catalog.alter.drop_column(T, "score")
    assert state(seeded) == before
    seeded.catalog.alter.add_column(T, "note", "int64")  # adding hides nothing: allowed
    assert "note" in current_schema(seeded).names


def test_the_last_column_cannot_be_dropped(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, table(id=pa.array([1])))
    before = state(lake)
    with pytest.raises(TableSchemaValidationError, match="only column"):
        lake.catalog.alter.drop_column(T, "id")
    assert state(lake) == before


def test_an_alter_between_planning_and_the_lease_refuses_the_append(seeded: Lake) -> None:
    """The append was planned on the schema it read first; a column renamed by another writer
    before the append holds the lease makes it ConcurrentModification, with nothing written.
    Here the rename lands while the append, small and by the table's last writer, is tried
    under the unacquired lease (refused, nothing landed), before it takes the lease."""
    from lake_platform.errors import ConcurrentModification

    other = seeded.new_catalog()
    armed: list[bool] = []

    def someone_alters(point: str) -> None:
        if point == "append:before-write" and armed:
            armed.clear()
            other.alter.rename_column(T, "name", "label")

    writer = seeded.new_catalog(hook=someone_alters)
    try:
        writer.tables.append(T, base(3))  # the table's last writer now
        version = seeded.catalog.reads.open_table(T).record.current_version
        armed.append(True)
        with pytest.raises(ConcurrentModification, match="schema of p.w.ns.t changed"):
            writer.tables.append(T, base(4))
    finally:
        writer.close()
        other.close()
    assert not armed  # the rename happened where the test put it
    record = seeded.catalog.reads.open_table(T).record
    assert record.current_version == version + 1  # the rename only
    assert current_schema(seeded).names == ["id", "score", "label"]


def test_a_writer_may_add_a_column_but_not_drop_or_rename_one(seeded: Lake) -> None:
    from lake_platform.catalog.principals import Principal
    from lake_platform.errors import PermissionDenied

    writer = Principal(name="etl", kind="token", project="p", role="writer")
    reader = Principal(name="ana", kind="user", project="p", role="reader")
    before = state(seeded)
    with pytest.raises(PermissionDenied):
        seeded.catalog.alter.add_column(T, "note", "string", by=Provenance(principal=reader))
    with pytest.raises(PermissionDenied):
        seeded.catalog.alter.drop_column(T, "score", by=Provenance(principal=writer))
    with pytest.raises(PermissionDenied):
        seeded.catalog.alter.rename_column(T, "score", "points", by=Provenance(principal=writer))
    assert state(seeded) == before
    seeded.catalog.alter.add_column(T, "note", "string", by=Provenance(principal=writer))
    assert [e.actor for e in seeded.catalog.reads.log(T)][-1] == "etl"


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (
            lambda c, by: c.alter.add_computed_columns(T, {"twice": "id * 2"}, by=by),
            ["id", "score", "name", "twice"],
        ),
        (lambda c, by: c.alter.rename_columns(T, {"name": "label"}, by=by), ["id", "score", "label"]),
        (lambda c, by: c.alter.drop_columns(T, ["score"], by=by), ["id", "name"]),
    ],
)
def test_one_column_change_sent_twice_at_once_lands_once_and_both_answer_it(
    seeded: Lake, call: Callable[[Catalog, Provenance], object], names: list[str]
) -> None:
    """Two catalogs (two servers) given one commit id at once: whichever takes the lease second
    finds the first landed under the lease and answers it, instead of refusing a change already
    made (the column exists, or is gone) or making it again."""
    answers = sent_at_once(seeded, lambda c: call(c, Provenance(commit_id="sent-twice-0002")))
    assert len(answers) == 2 and all(isinstance(a, CommitResult) for a in answers), answers
    assert {(a.commit_id, a.to_version) for a in answers} == {("sent-twice-0002", 2)}  # type: ignore[union-attr]
    assert current_schema(seeded).names == names
    assert len(seeded.catalog.reads.log(T)) == 2
    assert staged_manifests(seeded) == []  # Lance ran it once

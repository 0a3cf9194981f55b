"""Branches of a table (issue 46): create, write, read, publish, the diverged refusal, delete,
undrop and purge, on real Lance datasets and a real registry (SQLite; DynamoDB via moto where
the registry contract matters)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import lance_engine as engine
from lake_platform.engine.storage import filesystem
from lake_platform.errors import (
    BranchDiverged,
    InvalidInput,
    PermissionDenied,
    Protected,
    TableBranchAlreadyExists,
    TableBranchNotFound,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.maintenance import orphans
from lake_platform.registry import keys
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state
from lake_platform_tests.catalog.faults import Background, Pause, ShiftedClock

T = "p.w.ns.t"


@pytest.fixture
def table(lake: Lake) -> Iterator[Lake]:
    """``T`` at version 2: ids 1, 2 then 3."""
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tables.append(T, rows([3]))
    yield lake


def files(lake: Lake) -> dict[str, int]:
    return {f.path: f.size for f in engine.list_files(lake.root, lake.settings.storage_options(lake.root))}


def log_ops(catalog: Catalog) -> list[tuple[str, object]]:
    return [(e.operation, e.detail.get("branch")) for e in catalog.reads.history(T)]


def test_creating_a_branch_copies_no_data_file_and_writes_at_most_a_manifest_and_a_ref(table: Lake) -> None:
    before = files(table)
    manifest = max(size for path, size in before.items() if path.endswith(".manifest"))
    info = table.catalog.branches.create_branch(T, "dev")
    new = {p: s for p, s in files(table).items() if p not in before}
    assert (info.version, info.parent, info.main_version) == (2, "main", 2)
    assert not [p for p in new if p.endswith(".lance")], "no data file is written"
    branch_manifests = [s for p, s in new.items() if p.endswith(".manifest")]
    assert len(branch_manifests) == 1
    # The manifest (main's plus a base path), the ref, Lance's transaction record and hint:
    # fixed-size extras of at most 1 KiB next to one manifest.
    assert sum(new.values()) <= branch_manifests[0] + 1024
    assert branch_manifests[0] <= manifest + 256
    assert {p for p, _ in before.items()} <= set(files(table))  # nothing of main's was touched


def test_branch_writes_never_move_main_and_each_line_reads_its_own_rows(table: Lake) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "dev")
    result = cat.branch_writes.append(T, "dev", rows([10]))
    assert (result.from_version, result.to_version) == (2, 3)
    main = cat.reads.open_table(T)
    assert (main.version, ids_of(main)) == (2, [1, 2, 3])
    assert ids_of(cat.branches.open_branch(T, "dev")) == [1, 2, 3, 10]
    assert ids_of(cat.branches.open_branch(T, "dev", 2)) == [1, 2, 3]
    # main writes on; the branch does not see them
    cat.tables.append(T, rows([4]))
    assert ids_of(cat.branches.open_branch(T, "dev")) == [1, 2, 3, 10]
    assert ids_of(cat.reads.open_table(T)) == [1, 2, 3, 4]
    assert ("append", "dev") in log_ops(cat) and ("branch-create", "dev") in log_ops(cat)


def test_publish_fast_forwards_main_in_one_logged_commit_and_main_writes_on(table: Lake) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "dev")
    cat.branch_writes.append(T, "dev", rows([10]))
    cat.branch_writes.append(T, "dev", rows([11]))
    published = cat.branch_publish.publish_branch(T, "dev")
    assert (published.from_version, published.to_version) == (2, 4)
    assert ids_of(cat.reads.open_table(T)) == [1, 2, 3, 10, 11]
    assert ids_of(cat.reads.open_table(T, 2)) == [1, 2, 3]  # main's older versions still read
    assert ids_of(cat.reads.open_table(T, 3)) == [1, 2, 3, 10]  # the branch's versions are main's
    entries = [e for e in cat.reads.history(T) if e.operation == "publish"]
    assert len(entries) == 1 and entries[0].detail["versions"] == [3, 4]
    # the next main write builds on the published head
    after = cat.tables.append(T, rows([5]))
    assert (after.from_version, after.to_version) == (4, 5)
    assert ids_of(cat.reads.open_table(T)) == [1, 2, 3, 5, 10, 11]
    # the branch was consumed: its name is free again
    assert cat.branches.list_branches(T) == []
    again = cat.branches.create_branch(T, "dev")
    assert again.main_version == 5
    cat.branch_writes.overwrite(T, "dev", rows([7]))
    cat.branch_publish.publish_branch(T, "dev")
    assert ids_of(cat.reads.open_table(T)) == [7]
    assert ids_of(cat.reads.open_table(T, 5)) == [1, 2, 3, 5, 10, 11]


def test_a_retried_create_or_publish_under_its_commit_id_lands_once(table: Lake) -> None:
    cat = table.catalog
    made = cat.branches.create_branch(T, "dev", by=Provenance(commit_id="make-branch-1"))
    assert cat.branches.create_branch(T, "dev", by=Provenance(commit_id="make-branch-1")) == made
    cat.branch_writes.append(T, "dev", rows([10]))
    first = cat.branch_publish.publish_branch(T, "dev", by=Provenance(commit_id="publish-branch-1"))
    again = cat.branch_publish.publish_branch(T, "dev", by=Provenance(commit_id="publish-branch-1"))
    assert again.replayed and (again.from_version, again.to_version) == (first.from_version, first.to_version)
    assert [e.operation for e in cat.reads.history(T)].count("publish") == 1


def test_publish_after_main_moved_is_refused_saying_what_moved_and_changes_nothing(table: Lake) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "dev")
    cat.branch_writes.append(T, "dev", rows([10]))
    cat.tables.append(T, rows([4]))
    before = list(cat.store.scan_prefix("tbl/")), list(cat.store.scan_prefix("brn/"))
    with pytest.raises(BranchDiverged) as refused:
        cat.branch_publish.publish_branch(T, "dev")
    assert "version 2" in refused.value.message and "version 3" in refused.value.message
    assert refused.value.http_status == 409 and refused.value.grpc_status == "ABORTED"
    assert (list(cat.store.scan_prefix("tbl/")), list(cat.store.scan_prefix("brn/"))) == before
    with pytest.raises(InvalidInput):
        cat.branches.create_branch(T, "fresh")
        cat.branch_publish.publish_branch(T, "fresh")  # nothing of its own


def test_branches_are_made_from_a_version_a_tag_or_another_branch(table: Lake) -> None:
    cat = table.catalog
    cat.tags.create_tag(T, "first", 1)
    assert cat.branches.create_branch(T, "old", from_version=1).version == 1
    assert ids_of(cat.branches.open_branch(T, "old")) == [1, 2]
    assert cat.branches.create_branch(T, "tagged", from_tag="first").parent_version == 1
    cat.branch_writes.append(T, "old", rows([20]))
    sub = cat.branches.create_branch(T, "sub", from_branch="old")
    assert (sub.parent, sub.parent_version, sub.main_version) == ("old", 2, 1)
    assert ids_of(cat.branches.open_branch(T, "sub")) == [1, 2, 20]
    assert [b.branch for b in cat.branches.list_branches(T)] == ["old", "sub", "tagged"]
    # Every answer about "sub" names its parent as the listing does (before: describe, undrop
    # and a replayed create named the parent's chain id).
    assert cat.branches.describe_branch(T, "sub")["parent"] == "old"
    again = Provenance(commit_id="branch-again-1")
    replayed = cat.branches.create_branch(T, "again", from_branch="old", by=again)
    assert cat.branches.create_branch(T, "again", from_branch="old", by=again) == replayed
    assert replayed.parent == "old"
    cat.branch_trash.delete_branch(T, "sub")
    assert cat.branch_trash.undrop_branch(T, "sub").parent == "old"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"branch": "main"}, InvalidInput),
        ({"branch": "Bad-Name"}, InvalidInput),
        ({"branch": "x", "from_version": 9}, TableVersionNotFound),
        ({"branch": "x", "from_version": 0}, InvalidInput),
        ({"branch": "x", "from_tag": "nope"}, TableTagNotFound),
        ({"branch": "x", "from_branch": "nope"}, TableBranchNotFound),
        ({"branch": "x", "from_tag": "t", "from_version": 1}, InvalidInput),
        ({"branch": "dev"}, TableBranchAlreadyExists),
    ],
)
def test_bad_branch_requests_are_typed_errors_that_change_nothing(
    table: Lake, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "dev")
    before = files(table), [(i.key, i.value) for i in cat.store.scan_prefix("")]
    with pytest.raises(error):
        cat.branches.create_branch(T, **kwargs)
    assert (files(table), [(i.key, i.value) for i in cat.store.scan_prefix("")]) == before


def test_delete_goes_to_the_trash_undrop_restores_and_expiry_purges_its_files(table: Lake) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "dev")
    cat.branch_writes.append(T, "dev", rows([10]))
    main_files = set(files(table))
    cat.branch_trash.delete_branch(T, "dev")
    with pytest.raises(TableBranchNotFound):
        cat.branches.open_branch(T, "dev")
    assert [b.state for b in cat.branches.list_branches(T, include_trashed=True)] == ["trashed"]
    cat.branch_trash.undrop_branch(T, "dev")
    assert ids_of(cat.branches.open_branch(T, "dev")) == [1, 2, 3, 10]
    cat.branch_trash.delete_branch(T, "dev")
    assert cat.branch_trash.expire_branches(now_ms=cat.clock.wall_ms()) == []  # grace not over
    purged = cat.branch_trash.expire_branches(now_ms=cat.clock.wall_ms() + 8 * 86400 * 1000)
    assert [r.operation for r in purged] == ["branch-purge"]
    left = set(files(table))
    assert not [p for p in left if "/tree/" in p or "/_refs/" in p]  # the branch's own files went
    assert {p for p in main_files if "/tree/" not in p and "/_refs/" not in p} <= left
    assert ids_of(cat.reads.open_table(T)) == [1, 2, 3]
    assert list(cat.store.scan_prefix(keys.branches_of(_tname()))) == []


def test_a_protected_tables_branches_are_deleted_only_with_force(table: Lake) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "dev")
    cat.containers.set_protected(T, kind="table")
    with pytest.raises(Protected):
        cat.branch_trash.delete_branch(T, "dev")
    cat.branch_trash.delete_branch(T, "dev", force=True)
    assert cat.branches.list_branches(T) == []


def test_a_writer_deletes_a_branch_into_the_trash_but_only_an_admin_purges_it(table: Lake) -> None:
    """Purging skips the trash's grace and destroys the branch's versions, as deleting versions
    does (admin); a writer's delete stays recoverable."""
    cat = table.catalog
    writer = Provenance(principal=Principal("etl", "token", "p", "writer"))
    cat.branches.create_branch(T, "dev")
    cat.branch_writes.append(T, "dev", rows([10]))
    before = [(i.key, i.value) for i in cat.store.scan_prefix("")]
    with pytest.raises(PermissionDenied, match="purge"):
        cat.branch_trash.delete_branch(T, "dev", purge=True, by=writer)
    assert [(i.key, i.value) for i in cat.store.scan_prefix("")] == before
    cat.branch_trash.delete_branch(T, "dev", by=writer)
    cat.branch_trash.undrop_branch(T, "dev", by=writer)
    assert ids_of(cat.branches.open_branch(T, "dev")) == [1, 2, 3, 10]


def test_a_branch_other_branches_build_on_keeps_its_files_until_they_are_gone(table: Lake) -> None:
    cat = table.catalog
    cat.branches.create_branch(T, "base")
    cat.branch_writes.append(T, "base", rows([10]))
    cat.branches.create_branch(T, "child", from_branch="base")
    cat.branch_trash.delete_branch(T, "base", purge=True)
    assert ids_of(cat.branches.open_branch(T, "child")) == [1, 2, 3, 10]  # shared files kept
    cat.branch_trash.delete_branch(T, "child", purge=True)
    purged = cat.branch_trash.expire_branches(now_ms=cat.clock.wall_ms())
    assert [r.operation for r in purged] == ["branch-purge"]
    assert cat.branches.list_branches(T, include_trashed=True) == []


def test_branches_on_dynamodb(tmp_path: Path, scale_out: tuple[LakeSettings, Catalog]) -> None:
    _, cat = scale_out
    cat.tables.create_table(T, rows([1]))
    cat.branches.create_branch(T, "dev")
    cat.branch_writes.append(T, "dev", rows([2]))
    assert ids_of(cat.reads.open_table(T)) == [1]
    cat.branch_publish.publish_branch(T, "dev")
    assert ids_of(cat.reads.open_table(T)) == [1, 2]
    cat.tables.append(T, rows([3]))
    assert ids_of(cat.reads.open_table(T)) == [1, 2, 3]


def _tname() -> Any:
    from lake_platform.naming import TableName

    return TableName.parse(T)


def test_a_branch_name_a_dropped_table_in_the_trash_still_has_is_not_taken_over(table: Lake) -> None:
    """Branch records are keyed by the table's name. A new table of a dropped table's name cannot
    make (or, by a rename or undrop, bring) a branch of the same name while the dropped one is
    in the trash: its record would replace the dropped table's, whose undrop then came back
    without that branch and whose orphan scan listed its Lance branch as unknown (a reclaim
    deletes those). Refused, nothing changed; once the dropped table is purged the name is free."""
    c = table.catalog
    c.branches.create_branch(T, "dev")
    c.branch_writes.append(T, "dev", rows([4]))
    first = c.reads.open_table(T).record
    c.trash.drop_table(T)
    c.tables.create_table("p.w.ns.other", rows([8]))
    c.branches.create_branch("p.w.ns.other", "dev")
    before = state(table)
    with pytest.raises(TableBranchAlreadyExists, match="in the trash"):
        c.renames.rename_table("p.w.ns.other", T)
    assert state(table) == before
    c.tables.create_table(T, rows([9]))
    before = state(table)
    with pytest.raises(TableBranchAlreadyExists, match="in the trash"):
        c.branches.create_branch(T, "dev")
    assert state(table) == before
    c.trash.drop_table(T, purge=True)
    c.trash.undrop_table(T, incarnation=first.incarnation)
    assert [b.branch for b in c.branches.list_branches(T)] == ["dev"]
    assert ids_of(c.branches.open_branch(T, "dev")) == [1, 2, 3, 4]
    report = orphans.scan(c, T, min_age=timedelta(hours=1), now=time.time() + 2 * 86400)
    assert report.unknown_branches == []
    c.trash.drop_table(T, purge=True)
    c.tables.create_table(T, rows([7]))
    c.branches.create_branch(T, "dev")  # the dropped table is gone: its branch name is free
    assert ids_of(c.branches.open_branch(T, "dev")) == [7]


def test_a_branch_is_named_in_lance_as_in_the_registry_unless_lance_holds_that_name(table: Lake) -> None:
    """Stock clients open a branch by its registry name, ``tree/<name>``: Lance's branch takes
    it when it is free there; not while main's line lives there after a publish, nor over a
    manifest a purge killed midway left: then ``<name>-<chain id>``, which lake still reads."""
    catalog = table.catalog
    folder = catalog.reads.open_table(T).record.folder_uri.rstrip("/")
    catalog.branches.create_branch(T, "dev")
    assert catalog.branches.describe_branch(T, "dev")["location"] == f"{folder}/tree/dev"
    catalog.branch_writes.append(T, "dev", rows([4]))
    catalog.branch_publish.publish_branch(T, "dev")  # main's line now lives at tree/dev
    catalog.branches.create_branch(T, "dev")  # the registry's name is free again, Lance's is not
    again = catalog.branches.describe_branch(T, "dev")
    assert str(again["location"]).startswith(f"{folder}/tree/dev-") and again["version"] == 3
    catalog.branch_writes.append(T, "dev", rows([5]))
    assert ids_of(catalog.branches.open_branch(T, "dev")) == [1, 2, 3, 4, 5]
    assert ids_of(catalog.reads.open_table(T)) == [1, 2, 3, 4]
    # a manifest left under tree/<name>/_versions (a purge killed after Lance dropped its ref)
    fs, root = filesystem(folder, table.settings.storage_options(folder))
    fs.create_dir(f"{root}/tree/fix/_versions")
    with fs.open_output_stream(f"{root}/tree/fix/_versions/18446744073709551610.manifest") as out:
        out.write(b"left by a killed purge")
    catalog.branches.create_branch(T, "fix")
    assert "/tree/fix-" in str(catalog.branches.describe_branch(T, "fix")["location"])
    assert ids_of(catalog.branches.open_branch(T, "fix")) == [1, 2, 3, 4]


def test_a_create_that_lost_its_lease_leaves_the_lance_branch_of_its_name_to_its_successor(
    table: Lake,
) -> None:
    """A create stalled past its lease (main's) between Lance's branch and its registry commit:
    the next create of the name takes the lease, removes the stalled one's unregistered Lance
    branch and commits its own there. The stalled create's commit then fails on the lost lease,
    and its clean-up must not delete the Lance branch of the name, which is now the other's."""
    settings = table.settings.model_copy(update={"lease_ttl_seconds": 3600.0})  # no renewal meanwhile
    pause = Pause("branch:engine-made")
    with Catalog(settings, hook=pause) as stalled, Catalog(settings, clock=ShiftedClock(3700)) as later:
        first = Background(lambda: stalled.branches.create_branch(T, "fix"))
        assert pause.reached.wait(60), "the create never reached Lance's branch"
        later.branches.create_branch(T, "fix", from_version=1)
        pause.release()
        assert isinstance(first.error(), TableBranchAlreadyExists)
        folder = later.reads.open_table(T).record.folder_uri.rstrip("/")
        assert later.branches.describe_branch(T, "fix")["location"] == f"{folder}/tree/fix"
        assert ids_of(later.branches.open_branch(T, "fix")) == [1, 2]
        later.branch_writes.append(T, "fix", rows([4]))
        assert ids_of(later.branches.open_branch(T, "fix")) == [1, 2, 4]

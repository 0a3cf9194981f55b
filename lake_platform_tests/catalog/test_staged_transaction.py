"""A staged multi-table commit with a branch's line (``StagedVersions.add(branch=...)``): pylance's
manifests staged on main of one table and on branch ``dev`` of another. The writer killed (SIGKILL,
``faults.kill_writer``) before its registry write leaves nothing on any line; after it, every
line's head moved; a retry under its idempotency key lands once. A transaction with a branch's
line that would need several registry writes is refused before anything is read."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance  # the test plays the Lance client
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.catalog.staged_transaction import StagedVersions
from lake_platform.errors import InvalidTableState, TransactionTooLarge
from lake_platform.naming import TableName
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.rest.handlers.staging import StagingOnly

ORDERS, LINES = "p.w.ns.orders", "p.w.ns.lines"
KEY = "mixed-kill-1"
#: (point, whether the commit landed when the writer dies there).
KILLS = [
    ("transaction:staged", False),  # both lines staged under their leases, nothing registered
    ("transaction:registered", True),  # the one registry write landed, no manifest published
]


def staged(ns: Any, name: str, ids: list[int]) -> dict[str, Any]:
    """The CreateTableVersion request pylance makes for an append of ``ids`` through ``ns``."""
    keeper = StagingOnly(ns)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the commit is kept on purpose (any message)
        lance.write_dataset(
            rows(ids).read_all(), namespace_client=keeper, table_id=name.split("."), mode="append"
        )
    assert keeper.staged is not None
    return {k: v for k, v in keeper.staged.items() if v is not None and k not in ("identity", "context")}


def batch_file(c: Catalog) -> Path:
    return Path(c.settings.home) / "batch.json"


def op_batch(c: Catalog, key: str) -> list[Any]:
    """The commit the kills interrupt: orders' staged version on main, lines' on branch dev."""
    entries = json.loads(batch_file(c).read_text())
    batch = StagedVersions(c, c.ctx.who(None), key)
    batch.add(entries["main"])
    batch.add(entries["branch"], branch="dev")
    return batch.commit_versions()


def heads(c: Catalog) -> tuple[int, int, int]:
    """(main of orders, main of lines, branch dev of lines)."""
    dev = c.branches.branch(TableName.parse(LINES), "dev")[0].current_version
    main = [c.reads.describe_table(n, with_stats=False).current_version for n in (ORDERS, LINES)]
    return main[0], main[1], dev


def seen(c: Catalog) -> tuple[list[int] | None, list[int] | None]:
    """Main of orders' and branch dev of lines' rows (None: committed, not yet published)."""
    out: list[list[int] | None] = []
    for read in (lambda: c.reads.open_table(ORDERS), lambda: c.branches.open_branch(LINES, "dev")):
        try:
            out.append(ids_of(read()))
        except InvalidTableState:
            out.append(None)
    return out[0], out[1]


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[LakeSettings]:
    """Both tables at version 1 (ids 1, 2), lines with branch dev; the batch staged on disk."""
    settings = load_settings(home=tmp_path / "home")
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w")
        c.containers.create_namespace("p.w.ns")
        for name in (ORDERS, LINES):
            c.tables.create_table(name, rows([1, 2]))
        c.branches.create_branch(LINES, "dev")
        tname = TableName.parse(LINES)
        rec, _ = c.branches.branch(tname, "dev")
        on_dev = c.branches.bound_namespace(tname, "dev", c.ctx.storage(rec.location))
        entries = {"main": staged(LakeNamespace(c), ORDERS, [3]), "branch": staged(on_dev, LINES, [30])}
        batch_file(c).write_text(json.dumps(entries))
    yield settings


@pytest.mark.parametrize("kill", KILLS, ids=[p for p, _ in KILLS])
def test_a_writer_killed_leaves_every_line_or_none(settings: LakeSettings, kill: tuple[str, bool]) -> None:
    point, committed = kill
    code, _ = faults.kill_writer(settings, op_batch, point, 1, KEY)
    assert code == -signal.SIGKILL, f"the writer never reached {point}; exit code {code}"
    with Catalog(settings) as c:
        assert heads(c) == ((2, 1, 2) if committed else (1, 1, 1))
        visible = seen(c)
        if committed:
            assert visible[0] in (None, [1, 2, 3]) and visible[1] in (None, [1, 2, 30]), visible
            # Each table's repair publishes what the dead writer committed, on its branches too.
            for name in (ORDERS, LINES):
                c.manifests.repair_table(name)
            assert seen(c) == ([1, 2, 3], [1, 2, 30])
        else:
            assert visible == ([1, 2], [1, 2])
        # The retry takes the dead writer's leases (its process is gone) and lands once.
        versions = op_batch(c, KEY)
        assert [v.version for v in versions] == [2, 2]
        assert heads(c) == (2, 1, 2)
        assert seen(c) == ([1, 2, 3], [1, 2, 30])
        assert ids_of(c.reads.open_table(LINES)) == [1, 2]  # main of lines never moved


def test_a_branch_line_past_one_registry_write_is_refused_before_anything_is_read(
    settings: LakeSettings,
) -> None:
    with Catalog(settings) as c:
        entries = json.loads(batch_file(c).read_text())
        # Two lines take 10 registry operations: one write of 10 holds them, a third does not fit.
        batch = StagedVersions(c, c.ctx.who(None), max_ops=10)
        batch.add(entries["branch"], branch="dev")
        batch.add(entries["main"])
        with pytest.raises(TransactionTooLarge, match="one registry write"):
            batch.add({**entries["main"], "id": ["p", "w", "ns", "other"]})
        assert [v.version for v in batch.commit_versions()] == [2, 2]  # the two that fit land
        assert heads(c) == (2, 1, 2)

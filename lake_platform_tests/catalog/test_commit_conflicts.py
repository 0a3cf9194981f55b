"""Why a version commit did not land (``catalog.commit_conflicts``), where the registry's head is
only a cache of what a multi-table commit's record says: a Lance client that read the version a
committed commit made visible, through a reader whose read could not move the heads, builds its
commit on it while the table's head still lags. That commit completes the multi-table commit and
lands on top of it, instead of being refused with the commit's manifest quarantined as a bypass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import lance  # the test plays a Lance client
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import PermissionDenied
from lake_platform.registry.store import Item, MetaStore, Op
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.test_transaction import (  # noqa: F401 - the fixtures
    catalog,
    heads,
    make_tables,
)
from lake_platform_tests.catalog.test_transaction_chunks import SOME, transaction_records
from lake_platform_tests.catalog.test_transaction_recovery import stopped_commit
from lake_platform_tests.registry.wrapping import WrappedStore
from lake_platform_tests.rest.handlers.staging import StagingOnly


class ReadOnlyRegistry(WrappedStore):
    """The registry through credentials that may only read: every write is refused."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.refused = 0

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        self.refused += 1
        raise PermissionDenied("these registry credentials may only read")


def storage_of(c: Catalog, name: str) -> dict[str, str] | None:
    location = c.reads.describe_table(name, with_stats=False).location
    return c.settings.storage_options(location) or None


class Lagging(NamedTuple):
    names: list[str]
    registry: ReadOnlyRegistry
    storage: dict[str, str] | None  # the target's storage options


def read_while_lagging(catalog: Catalog, target: str) -> Lagging:  # noqa: F811
    """``SOME`` tables at version 1, a multi-table commit of version 2 to each stopped at its
    commit point (no head moved), and ``target`` opened by a pylance reader through read-only
    registry credentials: it reads version 2, and the heads still lag (a writable reader's
    describe would move them: nothing here reads through ``catalog`` after the commit)."""
    names = make_tables(catalog, SOME)
    storage = storage_of(catalog, target)
    stopped_commit(catalog, names, "transaction:committed")
    registry = ReadOnlyRegistry(catalog.store)
    with Catalog(catalog.settings, registry) as reading:
        opened = lance.dataset(
            namespace_client=LakeNamespace(reading), table_id=target.split("."), storage_options=storage
        )
        assert opened.version == 2  # the transaction record is the truth, the head a cache
        at = names.index(target)
        assert sorted(opened.to_table()["id"].to_pylist()) == [at, 1000 + at]
    assert registry.refused > 0  # the reader tried to move the heads and could not
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    return Lagging(names, registry, storage)


def test_a_client_built_on_the_committed_version_of_a_lagging_table_lands_on_it(
    catalog: Catalog,  # noqa: F811
) -> None:
    target = "p.w.ns.t003"
    names, registry, storage = read_while_lagging(catalog, target)
    with Catalog(catalog.settings, registry) as reading:
        reader = LakeNamespace(reading)
        # A client stages an append on what it reads; its commit goes to a writer.
        client = StagingOnly(reader)
        with pytest.raises(OSError):  # the commit was kept, not sent
            lance.write_dataset(
                rows([9]).read_all(),
                namespace_client=client,
                table_id=target.split("."),
                mode="append",
                storage_options=storage,
            )
    assert heads(catalog, names) == dict.fromkeys(names, 1)
    assert client.staged is not None and client.staged["version"] == 3
    landed: Any = LakeNamespace(catalog).create_table_version(client.staged)
    assert landed.version.version == 3
    # The multi-table commit completed on the way: every head moved, its record gone.
    assert heads(catalog, names) == {**dict.fromkeys(names, 2), target: 3}
    assert transaction_records(catalog) == []
    assert [(e.operation, e.to_version) for e in catalog.reads.history(target)][1:] == [
        ("append", 2),
        ("append", 3),
    ]
    location = catalog.reads.describe_table(target, with_stats=False).location
    assert engine.quarantined_files(location, storage) == []  # the commit's manifest is no bypass
    assert sorted(ids_of(catalog.reads.open_table(target))) == [3, 9, 1003]

"""What each operation test_fault_kills.py kills leaves on the lake (``after_kill``), and what
its retry under the same commit id must land, exactly once (``retry_and_check``), on that file's
template lake (``T`` holding ``BASE``, ``KEEP``, the trashed ``GONE``, the namespaces ``CASCADE``
and the dropped ``DROPPED``; the names are ``faults``')."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import NamespaceNotFound, TableNotFound
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord, decode
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.catalog.faults import CASCADE, DROPPED, GONE, KEEP, NEW, NEW_ROWS, T

BASE = [1, 2, 3, 4, 5]
COMMIT_ID = "fault-kill-0001"


def landed(c: Catalog) -> bool:
    return c.ctx.commit_landed(COMMIT_ID) is not None


def ids(c: Catalog, name: str) -> list[int] | None:
    try:
        return ids_of(c.reads.open_table(name))
    except TableNotFound:
        return None


def one_entry(c: Catalog, target: str, operation: str) -> None:
    entries = [e for e in c.reads.history(target) if e.commit_id == COMMIT_ID and e.operation == operation]
    assert len(entries) == 1, f"{operation} of {target} logged {len(entries)} times"


def after_kill(op: str, c: Catalog) -> None:
    did = landed(c)
    if op == "op_append":
        assert ids(c, T) == BASE + (NEW_ROWS if did else [])
    elif op == "op_create":
        assert ids(c, NEW) == (NEW_ROWS if did else None)
    elif op == "op_delete":
        assert ids(c, T) == ([1, 3, 4, 5] if did else BASE)
    elif op in ("op_compact", "op_cleanup"):
        assert ids(c, T) == BASE
    elif op == "op_drop":
        assert ids(c, T) in (BASE, None)
    elif op == "op_drop_namespace":
        for name, expected in ((f"{CASCADE}.a", [10]), (f"{CASCADE}.sub.b", [20])):
            if ids(c, name) is None:  # moved to the trash, whole
                assert [t for t in c.trash.list_trash(name) if t.target == name and t.table is not None], name
            else:
                assert ids(c, name) == expected
    elif op == "op_undrop_namespace":
        for name, expected in ((f"{DROPPED}.c", [30]), (f"{DROPPED}.sub.d", [40])):
            if ids(c, name) is None:  # not restored yet: still whole in the trash
                assert [t for t in c.trash.list_trash(name) if t.target == name and t.table is not None], name
            else:
                assert ids(c, name) == expected
    assert ids(c, KEEP) == [42]


def retry_and_check(op: str, c: Catalog) -> None:
    """Run the operation again, as a retrying orchestrator would, and check it took effect once."""
    operation: Callable[[Catalog, str], Any] = getattr(faults, op)
    if op == "op_append":
        operation(c, COMMIT_ID)
        assert ids(c, T) == BASE + NEW_ROWS
        one_entry(c, T, "append")
    elif op == "op_create":
        operation(c, COMMIT_ID)
        assert ids(c, NEW) == NEW_ROWS
        one_entry(c, NEW, "create")
    elif op == "op_delete":
        operation(c, COMMIT_ID)
        assert ids(c, T) == [1, 3, 4, 5]
        one_entry(c, T, "delete")
    elif op == "op_compact":
        operation(c, COMMIT_ID)
        assert ids(c, T) == BASE
        assert c.reads.describe_table(T).fragments == 1
        rewrites = [e for e in c.reads.history(T) if e.commit_id == COMMIT_ID and e.operation == "compact#1"]
        assert len(rewrites) == 1, f"the compaction rewrite landed {len(rewrites)} times"
    elif op == "op_cleanup":
        operation(c, COMMIT_ID)
        record = c.reads.open_table(T).record
        assert [
            decode(VersionRecord, i.value).version
            for i in c.store.scan_prefix(keys.versions(record.incarnation))
        ] == [record.current_version]
        assert ids(c, T) == BASE
    elif op == "op_drop":
        try:
            operation(c, COMMIT_ID)
        except TableNotFound:
            pass  # the first attempt's drop had landed
        assert ids(c, T) is None
        # A purge killed after its commit left a due trash record: the scheduled expiry finishes it.
        c.trash.expire_trash()
        assert not c.trash.list_trash(T)
        assert [e.operation for e in c.reads.history(T) if e.operation in ("drop", "purge")] == [
            "drop",
            "purge",
        ]
    elif op == "op_drop_namespace":
        try:
            operation(c, COMMIT_ID)
        except NamespaceNotFound:
            pass  # the first attempt had finished
        for space in (CASCADE, f"{CASCADE}.sub"):
            assert c.store.get(keys.namespace(_ns(space))) is None, f"{space} is still registered"
        for name in (f"{CASCADE}.a", f"{CASCADE}.sub.b"):
            trashed = [t for t in c.trash.list_trash(name) if t.target == name and t.kind == "table"]
            assert len(trashed) == 1, f"{name} is in the trash {len(trashed)} times"
        filed = [t for t in c.trash.list_trash(CASCADE) if t.target == CASCADE and t.kind == "namespace"]
        assert len(filed) == 1, f"one cascade filed {len(filed)} namespace trash records"
        c.trash.undrop_namespace(CASCADE)
        assert (ids(c, f"{CASCADE}.a"), ids(c, f"{CASCADE}.sub.b")) == ([10], [20])
    elif op == "op_undrop_namespace":
        operation(c, COMMIT_ID)
        assert (ids(c, f"{DROPPED}.c"), ids(c, f"{DROPPED}.sub.d")) == ([30], [40])
        assert not c.trash.list_trash(DROPPED)
        for name in (f"{DROPPED}.c", f"{DROPPED}.sub.d"):
            assert len([e for e in c.reads.history(name) if e.operation == "undrop"]) == 1, name
    elif op == "op_expire":
        operation(c, COMMIT_ID)
        assert not c.trash.list_trash(GONE)
        assert len([e for e in c.reads.history(GONE) if e.operation == "purge"]) == 1
    assert ids(c, KEEP) == [42]


def _ns(name: str) -> Any:
    from lake_platform.naming import NamespaceName

    return NamespaceName.parse(name)

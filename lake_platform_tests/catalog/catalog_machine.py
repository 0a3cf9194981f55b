"""The randomized model test's machine (test_model.py): the steps it takes against a real catalog
and ``catalog_model.CatalogModel``, each predicted exactly (a typed error or success), with
``model_checks.assert_catalog_matches`` after every step (the warehouse's listings too, or once
at the end of a sequence: ``listings``). The universe is tiny on purpose (one warehouse, two
namespaces, two table names in each) so drops, recreates and undrops collide on names."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import ClassVar, TypeVar

import pyarrow as pa
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import LakeError, LeaseUnavailable
from lake_platform_tests.catalog.catalog_model import (
    DAY_MS,
    CatalogModel,
    Expected,
    namespace_of,
)
from lake_platform_tests.catalog.model_checks import assert_catalog_matches, assert_listings_match
from lake_platform_tests.catalog.model_envs import Env, Tally
from lake_platform_tests.doubles import ManualClock

WAREHOUSE = "p.w"
NAMESPACES = ["p.w.a", "p.w.b"]
TABLES = [f"{ns}.{t}" for ns in NAMESPACES for t in ("t", "u")]
TAGS = ["keep", "mark"]
SCOPES = [WAREHOUSE, *NAMESPACES, *TABLES]

T = TypeVar("T")

#: A one-second cleanup window (see test_model.py's docstring), and writers that meet a held lease
#: give up at once with LeaseUnavailable instead of waiting (steps are sequential, so a lease is
#: only ever held by a step that another writer interrupts at a hook point).
TEST_SETTINGS = {"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0, "lease_wait_seconds": 0.0}


def _rows(ids: tuple[int, ...]) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64())}).to_reader()


def _pick(data: st.DataObject, likely: list[str], universe: list[str]) -> str:
    """Half the time a name the model says can succeed (when there is one), else any name:
    the successful paths get exercised, and the error paths still do."""
    anything = st.sampled_from(universe)
    return data.draw(st.sampled_from(likely) | anything if likely else anything)


class CatalogMachine(RuleBasedStateMachine):
    """Subclassed per backend with ``open_env`` and ``tally`` set."""

    open_env: ClassVar[Callable[[], Env]]
    tally: ClassVar[Tally]
    #: Whether each comparison also checks the warehouse's listings (``assert_catalog_matches``);
    #: if not, they are checked once, when a sequence that matched the model ends (``teardown``).
    listings: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.env = type(self).open_env()
        self.clock = ManualClock(start_wall_ms=int(time.time() * 1000) + DAY_MS)
        self.catalog = Catalog(self.env.settings, clock=self.clock, heartbeat=False, hook=self._hook)
        # Another writer on the same registry and storage, for steps that land inside a cascade.
        self.other = Catalog(self.env.settings, clock=self.clock, heartbeat=False)
        self.pending: tuple[str, Callable[[], None]] | None = None
        self.catalog.containers.create_project("p")
        self.catalog.containers.create_warehouse(WAREHOUSE, root=self.env.root)
        for ns in NAMESPACES:
            self.catalog.containers.create_namespace(ns)
        self.model = CatalogModel(set(NAMESPACES))
        self.next_id = 0
        self.locations: set[str] = set()
        self.op = ""
        #: Whether the catalog matched the model after the last step (set by the invariant).
        self.matched = False
        self.tally.examples += 1

    def teardown(self) -> None:
        try:
            # Only after a sequence that matched: a failing one is reported as it failed.
            if self.matched and not self.listings:
                assert_listings_match(self.catalog, warehouse=WAREHOUSE, tables=TABLES, scopes=SCOPES)
                self.tally.listings += 1
        finally:
            try:
                self.other.close()
                self.catalog.close()
            finally:
                self.env.close()

    def _hook(self, point: str) -> None:
        """Run the pending interleaving once, when the catalog reaches its point."""
        if self.pending is not None and self.pending[0] == point:
            _, interleave = self.pending
            self.pending = None
            interleave()

    # -- helpers --------------------------------------------------------------------------------

    def _step(self, op: str) -> None:
        """Every step takes a second of catalog time, so no two drops share a timestamp."""
        self.op = op
        self.matched = False
        self.tally.steps += 1
        self.clock.advance(1)

    def _fresh(self, count: int) -> tuple[int, ...]:
        self.next_id += count
        return tuple(range(self.next_id - count, self.next_id))

    def _call(self, expected: Expected, fn: Callable[[], T]) -> T | None:
        """Run ``fn``; it must succeed when ``expected`` is None, else raise exactly ``expected``."""
        if expected is None:
            result = fn()
            self.tally.outcomes[f"{self.op}: ok"] += 1
            return result
        try:
            fn()
        except LakeError as exc:
            assert type(exc) is expected, f"expected {expected.__name__}, got {type(exc).__name__}: {exc}"
            self.tally.errors_predicted += 1
            self.tally.outcomes[f"{self.op}: {expected.__name__}"] += 1
            return None
        raise AssertionError(f"expected {expected.__name__}, but the call succeeded")

    def _ok(self, expected: Expected, fn: Callable[[], object]) -> bool:
        """``_call`` for calls whose result the step does not use: True when it succeeded."""
        return self._call(expected, lambda: fn() or True) is not None

    # -- rules ----------------------------------------------------------------------------------

    @initialize(
        names=st.lists(st.sampled_from(TABLES), min_size=2, max_size=4, unique=True),
        trashed=st.integers(0, 2),
        recreate=st.booleans(),
    )
    def seed(self, names: list[str], trashed: int, recreate: bool) -> None:
        """Start with some tables, the first ``trashed`` of them dropped to the trash (and one
        of those recreated under its name), so the steps go to lifecycles that collide."""
        self._step("seed")
        for name in names:
            self._create(name, self._fresh(2))
            self._append(name, self._fresh(1))
        for name in names[:trashed]:
            self.clock.advance(1)
            self._drop(name, purge=False)
        if recreate and trashed:
            self.clock.advance(1)
            self._create(names[0], self._fresh(1))

    def _live(self, data: st.DataObject) -> str:
        return _pick(data, sorted(self.model.tables), TABLES)

    @rule(data=st.data(), count=st.integers(1, 3))
    def create(self, data: st.DataObject, count: int) -> None:
        free = [n for n in TABLES if n not in self.model.tables and namespace_of(n) in self.model.namespaces]
        name = _pick(data, free, TABLES)
        self._step("create")
        self._create(name, self._fresh(count))

    def _create(self, name: str, ids: tuple[int, ...], catalog: Catalog | None = None) -> None:
        catalog = catalog or self.catalog
        if (
            self._call(self.model.create_error(name), lambda: catalog.tables.create_table(name, _rows(ids)))
            is None
        ):
            return
        info = catalog.reads.describe_table(name, with_stats=False)
        known = {i.id for i in self.model.tables.values()} | {t.inc.id for t in self.model.trash}
        known |= {i.id for i in self.model.purged}
        assert info.incarnation not in known, "a recreated table must get a new incarnation"
        assert info.location not in self.locations, "a recreated table must get a new location"
        self.locations.add(info.location)
        self.model.create(name, info.incarnation, info.location, ids)

    @rule(data=st.data(), count=st.integers(1, 3))
    def append(self, data: st.DataObject, count: int) -> None:
        name = self._live(data)
        self._step("append")
        self._append(name, self._fresh(count))

    def _append(self, name: str, ids: tuple[int, ...]) -> None:
        if self._ok(self.model.append_error(name), lambda: self.catalog.tables.append(name, _rows(ids))):
            self.model.append(name, ids)

    @rule(data=st.data(), count=st.integers(2, 3))
    def transact(self, data: st.DataObject, count: int) -> None:
        """An atomic multi-table append: every table gets its version, or (one of them missing,
        its namespace gone, ...) none does and the first refusal in name order is the error."""
        names = data.draw(st.lists(st.sampled_from(TABLES), min_size=count, max_size=count, unique=True))
        batches = {name: self._fresh(1) for name in names}
        self._step("transact")
        errors = [e for e in (self.model.append_error(n) for n in sorted(names)) if e is not None]

        def commit() -> None:
            with self.catalog.transaction() as tx:
                for name in names:
                    tx.append(name, _rows(batches[name]))

        if self._ok(errors[0] if errors else None, commit):
            for name in names:
                self.model.append(name, batches[name])

    @rule(data=st.data(), purge=st.sampled_from([False, False, True]))
    def drop(self, data: st.DataObject, purge: bool) -> None:
        name = self._live(data)
        self._step("drop")
        self._drop(name, purge)

    def _drop(self, name: str, purge: bool) -> None:
        if self._ok(self.model.drop_error(name), lambda: self.catalog.trash.drop_table(name, purge=purge)):
            self.model.drop(name, self.clock.wall_ms(), purge=purge)

    @rule(data=st.data(), as_name=st.none() | st.sampled_from(TABLES))
    def undrop(self, data: st.DataObject, as_name: str | None) -> None:
        """Undrop in place, or under another name anywhere in the warehouse."""
        name = _pick(data, sorted({t.name for t in self.model.trash}), TABLES)
        self._step("undrop")
        into = as_name or name
        result = self._call(
            self.model.undrop_error(name, into),
            lambda: self.catalog.trash.undrop_table(name, as_name=as_name),
        )
        if result is not None:
            self.model.undrop(name, into)

    # Protection blocks drops and cascades; switching it off more often keeps those reachable.
    @rule(data=st.data(), on=st.sampled_from([False, False, True]))
    def protect(self, data: st.DataObject, on: bool) -> None:
        name = self._live(data)
        self._step("protect")
        if self._ok(
            self.model.protect_error(name),
            lambda: self.catalog.containers.set_protected(name, on, kind="table"),
        ):
            self.model.protect(name, on)

    @rule(
        data=st.data(), tag=st.sampled_from(TAGS), version=st.none() | st.integers(1, 6), remove=st.booleans()
    )
    def tag(self, data: st.DataObject, tag: str, version: int | None, remove: bool) -> None:
        """Tag the current version or any version (live, cleaned up or never committed), or
        remove a tag."""
        tagged_here = sorted(n for n, inc in self.model.tables.items() if tag in inc.tags)
        name = _pick(data, tagged_here, TABLES) if remove else self._live(data)
        self._step("tag")
        if remove:
            if self._ok(self.model.untag_error(name, tag), lambda: self.catalog.tags.delete_tag(name, tag)):
                self.model.untag(name, tag)
            return
        tagged = self._call(
            self.model.tag_error(name, tag, version), lambda: self.catalog.tags.create_tag(name, tag, version)
        )
        if tagged is not None:
            assert tagged == (version or self.model.tables[name].current)
            self.model.tag(name, tag, version)

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        name = self._live(data)
        self._step("compact")
        expected = self.model.maintain_error(name)
        result = self._call(
            expected, lambda: self.catalog.versions.compact(name, target_rows_per_fragment=1024)
        )
        if result is None:
            return
        before = self.model.tables[name].current
        if not self.model.compacts(name):
            assert (result.status, result.version) == ("nothing-to-do", before)
            return
        assert result.status == "committed", result
        # Lance may reserve fragment ids in a commit of its own before the rewrite.
        assert 1 <= result.version - before <= 2, result
        self.model.compact(name, result.version - before)

    @rule(data=st.data(), retain=st.integers(1, 2))
    def cleanup(self, data: st.DataObject, retain: int) -> None:
        name = self._live(data)
        self._step("cleanup")
        result = self._call(
            self.model.maintain_error(name),
            lambda: self.catalog.versions.cleanup(name, retention=timedelta(0), retain_versions=retain),
        )
        if result is None:
            return
        doomed = self.model.doomed(name, retain)
        if doomed:
            assert (result.status, result.detail["versions_removed"]) == ("committed", doomed), result
        else:
            assert result.status == "nothing-to-do", (doomed, result)
        self.model.cleanup(name, retain)

    @rule(data=st.data(), retain=st.integers(1, 2), op=st.sampled_from(["tag", "append", "drop"]))
    def writer_racing_cleanup(self, data: st.DataObject, retain: int, op: str) -> None:
        """Another writer tags (a version cleanup is about to remove), appends to or drops the
        table after cleanup has chosen its versions: the table's lease is held, so the writer
        must get LeaseUnavailable and change nothing, and cleanup must finish as planned."""
        name = self._live(data)
        self._step("writer_racing_cleanup")
        expected = self.model.maintain_error(name)
        doomed = self.model.doomed(name, retain) if expected is None else []
        fired: list[str] = []

        def interleave() -> None:
            fired.append(op)
            refused = self.model.drop_error(name) if op == "drop" else None
            if op == "tag":
                self._call(LeaseUnavailable, lambda: self.other.tags.create_tag(name, TAGS[0], doomed[0]))
            elif op == "append":
                self._call(LeaseUnavailable, lambda: self.other.tables.append(name, _rows(self._fresh(1))))
            else:
                self._call(refused or LeaseUnavailable, lambda: self.other.trash.drop_table(name))

        self.pending = ("cleanup:chose-versions", interleave)
        try:
            result = self._call(
                expected,
                lambda: self.catalog.versions.cleanup(name, retention=timedelta(0), retain_versions=retain),
            )
        finally:
            self.pending = None
        if result is None:
            return
        assert fired == ([op] if doomed else []), f"the writer ran {len(fired)} times"
        assert (result.status, result.detail.get("versions_removed", [])) == (
            "committed" if doomed else "nothing-to-do",
            doomed,
        ), result
        self.model.cleanup(name, retain)

    @rule(data=st.data(), hours=st.sampled_from([0, 1, 72]))
    def set_policy(self, data: st.DataObject, hours: int) -> None:
        """A trash grace on the warehouse, a namespace or a table (0: a drop destroys at once)."""
        scope = _pick(data, [WAREHOUSE, *sorted(self.model.namespaces), *sorted(self.model.tables)], SCOPES)
        self._step("set_policy")
        if self._ok(
            self.model.set_policy_error(scope),
            lambda: self.catalog.policies.set_policy(scope, {"trash_grace_seconds": hours * 3600}),
        ):
            self.model.set_policy(scope, hours * 3_600_000)

    @rule(data=st.data())
    def create_namespace(self, data: st.DataObject) -> None:
        ns = _pick(data, [n for n in NAMESPACES if n not in self.model.namespaces], NAMESPACES)
        self._step("create_namespace")
        if self._ok(
            self.model.create_namespace_error(ns), lambda: self.catalog.containers.create_namespace(ns)
        ):
            self.model.create_namespace(ns)

    @rule(data=st.data(), cascade=st.booleans())
    def drop_namespace(self, data: st.DataObject, cascade: bool) -> None:
        ns = _pick(data, sorted(self.model.namespaces), NAMESPACES)
        self._step("drop_namespace")
        if self._ok(
            self.model.drop_namespace_error(ns, cascade=cascade),
            lambda: self.catalog.cascade.drop_namespace(ns, cascade=cascade),
        ):
            self.model.drop_namespace(ns, self.clock.wall_ms())

    @rule(data=st.data(), phase=st.sampled_from(["checked", "table"]), recreate=st.booleans())
    def cascade_racing_a_writer(self, data: st.DataObject, phase: str, recreate: bool) -> None:
        """A cascade while another writer drops (and maybe recreates) a table at an exact step:
        after the cascade's checks and before its mark (the cascade must take what it finds
        under the mark, the replacement included), or while it detaches tables (the marked
        namespace must refuse the writer; other namespaces must not)."""
        ns = _pick(data, sorted(self.model.namespaces), NAMESPACES)
        name = _pick(data, sorted(n for n in self.model.tables if namespace_of(n) == ns), TABLES)
        self._step("cascade_racing_a_writer")
        expected = self.model.drop_namespace_error(ns, cascade=True)
        fires = phase == "checked" or any(namespace_of(n) == ns for n in self.model.tables)
        fired: list[str] = []

        def interleave() -> None:
            fired.append(phase)
            # Before the mark the writer's steps come later than the checks; while the cascade
            # detaches, its drop time is already taken and the writer's steps share it.
            tick = 1 if phase == "checked" else 0
            self.model.dropping = ns if phase == "table" else None
            try:
                self.clock.advance(tick)
                if self._ok(self.model.drop_error(name), lambda: self.other.trash.drop_table(name)):
                    self.model.drop(name, self.clock.wall_ms(), purge=False)
                if recreate:
                    self.clock.advance(tick)
                    self._create(name, self._fresh(1), self.other)
                self.clock.advance(tick)
            finally:
                self.model.dropping = None

        self.pending = (f"drop-namespace:{phase}", interleave)
        try:
            result = self._call(expected, lambda: self.catalog.cascade.drop_namespace(ns, cascade=True))
        finally:
            self.pending = None
        if result is not None:
            assert fired == ([phase] if fires else []), f"the interleaving at {phase} ran {len(fired)} times"
            self.model.drop_namespace(ns, self.clock.wall_ms())

    @rule(data=st.data())
    def undrop_namespace(self, data: st.DataObject) -> None:
        ns = _pick(data, sorted({r.namespace for r in self.model.ns_trash}), NAMESPACES)
        self._step("undrop_namespace")
        if self._ok(self.model.undrop_namespace_error(ns), lambda: self.catalog.trash.undrop_namespace(ns)):
            self.model.undrop_namespace(ns)

    @rule(hours=st.sampled_from([0, 1, 72, 170]))
    def expire(self, hours: int) -> None:
        """Catalog time passes (170 h is past the default seven-day grace), then expiry runs."""
        self._step("expire")
        self.clock.advance(hours * 3600)
        purged = self.catalog.trash.expire_trash()
        self.tally.outcomes[f"{self.op}: ok"] += 1
        gone = self.model.expire(self.clock.wall_ms())
        assert sorted(r.table for r in purged) == sorted(t.name for t in gone)

    # -- the comparison after every step --------------------------------------------------------

    @invariant()
    def registry_and_engine_match_the_model(self) -> None:
        self.tally.checks += 1
        assert_catalog_matches(
            self.catalog,
            self.model,
            warehouse=WAREHOUSE,
            namespaces=NAMESPACES,
            tables=TABLES,
            scopes=SCOPES,
            listings=self.listings,
        )
        self.tally.listings += self.listings
        self.matched = True

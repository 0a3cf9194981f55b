"""A randomized model test of the catalog (hypothesis stateful testing).

Random sequences of create, append, atomic multi-table appends, drop (to the trash or purged),
undrop (in place or under another name), namespace drop (cascade or not), namespace undrop and
recreate, protection, trash-grace policies, tags (on any version), compaction, version cleanup,
time jumps with trash expiry, and a cascade racing another writer at an exact hook point run
against a real catalog and against ``catalog_model.CatalogModel``. The universe is tiny on
purpose (one warehouse, two namespaces, two table names in each) so drops, recreates and
undrops collide on names.

After every step the registry (namespaces, policy records, registered tables with incarnation
and version, the trash, each incarnation's version records), the engine (rows of every live
version, tags, the manifests on storage, nothing left of a purged incarnation) and the model must
agree; an error must be exactly the typed LakeError the model predicts. Runs on SQLite + a local
folder and on the DynamoDB API (moto) + S3 (SeaweedFS). The summary line it prints (steps,
comparisons, outcomes per operation) is also recorded as junit properties.

Two steps let another writer in at an exact hook point: a cascade (after its checks, or while it
detaches tables), and a cleanup that has chosen its versions (every write to that table must then
be refused with LeaseUnavailable, a tag of a version about to go included).

The catalog runs on a manual clock a day ahead of the real one, with a one-second ticket window:
every superseded version is then old enough for cleanup (version commit times are real time), so
the model predicts cleanup exactly, while trash deadlines follow the manual clock alone.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.policies import PolicyRecord
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import LakeError, LeaseUnavailable, TableVersionNotFound
from lake_platform.naming import NamespaceName
from lake_platform.registry import keys
from lake_platform.registry.records import decode
from lake_platform_tests.catalog.catalog_model import (
    DAY_MS,
    CatalogModel,
    Expected,
    Incarnation,
    namespace_of,
)
from lake_platform_tests.catalog.model_envs import Env, dynamodb_s3_env, local_env, run_settings
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.s3_server import S3Endpoint

WAREHOUSE = "p.w"
NAMESPACES = ["p.w.a", "p.w.b"]
TABLES = [f"{ns}.{t}" for ns in NAMESPACES for t in ("t", "u")]
TAGS = ["keep", "mark"]
SCOPES = [WAREHOUSE, *NAMESPACES, *TABLES]

T = TypeVar("T")

#: A one-second cleanup window (see the module docstring), and writers that meet a held lease
#: give up at once with LeaseUnavailable instead of waiting (steps are sequential, so a lease is
#: only ever held by a step that another writer interrupts at a hook point).
TEST_SETTINGS = {"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0, "lease_wait_seconds": 0.0}


@dataclass
class Tally:
    examples: int = 0
    steps: int = 0
    checks: int = 0
    errors_predicted: int = 0
    #: "rule: ok" or "rule: <error>" → count; shows the sequences reached every operation
    outcomes: Counter[str] = field(default_factory=Counter)


def _ids(snapshot: Any) -> tuple[int, ...]:
    return tuple(sorted(snapshot.to_reader(columns=["id"]).read_all().column("id").to_pylist()))


def _rows(ids: tuple[int, ...]) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64())}).to_reader()


def _undo_list(trash_keys: list[str]) -> list[tuple[str, int]]:
    """A cascade's table trash keys ``trs/<name>/<dropped_at>-<incarnation>`` → sorted
    (incarnation, dropped_at) pairs, as the model keeps them."""
    pairs = []
    for key in trash_keys:
        stamp, _, incarnation = key.rsplit("/", 1)[1].partition("-")
        pairs.append((incarnation, int(stamp)))
    return sorted(pairs)


def _pick(data: st.DataObject, likely: list[str], universe: list[str]) -> str:
    """Half the time a name the model says can succeed (when there is one), else any name:
    the successful paths get exercised, and the error paths still do."""
    anything = st.sampled_from(universe)
    return data.draw(st.sampled_from(likely) | anything if likely else anything)


class CatalogMachine(RuleBasedStateMachine):
    """Subclassed per backend with ``open_env`` and ``tally`` set."""

    open_env: ClassVar[Callable[[], Env]]
    tally: ClassVar[Tally]

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
        self.tally.examples += 1

    def teardown(self) -> None:
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

    def _storage(self, location: str) -> dict[str, str]:
        return self.env.settings.storage_options(location)

    def _registry_versions(self, inc: Incarnation) -> list[int]:
        return [int(i.key.rsplit("/", 1)[1]) for i in self.catalog.store.scan_prefix(keys.versions(inc.id))]

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
        catalog, model = self.catalog, self.model
        for ns in NAMESPACES:
            present = catalog.store.get(keys.namespace(NamespaceName.parse(ns))) is not None
            assert present == (ns in model.namespaces), f"namespace {ns}: registry {present}"

        policies = {
            scope: decode(PolicyRecord, item.value, item.key).policy.trash_grace_seconds * 1000
            for scope in SCOPES
            if (item := catalog.store.get(keys.policy(scope))) is not None
        }
        assert policies == model.policies, "policy records (scope → trash grace ms)"

        registered = {
            r.name: (r.incarnation, r.current_version) for r in catalog.reads.list_tables(WAREHOUSE)
        }
        assert registered == {n: (i.id, i.current) for n, i in model.tables.items()}

        trash = catalog.trash.list_trash(WAREHOUSE)
        tables_trash = sorted(
            (
                r.target,
                r.table.incarnation,
                r.table.current_version,
                r.dropped_at_ms,
                r.expires_at_ms,
                r.state,
            )
            for r in trash
            if r.kind == "table" and r.table
        )
        assert tables_trash == sorted(
            (t.name, t.inc.id, t.inc.current, t.dropped_at, t.expires_at, "trashed") for t in model.trash
        )
        assert len(tables_trash) == sum(r.kind == "table" for r in trash), "a trash record lacks its table"
        ns_trash = sorted(
            (r.target, r.dropped_at_ms, r.expires_at_ms, _undo_list(r.table_trash_keys))
            for r in trash
            if r.kind == "namespace"
        )
        assert ns_trash == sorted(
            (r.namespace, r.dropped_at, r.expires_at, sorted(r.tables)) for r in model.ns_trash
        )

        for name, inc in model.tables.items():
            self._check_registered(name, inc)
        for trashed in model.trash:
            self._check_kept(trashed.inc)
        for inc in model.purged:
            self._check_purged(inc)

    def _check_registered(self, name: str, inc: Incarnation) -> None:
        snap = self.catalog.reads.open_table(name)
        assert (snap.version, _ids(snap)) == (inc.current, inc.rows), f"{name}: current version or rows"
        assert engine.tagged_versions(snap.dataset) == inc.tags, f"{name}: tags"
        assert self.catalog.reads.describe_table(name, with_stats=False).protected == inc.protected
        for version, rows in inc.history.items():
            if version != inc.current:
                assert _ids(self.catalog.reads.open_table(name, version)) == rows, (
                    f"{name}: rows at v{version}"
                )
        for version in range(1, inc.current):
            if version not in inc.history:
                with pytest.raises(TableVersionNotFound):
                    self.catalog.reads.open_table(name, version)
        self._check_kept(inc)

    def _check_kept(self, inc: Incarnation) -> None:
        """Registered or trashed: every live version is registered and has its manifest on
        storage, and nothing newer than the registered version is there (invariant 1)."""
        assert self._registry_versions(inc) == sorted(inc.history), f"{inc.location}: registered versions"
        on_disk = engine.versions_on_disk(inc.location, self._storage(inc.location))
        assert set(inc.history) <= set(on_disk), f"{inc.location}: versions on storage {on_disk}"
        assert max(on_disk) == inc.current, f"{inc.location}: versions on storage {on_disk}"

    def _check_purged(self, inc: Incarnation) -> None:
        assert self._registry_versions(inc) == [], f"{inc.location}: version records left after purge"
        left = [f.path for f in engine.list_files(inc.location, self._storage(inc.location))]
        assert left == [], f"{inc.location}: files left after purge: {left[:5]}"


def _machine(name: str, open_env: Callable[[], Env]) -> tuple[type[CatalogMachine], Tally]:
    tally = Tally()
    return type(name, (CatalogMachine,), {"open_env": staticmethod(open_env), "tally": tally}), tally


@contextmanager
def _reported(
    backend: str,
    tally: Tally,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        line = (
            f"model test [{backend}]: {tally.steps} steps in {tally.examples} sequences, {tally.checks} "
            f"model comparisons, {tally.errors_predicted} predicted typed errors, "
            f"{time.monotonic() - started:.1f}s\n  outcomes: {dict(sorted(tally.outcomes.items()))}"
        )
        for key in ("steps", "examples", "checks", "errors_predicted"):
            record_property(f"model_{backend}_{key}", getattr(tally, key))
        with capsys.disabled():
            print("\n" + line)


@pytest.mark.slow
def test_catalog_matches_the_model_on_sqlite_and_a_local_folder(
    tmp_path: Path,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def open_env() -> Env:
        return local_env(Path(tempfile.mkdtemp(dir=tmp_path)), **TEST_SETTINGS)

    machine, tally = _machine("SqliteLocalCatalog", open_env)
    with _reported("sqlite", tally, record_property, capsys):
        run_state_machine_as_test(machine, settings=run_settings(examples=60, steps=25))
    assert tally.steps > 0 and tally.checks >= tally.steps


@pytest.mark.slow
def test_catalog_matches_the_model_on_dynamodb_and_s3(
    tmp_path: Path,
    moto_endpoint: str,
    s3: S3Endpoint,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def open_env() -> Env:
        return dynamodb_s3_env(moto_endpoint, s3, Path(tempfile.mkdtemp(dir=tmp_path)), **TEST_SETTINGS)

    machine, tally = _machine("DynamoS3Catalog", open_env)
    with _reported("dynamodb+s3", tally, record_property, capsys):
        run_state_machine_as_test(machine, settings=run_settings(examples=6, steps=15))
    assert tally.steps > 0 and tally.checks >= tally.steps

"""A randomized model test of branches (hypothesis stateful testing, issue 46).

Random sequences of main appends, branch creates (from main's head or another branch), branch
appends, publishes, deletes into the trash, undrops, expiries, main's version cleanup (no ticket
window) and branch compactions run against a real catalog and
against a small model of what each line holds. The universe is tiny on purpose (one table,
three branch names) so creates, deletes and re-creates collide on names, publishes race main's
writes (BranchDiverged) and branches build on each other (a purge waits for its children).

After every step each line's rows (main's and every active branch's, read through the catalog),
main's registry head and the branch listing (names, states, heads) must equal the model, every
registered version of main must still read (cleanup reclaimed no live file), and an
error must be exactly the typed LakeError the model predicts. Runs on SQLite + a local folder and
on the DynamoDB API (moto) + S3 (SeaweedFS).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import (
    BranchDiverged,
    InvalidInput,
    InvalidTableState,
    LakeError,
    TableBranchAlreadyExists,
    TableBranchNotFound,
)
from lake_platform_tests.catalog.model_envs import Env, dynamodb_s3_env, local_env, run_settings
from lake_platform_tests.s3_server import S3Endpoint

T = "p.w.ns.t"
NAMES = ["a", "b", "c"]
FAR_FUTURE_MS = 1 << 50
#: Operations, repeated by weight: the ones that build state come more often than the ones that end it.
OPS = (
    ["create"] * 3
    + ["append_branch"] * 4
    + ["publish"] * 3
    + ["delete", "undrop"] * 2
    + ["append_main", "expire"]
    + ["cleanup", "compact"]
)
#: Superseded versions may be cleaned up at once: the ticket window must not hide a lost file.
NO_WINDOW = {"ticket_lifetime_seconds": 0.001, "reader_max_stale_seconds": 0.0}


@dataclass
class Line:
    """A branch as the model sees it."""

    rows: list[int]
    version: int
    main_version: int
    parent: str | None  # the Lance branch it was made from (None: main)
    lance: str  # its own Lance branch, by a model name unique per creation
    state: str = "active"  # active, trashed, purging


@dataclass
class Model:
    main_rows: list[int] = field(default_factory=lambda: [0])
    main_version: int = 1
    lines: dict[str, Line] = field(default_factory=dict)
    #: Lance branches still on storage: deleted ones are gone, published ones stay (main lives there).
    lance_alive: set[str] = field(default_factory=set)
    parents: dict[str, str | None] = field(default_factory=dict)
    made: int = 0

    def has_children(self, lance: str) -> bool:
        return any(self.parents.get(other) == lance for other in self.lance_alive)


class BranchMachine(RuleBasedStateMachine):
    open_env: ClassVar[Callable[[], Env]]
    #: (rule, "ok" or the predicted error's name) of every step, across sequences.
    outcomes: ClassVar[Counter[tuple[str, str]]]

    def __init__(self) -> None:
        super().__init__()
        self.env = self.open_env()
        self.catalog = Catalog(self.env.settings)
        self.model = Model()
        self.next_id = 1
        self.op = ""  # the step's operation, counted by _expect

    @initialize()
    def table(self) -> None:
        cat = self.catalog
        cat.containers.create_project("p")
        cat.containers.create_warehouse("p.w", root=self.env.root)
        cat.containers.create_namespace("p.w.ns")
        cat.tables.create_table(T, _rows([0]))

    def teardown(self) -> None:
        self.catalog.close()
        self.env.close()

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _expect(self, error: type[LakeError] | None, call: Callable[[], Any]) -> Any:
        self.outcomes[(self.op, error.__name__ if error else "ok")] += 1
        if error is None:
            return call()
        with pytest.raises(error) as raised:
            call()
        assert type(raised.value) is error, raised.value
        return None

    # -- rules -----------------------------------------------------------------------------------

    @rule(
        op=st.sampled_from(OPS),
        name=st.sampled_from(NAMES),
        source=st.sampled_from([None, None, None, *NAMES]),
    )
    def act(self, op: str, name: str, source: str | None) -> None:
        """One step: ``op`` drawn with weights (``OPS``), so creates, branch writes and publishes
        are frequent enough to collide."""
        self.op = op
        if op == "create":
            self.create(name, source)
        elif op in ("append_main", "expire", "cleanup"):
            getattr(self, op)()
        else:
            getattr(self, op)(name)

    def append_main(self) -> None:
        i = self._id()
        self._expect(None, lambda: self.catalog.tables.append(T, _rows([i])))
        self.model.main_rows.append(i)
        self.model.main_version += 1

    def create(self, name: str, source: str | None) -> None:
        m = self.model
        parent = m.lines.get(source) if source is not None else None
        call = lambda: self.catalog.branches.create_branch(T, name, from_branch=source)  # noqa: E731
        if name in m.lines:
            self._expect(TableBranchAlreadyExists, call)
            return
        if source is not None and (parent is None or parent.state != "active"):
            self._expect(TableBranchNotFound, call)
            return
        self._expect(None, call)
        m.made += 1
        lance = f"{name}{m.made}"
        if parent is None:
            line = Line(list(m.main_rows), m.main_version, m.main_version, None, lance)
        else:
            line = Line(list(parent.rows), parent.version, parent.main_version, parent.lance, lance)
        m.lines[name] = line
        m.lance_alive.add(lance)
        m.parents[lance] = line.parent

    def append_branch(self, name: str) -> None:
        line = self.model.lines.get(name)
        i = self._id()
        call = lambda: self.catalog.branch_writes.append(T, name, _rows([i]))  # noqa: E731
        if line is None or line.state != "active":
            self._expect(TableBranchNotFound, call)
            return
        self._expect(None, call)
        line.rows.append(i)
        line.version += 1

    def publish(self, name: str) -> None:
        m = self.model
        line = m.lines.get(name)
        call = lambda: self.catalog.branch_publish.publish_branch(T, name)  # noqa: E731
        if line is None or line.state != "active":
            self._expect(TableBranchNotFound, call)
        elif line.main_version != m.main_version:
            self._expect(BranchDiverged, call)
        elif line.version <= line.main_version:
            self._expect(InvalidInput, call)
        else:
            self._expect(None, call)
            m.main_rows, m.main_version = list(line.rows), line.version
            del m.lines[name]  # consumed; its Lance branch stays: main's line lives there now

    def cleanup(self) -> None:
        """Main's old versions go, and with them every file nothing registered references, in
        every dataset root main's line has had: the invariants then read every line."""
        self._expect(None, lambda: self.catalog.versions.cleanup(T, retention=timedelta(0)))

    def compact(self, name: str) -> None:
        line = self.model.lines.get(name)
        call = lambda: self.catalog.branch_compaction.compact_branch(T, name)  # noqa: E731
        if line is None or line.state != "active":
            self._expect(TableBranchNotFound, call)
            return
        done = self._expect(None, call)
        if done.status == "committed":
            line.version = done.version  # reserve and rewrite: two versions, the same rows

    def delete(self, name: str) -> None:
        line = self.model.lines.get(name)
        call = lambda: self.catalog.branch_trash.delete_branch(T, name)  # noqa: E731
        if line is None or line.state != "active":
            self._expect(TableBranchNotFound, call)
            return
        self._expect(None, call)
        line.state = "trashed"

    def undrop(self, name: str) -> None:
        line = self.model.lines.get(name)
        call = lambda: self.catalog.branch_trash.undrop_branch(T, name)  # noqa: E731
        if line is None:
            self._expect(TableBranchNotFound, call)
        elif line.state == "purging":
            self._expect(InvalidTableState, call)
        elif line.state != "trashed":
            self._expect(TableBranchAlreadyExists, call)
        else:
            self._expect(None, call)
            line.state = "active"

    def expire(self) -> None:
        m = self.model
        self._expect(None, lambda: self.catalog.trash.expire_trash(now_ms=FAR_FUTURE_MS))
        # One pass in key (name) order, as expiry runs: a child purged earlier in the pass frees
        # its parent for the same pass only if the parent comes later.
        for name in sorted(m.lines):
            line = m.lines[name]
            if line.state == "active":
                continue
            if m.has_children(line.lance):
                line.state = "purging"
                continue
            m.lance_alive.discard(line.lance)
            del m.lines[name]

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def lines_agree(self) -> None:
        cat, m = self.catalog, self.model
        main = cat.reads.open_table(T)
        assert (main.version, _ids(main)) == (m.main_version, sorted(m.main_rows))
        listed = {b.branch: (b.state, b.version) for b in cat.branches.list_branches(T, include_trashed=True)}
        assert listed == {n: (line.state, line.version) for n, line in m.lines.items()}
        for name, line in m.lines.items():
            if line.state == "active":
                assert _ids(cat.branches.open_branch(T, name)) == sorted(line.rows), name
        for version in cat.reads.readable_versions(T)[1]:  # every registered version still reads
            _ids(cat.reads.open_table(T, version))


def _rows(ids: list[int]) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64())}).to_reader()


def _ids(snap: Any) -> list[int]:
    return sorted(snap.to_reader(columns=["id"]).read_all().column("id").to_pylist())


def _run(open_env: Callable[[], Env], *, examples: int, steps: int) -> Counter[tuple[str, str]]:
    done: Counter[tuple[str, str]] = Counter()
    machine = type("Machine", (BranchMachine,), {"open_env": staticmethod(open_env), "outcomes": done})
    run_state_machine_as_test(machine, settings=run_settings(examples=examples, steps=steps))
    return done


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[Callable[[], Path]]:
    yield lambda: Path(tempfile.mkdtemp(dir=tmp_path))


@pytest.mark.slow
def test_branches_match_the_model_on_sqlite_and_a_local_folder(homes: Callable[[], Path]) -> None:
    def open_env() -> Env:
        return local_env(homes(), **NO_WINDOW)

    outcomes = _run(open_env, examples=40, steps=24)
    print(f"branch model [sqlite]: {sum(outcomes.values())} steps: {dict(sorted(outcomes.items()))}")
    # The interesting paths were all taken, not only refusals.
    for seen in [
        ("publish", "ok"),
        ("publish", "BranchDiverged"),
        ("undrop", "ok"),
        ("expire", "ok"),
        ("cleanup", "ok"),
        ("compact", "ok"),
    ]:
        assert outcomes[seen] > 0, seen
    assert outcomes[("create", "ok")] > 0 and outcomes[("append_branch", "ok")] > 0


@pytest.mark.slow
def test_branches_match_the_model_on_dynamodb_and_s3(
    homes: Callable[[], Path], moto_endpoint: str, s3: S3Endpoint
) -> None:
    def open_env() -> Env:
        return dynamodb_s3_env(moto_endpoint, s3, homes(), **NO_WINDOW)

    outcomes = _run(open_env, examples=4, steps=12)
    assert outcomes[("create", "ok")] > 0 and outcomes[("append_branch", "ok")] > 0

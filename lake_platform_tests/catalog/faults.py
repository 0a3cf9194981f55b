"""Fault injection through the catalog's named hook points (``Catalog(hook=...)``).

Two tools:

- ``kill_writer``: run one catalog operation in a separate process that SIGKILLs itself the
  moment it reaches a named point (the ``n``-th time), the way a crashed or OOM-killed worker
  dies: no ``finally``, no lease release, no cleanup.
- ``Pause``: stop a thread at a named point until the test lets it go, so two operations on one
  name can be interleaved deterministically.

The writer processes come from a multiprocessing *forkserver* that imports the catalog once:
a fresh interpreter per kill would spend ~3 s importing pyarrow and Lance, a fork of the
forkserver ~40 ms. The forkserver never runs Lance itself, so forking it is safe (forking a
process that already ran Lance's thread pools is not).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.clock import SystemClock
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import lance_engine as engine
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode
from lake_platform.settings import LakeSettings

# The forkserver imports this module before forking writers; Lance warns at every fork of a
# process that imported it, which is exactly what the forkserver is for.
warnings.filterwarnings("ignore", message="lance is not fork-safe")

#: A writer that reaches the end of its operation without meeting its point exits with this.
POINT_NOT_REACHED = 3

Operation = Callable[[Catalog, str], Any]


class KillAt:
    """A hook that SIGKILLs this process at the ``nth`` arrival at ``point``."""

    def __init__(self, point: str, nth: int = 1) -> None:
        self.point, self.nth = point, nth
        self.seen: Counter[str] = Counter()

    def __call__(self, point: str) -> None:
        self.seen[point] += 1
        if point == self.point and self.seen[point] == self.nth:
            os.kill(os.getpid(), signal.SIGKILL)


class Recorder:
    """A hook that lists the points an operation passes, in order."""

    def __init__(self) -> None:
        self.points: list[str] = []

    def __call__(self, point: str) -> None:
        self.points.append(point)

    def occurrences(self) -> list[tuple[str, int]]:
        """Each arrival as (point, n): the n-th arrival at that point."""
        seen: Counter[str] = Counter()
        out = []
        for point in self.points:
            seen[point] += 1
            out.append((point, seen[point]))
        return out


class Pause:
    """A hook that parks the calling thread at ``point`` (its ``nth`` arrival) until ``release()``.

    ``reached`` is set when the thread is parked there; other points pass straight through.
    """

    def __init__(self, point: str, nth: int = 1, timeout: float = 60.0) -> None:
        self.point, self.nth, self.timeout = point, nth, timeout
        self.reached = threading.Event()
        self._go = threading.Event()
        self._seen = 0
        self._lock = threading.Lock()

    def __call__(self, point: str) -> None:
        if point != self.point:
            return
        with self._lock:
            self._seen += 1
            mine = self._seen == self.nth
        if mine:
            self.reached.set()
            if not self._go.wait(self.timeout):
                raise TimeoutError(f"nobody released the pause at {point}")

    def release(self) -> None:
        self._go.set()


class Background:
    """Run ``fn`` in a thread; ``result()`` returns its value or raises what it raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._outcome: list[tuple[bool, Any]] = []
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._outcome.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self._outcome.append((False, exc))

    def result(self, timeout: float = 60.0) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the background operation did not finish")
        ok, value = self._outcome[0]
        if not ok:
            raise value
        return value

    def error(self, timeout: float = 60.0) -> BaseException | None:
        """What the operation raised (None if it returned); a hang still raises TimeoutError."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the background operation did not finish")
        ok, value = self._outcome[0]
        return None if ok else value


class ShiftedClock(SystemClock):
    """The system clock moved ``seconds`` ahead: a contender that arrives that much later."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def monotonic(self) -> float:
        return super().monotonic() + self.seconds

    def wall_ms(self) -> int:
        return super().wall_ms() + int(self.seconds * 1000)


def _writer(
    settings: dict[str, Any],
    module: str,
    operation: str,
    point: str,
    nth: int,
    commit_id: str,
    aws_env: dict[str, str],
) -> None:
    """Forkserver child: run ``operation`` with a hook that kills this process at the point."""
    import importlib

    # The forkserver keeps the environment it started in, perhaps before a test set moto's
    # placeholder AWS credentials: the parent's, as they are now.
    os.environ.update(aws_env)
    op: Operation = getattr(importlib.import_module(module), operation)
    catalog = Catalog(LakeSettings(_env_file=None, **settings), hook=KillAt(point, nth))  # type: ignore[call-arg]
    try:
        op(catalog, commit_id)
    except BaseException:  # noqa: BLE001 - any way out but the kill means the point was missed
        import traceback

        traceback.print_exc()  # why it was missed, on the test's captured stderr
    os._exit(POINT_NOT_REACHED)


_CONTEXT: Any = None


def writer_processes() -> Any:
    """The multiprocessing context writer processes start from (kill writers here, the
    concurrent appenders of ``conftest.append_in_processes``): each a separate process, forked
    from a forkserver that has only imported modules, that builds its own catalog and registry
    client. The forkserver keeps the environment it started in: pass a child what it needs of
    the parent's now (``aws_environment``)."""
    global _CONTEXT
    if _CONTEXT is None:
        ctx = mp.get_context("forkserver")
        # Each child re-runs the parent's main module before it starts; under pytest that is
        # pytest's, so the forkserver imports pytest once (or every kill pays ~1.5 s for it).
        # What every writer imports on its way to the first fault point, imported once here:
        # ``catalog.namespace`` (lance_namespace builds pydantic validators for its whole REST
        # client: ~2 s of CPU), lance and pandas (~1 s, pyarrow's first ``pa.table`` loads
        # pandas), and the modules the writers' functions live in. A child that imported them
        # itself spent 3-12 s of a kill there. Importing starts no Lance runtime (that starts on
        # first use, in the child), so forking stays safe. ``writer_preload``: botocore's
        # DynamoDB model, parsed once here rather than by each writer on a DynamoDB registry.
        ctx.set_forkserver_preload(
            [
                "pytest",
                __name__,
                "lake_platform_tests.catalog.conftest",
                "lake_platform.catalog.namespace",
                "lance",
                "pandas",
                "lake_platform_tests.catalog.writer_preload",
            ]
        )
        _CONTEXT = ctx
    return _CONTEXT


def aws_environment() -> dict[str, str]:
    """The parent's AWS variables as they are now (moto's placeholder credentials, perhaps set
    after the forkserver started), for a writer to set in its own environment."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def kill_writer(
    settings: LakeSettings, operation: Operation, point: str, nth: int, commit_id: str, timeout: float = 300.0
) -> tuple[int, float]:
    """Run ``operation(catalog, commit_id)`` in a writer process killed at ``point``.

    ``timeout`` only catches a writer that hangs, so it is generous: on a loaded 2-core machine
    a writer took 10-30 s (60 s was too close) when it still imported lance_namespace, lance and
    pandas itself; the forkserver preloads them now, and a kill takes about a second.

    ``operation`` must be a module-level function (the child imports it by name). Returns the
    child's exit code (``-SIGKILL`` when the point was reached) and the wall time (seconds since
    the epoch) at which the parent saw it dead.
    """
    proc = writer_processes().Process(
        target=_writer,
        args=(
            settings.model_dump(mode="json"),
            operation.__module__,
            operation.__name__,
            point,
            nth,
            commit_id,
            aws_environment(),
        ),
    )
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise TimeoutError(f"writer did not reach {point} within {timeout}s")
    return int(proc.exitcode or 0), time.time()


# == invariants ==============================================================================


def registered(c: Catalog) -> dict[str, TableRecord]:
    return {r.name: r for r in c.reads.list_tables()}


def check_registry_matches_engine(c: Catalog) -> dict[tuple[str, int], list[int]]:
    """Every registered version of every table opens at exactly that version; returns its ids."""
    seen = {}
    for name, record in registered(c).items():
        versions = [
            decode(VersionRecord, i.value, i.key)
            for i in c.store.scan_prefix(keys.versions(record.incarnation))
        ]
        assert record.current_version in {v.version for v in versions}, (
            f"{name}: current version not registered"
        )
        storage = c.settings.storage_options(record.location)
        for v in versions:
            assert engine.manifest_exists(record.location, v.manifest_path, storage), (
                f"{name} v{v.version}: registered manifest {v.manifest_path} is missing"
            )
            snap = c.reads.open_table(name, v.version)
            assert snap.dataset.version == v.version
            seen[(name, v.version)] = _ids_of(snap)
        assert c.reads.open_table(name).dataset.version == record.current_version
    return seen


def _ids_of(snapshot: Any) -> list[int]:
    from lake_platform_tests.catalog.conftest import ids_of

    return ids_of(snapshot)


# == the operations the kill suite interrupts ==================================================
# Module level, so a forked writer can import them by name. Each takes (catalog, commit_id);
# the ones without a commit id in the catalog's API ignore it.

T = "p.w.ns.t"  #: created with [1, 2, 3], then appended [4] and [5]: versions 1..3, three fragments
NEW = "p.w.ns.t2"  #: not there until ``create`` makes it
KEEP = "p.w.ns.keep"  #: a bystander no operation names: it must never change
GONE = "p.w.ns.gone"  #: dropped with a grace period: one trash record
CASCADE = "p.w.ns2"  #: holds p.w.ns2.a [10] and, one namespace deeper, p.w.ns2.sub.b [20]
DROPPED = "p.w.ns3"  #: held p.w.ns3.c [30] and p.w.ns3.sub.d [40]; cascade-dropped, in the trash
NEW_ROWS = [100, 101]
FAR_FUTURE_MS = 1 << 62


def _rows(ids: list[int]) -> Any:
    from lake_platform_tests.catalog.conftest import rows

    return rows(ids)


def op_append(catalog: Catalog, commit_id: str) -> Any:
    return catalog.tables.append(T, _rows(NEW_ROWS), by=Provenance(commit_id=commit_id))


def op_create(catalog: Catalog, commit_id: str) -> Any:
    return catalog.tables.create_table(NEW, _rows(NEW_ROWS), by=Provenance(commit_id=commit_id))


def op_delete(catalog: Catalog, commit_id: str) -> Any:
    return catalog.tables.delete_rows(T, "id = 2", by=Provenance(commit_id=commit_id))


def op_compact(catalog: Catalog, commit_id: str) -> Any:
    return catalog.versions.compact(T, by=Provenance(commit_id=commit_id))


def op_cleanup(catalog: Catalog, commit_id: str) -> Any:
    from datetime import timedelta

    return catalog.versions.cleanup(T, retention=timedelta(0))


def op_drop(catalog: Catalog, commit_id: str) -> Any:
    return catalog.trash.drop_table(T, purge=True)


def op_drop_namespace(catalog: Catalog, commit_id: str) -> Any:
    return catalog.cascade.drop_namespace(CASCADE, cascade=True)


def op_undrop_namespace(catalog: Catalog, commit_id: str) -> Any:
    return catalog.trash.undrop_namespace(DROPPED)


def op_expire(catalog: Catalog, commit_id: str) -> Any:
    """Expire the dropped table ``GONE`` (only it: the cascade's records are another story)."""
    gone = [i.key for i in catalog.store.scan_prefix(keys.trash_prefix(GONE + "/"))]
    return catalog.trash.expire_trash(now_ms=FAR_FUTURE_MS, only=gone)

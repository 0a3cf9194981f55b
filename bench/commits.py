"""Commit rate: raw registry commits, and small appends through the catalog vs bare Lance.

(a) Registry alone (no Lance): commits per second on one MetaStore backend,
    - 1 writer: a compare-and-swap loop on one key, and a loop of "typical commit" transacts
      (5 ops, the shape of a catalog version commit: put version record, CAS table record,
      put commit-log entry, put commit marker, check the lease);
    - 4 writer processes at once doing typical commits on distinct keys (each its own table);
    - 4 writer processes at once committing to one shared table record (read its revision,
      transact, retry on a failed condition: a CAS retry loop).
(b) Small appends: ``--appends`` batches of ``--batch-rows`` rows appended one by one through the
    full catalog path (``Catalog.append`` by the table's last writer: one registry read, Lance's
    callbacks into the namespace, one registry commit conditional on the released lease record,
    the commit log; architecture.md, "Small appends without acquiring the lease")
    vs bare Lance appends of the same batches (``lance.write_dataset(batch, uri, mode="append")``
    on a plain dataset), plus two references that explain the gap (Lance committing through an
    in-memory namespace; the catalog writing every append under an acquired lease, as any writer
    that did not land the table's current version does). The sides take turns
    one append at a time, so they share the machine's load; median of ``--repeats`` runs.
(c) Where the catalog's append time goes: one more run with timers around each step (lease,
    registry calls, Lance's callbacks into the namespace, Lance's own work), and optionally a
    cProfile listing (``--cprofile N``).
(d) DynamoDB only: partitions written by catalog commits on ``--partition-tables`` tables (create +
    ``--partition-appends`` appends each): distinct partition keys per record kind, read back from
    the table with a Scan, next to what the item layout of older releases would have used.

(e) ``--settle-history N``: the listing of ``_versions/`` every write's settle makes, with N
    versions kept (empty manifests: only names are listed), on a local folder and on S3 (a
    SeaweedFS started here on loopback): the catalog's ``manifests_above`` against the bare
    listing of the same folder (``os.listdir``; pyarrow's ``S3FileSystem``, what the settle used
    before), with the S3 requests each made.

    python bench/commits.py                         # SQLite registry (the embedded default)
    python bench/commits.py --backend dynamodb      # DynamoDB API on a local moto server (started here)
    python bench/commits.py --backend dynamodb --endpoint http://127.0.0.1:5000   # an already-running one

DynamoDB figures come from the moto emulator on this machine, not from AWS: they say nothing about
DynamoDB's real latency or throughput.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
import os
import pstats
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
import pyarrow as pa

TABLE = f"{c.NAMESPACE}.small"
BACKENDS = ("sqlite", "dynamodb")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--backend", choices=BACKENDS, default="sqlite", help="registry backend (default sqlite)")
    p.add_argument(
        "--endpoint",
        default="",
        help="DynamoDB endpoint URL for --backend dynamodb (default: start a moto server on loopback)",
    )
    p.add_argument(
        "--suite-moto",
        action="store_true",
        help="start the test suite's moto instead (lake_platform_tests.servers: TransactGetItems of 100 "
        "items as DynamoDB takes, where plain moto takes 25; needed for --transactions over 25 tables)",
    )
    p.add_argument(
        "--seconds", type=float, default=3.0, help="duration of each registry scenario (default 3)"
    )
    p.add_argument(
        "--writers", type=int, default=4, help="writer processes in the concurrent scenarios (default 4)"
    )
    p.add_argument("--appends", type=int, default=300, help="small appends per run (default 300)")
    p.add_argument("--batch-rows", type=int, default=100, help="rows per small append (default 100)")
    p.add_argument(
        "--repeats", type=int, default=3, help="runs per side for the appends; median reported (default 3)"
    )
    p.add_argument(
        "--profile-appends",
        type=int,
        default=200,
        help="appends in the instrumented breakdown run (0 to skip; default 200)",
    )
    p.add_argument(
        "--cprofile",
        type=int,
        default=0,
        metavar="N",
        help="also run the appends under cProfile and print the top N functions by cumulative time",
    )
    p.add_argument("--skip-registry", action="store_true", help="skip (a), the raw registry scenarios")
    p.add_argument("--skip-appends", action="store_true", help="skip (b) and (c)")
    p.add_argument(
        "--no-references",
        dest="references",
        action="store_false",
        help="time only bare and catalog appends, not the two reference variants",
    )
    p.add_argument(
        "--partition-tables",
        type=int,
        default=8,
        help="(d) DynamoDB partitions: tables committed to (0 to skip; default 8)",
    )
    p.add_argument("--partition-appends", type=int, default=3, help="(d) appends per table (default 3)")
    p.add_argument(
        "--settle-history",
        type=int,
        default=0,
        help="(e) versions kept in _versions/ for the settle listing figures (0 to skip; default 0)",
    )
    p.add_argument(
        "--transactions",
        type=int,
        default=0,
        metavar="TABLES",
        help="(f) a TABLES-table atomic commit vs one single-table commit of the same rows "
        "(bench/transactions.py; 0 to skip; default 0)",
    )
    p.add_argument(
        "--transaction-repeats",
        type=int,
        default=7,
        help="(f) rounds timed, each side once per round; medians reported (default 7)",
    )
    p.add_argument("--seed", type=int, default=7, help="data generator seed (default 7)")
    return p.parse_args(argv)


# == backends =======================================================================================
# A "spec" is a small picklable dict naming a store, so spawned workers can open their own.
# Adding a backend: a branch in open_store, in registry_url and in backend_session.


def open_store(spec: dict[str, str]):  # -> MetaStore
    if spec["backend"] == "sqlite":
        from lake_platform.registry.sqlite import SqliteMetaStore

        return SqliteMetaStore(spec["path"])
    if spec["backend"] == "dynamodb":
        from lake_platform.registry.dynamodb import DynamoMetaStore

        c.moto_dummy_credentials()
        return DynamoMetaStore(
            spec["table"],
            region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            endpoint_url=spec["endpoint"],
        )
    raise ValueError(spec["backend"])


def registry_url(spec: dict[str, str]) -> str:
    if spec["backend"] == "sqlite":
        return f"sqlite:///{spec['path']}"
    return c.dynamodb_url(spec["endpoint"], spec["table"])


def new_spec(session: dict[str, str], tmp: Path, label: str) -> dict[str, str]:
    """A fresh, empty registry for one scenario (a new SQLite file, or a new DynamoDB table)."""
    if session["backend"] == "sqlite":
        return {"backend": "sqlite", "path": (tmp / f"{label}-{uuid.uuid4().hex[:6]}.db").as_posix()}
    spec = {
        "backend": "dynamodb",
        "endpoint": session["endpoint"],
        "table": f"bench-{label}-{uuid.uuid4().hex[:8]}",
    }
    from lake_platform.registry.dynamodb_admin import create_table

    store = open_store(spec)
    try:
        create_table(store)
    finally:
        store.close()
    return spec


@contextmanager
def backend_session(args: argparse.Namespace, tmp: Path) -> Iterator[dict[str, str]]:
    if args.backend == "sqlite":
        yield {"backend": "sqlite"}
        return
    if not c.dynamodb_available():
        # Hook: lake_platform/registry/dynamodb.py (DynamoMetaStore) is not there yet.
        sys.exit(
            "--backend dynamodb needs lake_platform.registry.dynamodb.DynamoMetaStore, which is not "
            "installed in this checkout yet"
        )
    c.moto_dummy_credentials()
    if args.endpoint:
        yield {"backend": "dynamodb", "endpoint": args.endpoint}
        return
    if args.suite_moto:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' moto helper
        from lake_platform_tests.servers import start_moto_server

        endpoint, stop = start_moto_server(tmp)
        try:
            yield {"backend": "dynamodb", "endpoint": endpoint}
        finally:
            stop()
        return
    with c.moto_server(tmp) as endpoint:
        yield {"backend": "dynamodb", "endpoint": endpoint}


def emulator_note(backend: str) -> str:
    if backend == "dynamodb":
        return (
            "NOTE: dynamodb figures are for the moto emulator (a single Python process on this machine), "
            "NOT for AWS DynamoDB"
        )
    return ""


# == (a) raw registry commits =======================================================================


def _commit_values() -> dict[str, bytes]:
    """Encoded records of realistic size for one catalog commit (encoded once, reused)."""
    from lake_platform.catalog.arrow_io import schema_to_ipc
    from lake_platform.registry.records import (
        CommitLogEntry,
        CommitMarker,
        LeaseRecord,
        TableRecord,
        VersionRecord,
    )

    inc = uuid.uuid4().hex
    table = TableRecord(
        name="bench.wh.ns.small",
        incarnation=inc,
        location=f"/tmp/x/small-{inc}.lance",
        current_version=12,
        schema_ipc_b64=TableRecord.encode_schema(schema_to_ipc(c.SCHEMA)),
    )
    version = VersionRecord(
        incarnation=inc,
        version=12,
        manifest_path=f"tmp/x/_versions/{'9' * 20}.manifest-{uuid.uuid4()}",
        manifest_size=1234,
        naming_scheme="V2",
        commit_id=uuid.uuid4().hex,
    )
    entry = CommitLogEntry(
        commit_id=uuid.uuid4().hex,
        target="bench.wh.ns.small",
        operation="append",
        actor="local-admin",
        incarnation=inc,
        from_version=11,
        to_version=12,
        rows_added=100,
        bytes_added=5200,
    )
    marker = CommitMarker(
        commit_id=uuid.uuid4().hex,
        target="bench.wh.ns.small",
        operation="append",
        incarnation=inc,
        from_version=11,
        to_version=12,
        log_key="log/bench.wh.ns.small/x",
    )
    lease = LeaseRecord(incarnation=inc, holder=uuid.uuid4().hex, token=1, deadline_ms=2**42)
    return {
        "table": table.encode(),
        "version": version.encode(),
        "entry": entry.encode(),
        "marker": marker.encode(),
        "lease": lease.encode(),
    }


def registry_worker(
    spec: dict[str, str], mode: str, wid: int, seconds: float, barrier: Any, out: Any
) -> None:
    from lake_platform.errors import ConditionFailed, ServiceUnavailable, Throttling
    from lake_platform.registry.store import ABSENT, Check, Put

    store = open_store(spec)
    vals = _commit_values()
    me = f"w{wid}-{uuid.uuid4().hex[:6]}"
    table_key = "tbl/bench/wh/ns/shared" if mode == "shared" else f"tbl/bench/wh/ns/t-{me}"
    lease_key = f"lse/{me}"
    if mode == "shared":
        try:
            store.put_if_absent(table_key, vals["table"])
        except ConditionFailed:
            pass  # another worker created it
    else:
        store.put_if_absent(table_key, vals["table"])
    lease_rev = store.put_if_absent(lease_key, vals["lease"]).revision
    rev = store.get(table_key).revision  # type: ignore[union-attr]
    commits = conflicts = errors = 0
    barrier.wait()
    t0 = time.monotonic()
    deadline = t0 + seconds
    i = 0
    while time.monotonic() < deadline:
        i += 1
        try:
            if mode == "cas":
                rev = store.compare_and_swap(table_key, rev, vals["table"]).revision
            else:
                if mode == "shared":
                    rev = store.get(table_key).revision  # type: ignore[union-attr]
                ops = [
                    Put(f"ver/{me}/{i:020d}", vals["version"], ABSENT),
                    Put(table_key, vals["table"], rev),
                    Put(f"log/bench.wh.ns.t-{me}/{i:015d}-{me}-000", vals["entry"], ABSENT),
                    Put(f"cid/{me}-{i}", vals["marker"], ABSENT),
                    Check(lease_key, lease_rev),
                ]
                res = store.transact(ops)
                rev = res[1].revision  # type: ignore[union-attr]
            commits += 1
        except ConditionFailed:
            conflicts += 1
        except (ServiceUnavailable, Throttling):
            errors += 1
    elapsed = time.monotonic() - t0
    store.close()
    out.put({"commits": commits, "conflicts": conflicts, "errors": errors, "seconds": elapsed})


def run_registry(args: argparse.Namespace, session: dict[str, str], tmp: Path) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    scenarios = [
        ("1 writer, CAS loop on one key", "cas", 1),
        ("1 writer, 5-op commit transact", "commit", 1),
        (f"{args.writers} writers, 5-op commits, distinct keys", "commit", args.writers),
        (f"{args.writers} writers, 5-op commits, one shared key", "shared", args.writers),
    ]
    rows = []
    for label, mode, n in scenarios:
        spec = new_spec(session, tmp, mode)
        barrier, out = ctx.Barrier(n), ctx.Queue()
        procs = [
            ctx.Process(target=registry_worker, args=(spec, mode, w, args.seconds, barrier, out))
            for w in range(n)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=args.seconds + 120) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        total = sum(r["commits"] for r in results)
        secs = max(r["seconds"] for r in results)
        row = {
            "label": label,
            "commits": total,
            "per_s": total / secs,
            "conflicts": sum(r["conflicts"] for r in results),
            "errors": sum(r["errors"] for r in results),
        }
        rows.append(row)
        print(
            f"  {label:<44}{row['per_s']:>10,.0f} commits/s   (commits {total:,}, failed conditions "
            f"{row['conflicts']:,}, busy/throttled {row['errors']:,})",
            flush=True,
        )
    return rows


# == (b) small appends ===============================================================================


def small_batches(args: argparse.Namespace) -> list[pa.RecordBatch]:
    n = args.batch_rows
    return [c.make_batch(args.seed, i, i * n, n) for i in range(args.appends + 1)]


def catalog_appends(
    spec: dict[str, str],
    tmp: Path,
    batches: list[pa.RecordBatch],
    *,
    around: tuple[Callable[[], None], Callable[[], None]] | None = None,
    **catalog_kw: Any,
) -> tuple[float, float]:
    """Create the table from batches[0] (untimed), then time one Catalog.append per further batch.

    ``around``: (before, after) callbacks run just outside the timed loop (the profiler's switches).
    """
    catalog = c.open_catalog(tmp / "home", registry_url=registry_url(spec), **catalog_kw)
    try:
        catalog.tables.create_table(TABLE, pa.RecordBatchReader.from_batches(c.SCHEMA, [batches[0]]))
        if around:
            around[0]()
        sw = c.Stopwatch()
        for b in batches[1:]:
            catalog.tables.append(TABLE, pa.RecordBatchReader.from_batches(c.SCHEMA, [b]))
        elapsed = sw.stop()
        if around:
            around[1]()
        snap = catalog.reads.open_table(TABLE)
        assert snap.version == len(batches), snap.version
        assert snap.count_rows() == sum(b.num_rows for b in batches)
    finally:
        catalog.close()
    return elapsed


def memory_namespace(location: str):  # -> LanceNamespace
    """A namespace with managed versioning kept in a dict: no registry, no lease, no commit log.

    Appending through it shows what Lance's namespace-managed commit path costs by itself.
    """
    from lance_namespace import LanceNamespace
    from lance_namespace_urllib3_client.models import (
        CreateTableVersionResponse,
        DeclareTableResponse,
        DescribeTableResponse,
        DescribeTableVersionResponse,
        ListTableVersionsResponse,
        TableVersion,
    )

    def field(req: Any, name: str) -> Any:
        return req.get(name) if isinstance(req, dict) else getattr(req, name, None)

    class MemoryNamespace(LanceNamespace):
        def __init__(self) -> None:
            self.versions: dict[int, TableVersion] = {}

        def namespace_id(self) -> str:
            return f"bench-memory:{location}"

        def declare_table(self, req: Any) -> DeclareTableResponse:
            return DeclareTableResponse(location=location, managed_versioning=True)

        def describe_table(self, req: Any) -> DescribeTableResponse:
            return DescribeTableResponse(
                location=location,
                managed_versioning=True,
                version=max(self.versions) if self.versions else None,
            )

        def list_table_versions(self, req: Any) -> ListTableVersionsResponse:
            found = sorted(
                self.versions.values(), key=lambda v: v.version, reverse=bool(field(req, "descending"))
            )
            limit = field(req, "limit")
            return ListTableVersionsResponse(versions=found[: int(limit)] if limit else found)

        def describe_table_version(self, req: Any) -> DescribeTableVersionResponse:
            return DescribeTableVersionResponse(version=self.versions[int(field(req, "version"))])

        def create_table_version(self, req: Any) -> CreateTableVersionResponse:
            number = int(field(req, "version"))
            if number in self.versions:
                raise RuntimeError(f"version {number} exists")
            tv = TableVersion(
                version=number,
                manifest_path=str(field(req, "manifest_path")),
                manifest_size=field(req, "manifest_size"),
                e_tag=field(req, "e_tag"),
                timestamp_millis=int(time.time() * 1000),
            )
            self.versions[number] = tv
            return CreateTableVersionResponse(version=tv)

    return MemoryNamespace()


class BareSide:
    """Plain Lance: ``lance.write_dataset(batch, uri, mode="append")``."""

    label = "bare Lance appends (uri)"

    def __init__(self, session: dict[str, str], tmp: Path, first: pa.RecordBatch) -> None:
        import lance

        self._lance = lance
        self.uri = (tmp / "bare.lance").as_posix()
        lance.write_dataset(first, self.uri, mode="create")

    def append(self, batch: pa.RecordBatch) -> None:
        self._lance.write_dataset(batch, self.uri, mode="append")

    def finish(self, versions: int, rows: int) -> None:
        ds = self._lance.dataset(self.uri)
        assert ds.version == versions and ds.count_rows() == rows


class MemnsSide:
    """Lance committing through a namespace kept in memory (no registry): Lance's own cost of
    namespace-managed versioning. With a Lance session, as the catalog's engine writes (without
    one, Lance's namespace path costs ~0.6-0.8 ms more an append: the breakdown would charge
    to Lance what the catalog does not pay)."""

    label = "reference: Lance + in-memory namespace"

    def __init__(self, session: dict[str, str], tmp: Path, first: pa.RecordBatch) -> None:
        import lance

        from lake_platform.engine.lance_engine import lance_session

        self._lance = lance
        self._session = lance_session()
        self.ns = memory_namespace((tmp / "memns.lance").as_posix())
        lance.write_dataset(
            _reader(first), namespace_client=self.ns, table_id=["t"], mode="create", session=self._session
        )

    def append(self, batch: pa.RecordBatch) -> None:
        self._lance.write_dataset(
            _reader(batch), namespace_client=self.ns, table_id=["t"], mode="append", session=self._session
        )

    def finish(self, versions: int, rows: int) -> None:
        assert max(self.ns.versions) == versions


class CatalogSide:
    """The full catalog path: ``catalog.tables.append(name, reader)``."""

    label = "catalog appends (Catalog.append)"
    heartbeat = True

    def __init__(self, session: dict[str, str], tmp: Path, first: pa.RecordBatch) -> None:
        spec = new_spec(session, tmp, "app")
        self.catalog = c.open_catalog(tmp / "home", registry_url=registry_url(spec), heartbeat=self.heartbeat)
        self.catalog.tables.create_table(TABLE, _reader(first))

    def append(self, batch: pa.RecordBatch) -> None:
        self.catalog.tables.append(TABLE, _reader(batch))

    def finish(self, versions: int, rows: int) -> None:
        snap = self.catalog.reads.open_table(TABLE)
        assert snap.version == versions and snap.count_rows() == rows
        self.catalog.close()


class LeasedSide(CatalogSide):
    """Every append under an acquired lease (the path before the last writer's unacquired
    small appends, and still every other writer's): the catalog forgets that it landed the
    table's current version before each append."""

    label = "reference: catalog, under the lease"

    def append(self, batch: pa.RecordBatch) -> None:
        self.catalog.tables._written.clear()  # noqa: SLF001 - the bench picks the path
        super().append(batch)


def _reader(batch: pa.RecordBatch) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(c.SCHEMA, [batch])


#: The first two give the ratio; the others are references that explain it.
SIDES: dict[str, Any] = {
    "bare": BareSide,
    "catalog": CatalogSide,
    "memns": MemnsSide,
    "leased": LeasedSide,
}


def interleaved_run(
    sides: list[str], session: dict[str, str], tmp: Path, batches: list[pa.RecordBatch]
) -> dict[str, tuple[float, float]]:
    """Append batch i to every side before batch i+1 (rotating who goes first), timing each append.

    Interleaving one append at a time makes every side see the same machine load, which matters
    on a shared 2-core machine far more than anything measured here.
    """
    runners = {}
    for side in sides:
        (tmp / side).mkdir()
        runners[side] = SIDES[side](session, tmp / side, batches[0])
    wall = dict.fromkeys(sides, 0.0)
    cpu = dict.fromkeys(sides, 0.0)
    for i, batch in enumerate(batches[1:]):
        k = i % len(sides)
        for side in sides[k:] + sides[:k]:
            sw = c.Stopwatch()
            runners[side].append(batch)
            w, p = sw.stop()
            wall[side] += w
            cpu[side] += p
    rows = sum(b.num_rows for b in batches)
    for side in sides:
        runners[side].finish(len(batches), rows)
    return {side: (wall[side], cpu[side]) for side in sides}


def run_appends(args: argparse.Namespace, session: dict[str, str], tmp: Path) -> dict[str, float]:
    batches = small_batches(args)
    n = args.appends
    sides = list(SIDES) if args.references else ["bare", "catalog"]
    with c.scratch_dir("bench-commits-warm-") as w:  # warm-up (untimed): first-write costs in this process
        interleaved_run(sides, session, w, batches[:6])
    times: dict[str, list[float]] = {side: [] for side in sides}
    cpus: dict[str, list[float]] = {side: [] for side in sides}
    for rep in range(args.repeats):
        with c.scratch_dir("bench-commits-app-") as d:
            res = interleaved_run(sides, session, d, batches)
        for side, (secs, cpu) in res.items():
            times[side].append(secs)
            cpus[side].append(cpu)
        print(
            f"  run {rep + 1}: "
            + ", ".join(f"{side} {n / secs:,.0f}/s" for side, (secs, _) in res.items())
            + f"  (catalog/bare {res['bare'][0] / res['catalog'][0]:.2f})",
            flush=True,
        )
    med = {side: c.median(v) for side, v in times.items()}
    cpu_med = {side: c.median(v) for side, v in cpus.items()}
    print(f"  ({c.load_line()})")
    print()
    for side in sides:
        print(
            f"  {SIDES[side].label:<42}{n / med[side]:>7,.0f} appends/s  ({1000 * med[side] / n:.2f} ms "
            "each, "
            f"CPU {1000 * cpu_med[side] / n:.2f} ms; median of {args.repeats})"
        )
    ratio = c.median([b / k for b, k in zip(times["bare"], times["catalog"], strict=True)])
    print(
        f"  ratio catalog/bare: {ratio:.3f} median of per-run ratios (goal >= 0.75: "
        f"{'meets' if ratio >= 0.75 else 'MISSES'}); by CPU time: {cpu_med['bare'] / cpu_med['catalog']:.3f}"
    )
    if "memns" in med:
        ms = {side: 1000 * m / n for side, m in med.items()}
        print(
            f"  per append: bare Lance {ms['bare']:.2f} ms + Lance's namespace-managed commit path "
            f"{ms['memns'] - ms['bare']:+.2f} ms + catalog (registry, lease, Python) "
            f"{ms['catalog'] - ms['memns']:+.2f} ms = {ms['catalog']:.2f} ms"
        )
    if "leased" in med:
        leased = c.median([b / k for b, k in zip(times["bare"], times["leased"], strict=True)])
        print(
            "  the last writer's small append without acquiring the lease saves "
            f"{1000 * (med['leased'] - med['catalog']) / n:+.2f} ms per append (catalog under the lease "
            f"minus catalog); under the lease the ratio is {leased:.3f} (CPU "
            f"{cpu_med['bare'] / cpu_med['leased']:.3f})"
        )
    return {side: n / m for side, m in med.items()} | {"ratio": ratio}


# == (c) where the catalog append time goes ========================================================


class Timers:
    """Inclusive wall time and call counts per label, from any thread (Lance calls back from its own)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self.on = False

    def start(self) -> None:
        with self._lock:
            self.seconds.clear()
            self.calls.clear()
            self.on = True

    def stop(self) -> None:
        self.on = False

    def add(self, label: str, secs: float) -> None:
        if not self.on:
            return
        with self._lock:
            self.seconds[label] += secs
            self.calls[label] += 1

    def wrap(self, owner: Any, attr: str, label: str, when: Callable[..., bool] | None = None) -> None:
        original = getattr(owner, attr)
        timers = self

        def wrapper(*a: Any, **kw: Any) -> Any:
            if when is not None and not when(*a, **kw):
                return original(*a, **kw)
            t0 = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                timers.add(label, time.perf_counter() - t0)

        setattr(owner, attr, wrapper)
        self._undo.append(lambda: setattr(owner, attr, original))

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


#: The MetaStore calls counted per append (each one registry request).
REGISTRY_CALLS = ("get", "get_many", "transact", "scan_prefix")


def profile_appends(args: argparse.Namespace, session: dict[str, str]) -> None:
    import lake_platform.catalog.tables as tables_mod
    import lake_platform.engine.lance_engine as eng_mod
    from lake_platform.catalog.context import CatalogContext
    from lake_platform.catalog.gate import WriteGate
    from lake_platform.catalog.manifests import Manifests
    from lake_platform.catalog.namespace import BoundTableNamespace

    n = args.profile_appends
    batches = small_batches(argparse.Namespace(**{**vars(args), "appends": n}))
    store_cls: Any
    if session["backend"] == "sqlite":
        from lake_platform.registry.sqlite import SqliteMetaStore as store_cls
    else:
        from lake_platform.registry.dynamodb import DynamoMetaStore as store_cls

    def is_beat(th: Any, *a: Any, **k: Any) -> bool:
        return th.name == "lease-heartbeat"

    # (owner, attribute, label, indent): the direct steps of Tables.append, in the order they run.
    # Steps the library does not have (any more) are skipped; "*" marks steps that call the registry.
    steps: list[tuple[Any, str, str, int]] = [
        (CatalogContext, "replayed", "replay check: commit-marker get *", 1),
        (CatalogContext, "require_parent", "parent namespace check", 1),
        (CatalogContext, "table", "table record checks (x2)", 1),
        (store_cls, "get_many", "registry reads: parent + table + lease + version *", 1),
        (tables_mod, "schema_from_ipc", "schema decode + conform", 1),
        (tables_mod.Tables, "plan_schema", "schema decode + conform", 1),
        (WriteGate, "acquire", "lease acquire (CAS) *", 1),
        (Manifests, "settle", "settle: listing of _versions/", 1),
        (threading.Thread, "start", "heartbeat thread start + join", 1),
        (threading.Thread, "join", "heartbeat thread start + join", 1),
        (eng_mod, "write", "lance.write_dataset via namespace *", 1),
        (BoundTableNamespace, "describe_table", "ns.describe_table", 2),
        (BoundTableNamespace, "declare_table", "ns.declare_table", 2),
        (BoundTableNamespace, "list_table_versions", "ns.list_table_versions (a stat) *", 2),
        (BoundTableNamespace, "describe_table_version", "ns.describe_table_version *", 2),
        (BoundTableNamespace, "create_table_version", "ns.create_table_version (transact) *", 2),
        (Manifests, "finalize", "finalize: canonical manifest copy + CAS + rm *", 1),
        (tables_mod.Tables, "enrich", "enrich: change stats (skipped for append)", 1),
        (WriteGate, "release", "lease release (CAS) *", 1),
        (tables_mod.Tables, "result", "result: commit-marker get *", 1),
    ]
    t = Timers()
    t.wrap(tables_mod.Tables, "append", "Tables.append (total)")
    for owner, attr, label, _ in steps:
        if hasattr(owner, attr):
            t.wrap(owner, attr, label, when=is_beat if owner is threading.Thread else None)
    for meth in REGISTRY_CALLS:
        t.wrap(store_cls, meth, f"registry {meth}")
    try:
        with c.scratch_dir("bench-commits-prof-") as d:
            secs = catalog_appends(new_spec(session, d, "prof"), d, batches, around=(t.start, t.stop))
    finally:
        t.restore()

    def per(label: str) -> float:
        return 1000 * t.seconds.get(label, 0.0) / n

    total = per("Catalog.append (total)")
    print(f"  {n} instrumented appends in {secs[0]:.2f} s ({n / secs[0]:,.0f} appends/s with timers on)")
    step = "step (inclusive wall time per append; * = calls the registry)"
    print(f"  {step:<60}{'calls':>7}{'ms':>9}{'share':>8}")

    def line(label: str, indent: int, ms: float | None = None, calls: float | None = None) -> None:
        ms = per(label) if ms is None else ms
        shown = f"{calls:.2f}" if calls is not None else ""
        print(f"  {'  ' * indent + label:<60}{shown:>7}{ms:>9.3f}{100 * ms / total:>7.1f}%")

    line("Catalog.append (total)", 0, calls=t.calls["Catalog.append (total)"] / n)
    seen: list[str] = []
    named = callbacks = 0.0
    for _, _, label, indent in steps:
        if label in seen or label not in t.calls:
            continue
        seen.append(label)
        line(label, indent, calls=t.calls[label] / n)
        if indent == 1:
            named += per(label)
        else:
            callbacks += per(label)
        if label.startswith("ns.create_table_version"):
            own = per("lance.write_dataset via namespace *") - callbacks
            line("Lance's own work (write_dataset minus callbacks)", 2, ms=own)
    line("other (parsing, reader wrapping, ids, context managers)", 1, ms=total - named)
    print("  registry calls per append, all threads (already inside the * steps above):")
    for meth in REGISTRY_CALLS:
        label = f"registry {meth}"
        if t.calls.get(label):
            print(
                f"    {meth:<12}{t.calls[label] / n:>6.2f} calls/append  "
                f"{1000 * t.seconds[label] / t.calls[label]:.3f} ms/call"
                f"  {per(label):.3f} ms/append ({100 * per(label) / total:.1f}%)"
            )

    if args.cprofile:
        prof = cProfile.Profile()
        with c.scratch_dir("bench-commits-cprof-") as d:
            spec = new_spec(session, d, "cprof")
            catalog_appends(spec, d, batches, around=(prof.enable, prof.disable))
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(args.cprofile)
        print(
            f"\n  cProfile of {n} appends (main thread only: Lance's callbacks run on its own threads "
            "and show "
            f"inside write_dataset), top {args.cprofile} by cumulative time:"
        )
        print("\n".join("    " + ln for ln in s.getvalue().splitlines() if ln.strip()))


# == (d) DynamoDB partitions ========================================================================


def count_partitions(args: argparse.Namespace, session: dict[str, str], tmp: Path) -> dict[str, int]:
    """Commit on N tables through the catalog, then count the distinct partition keys written."""
    from collections import Counter

    from lake_platform.registry.dynamodb_layout import LAYOUT_P, partition_v1

    n, appends = args.partition_tables, args.partition_appends
    spec = new_spec(session, tmp, "parts")
    batches = small_batches(argparse.Namespace(**{**vars(args), "appends": appends + 1}))
    catalog = c.open_catalog(tmp / "parts-home", registry_url=registry_url(spec))
    try:
        for t in range(n):
            name = f"{c.NAMESPACE}.t{t:03d}"
            catalog.tables.create_table(name, _reader(batches[0]))
            for b in batches[1:]:
                catalog.tables.append(name, _reader(b))
    finally:
        catalog.close()
    store = open_store(spec)
    pairs: list[tuple[str, str]] = []
    params: dict[str, Any] = {"TableName": spec["table"], "ConsistentRead": True}
    while True:
        resp = store._client.scan(**params)
        pairs += [(r["p"]["S"], r["k"]["S"]) for r in resp["Items"] if r["p"]["S"] != LAYOUT_P]
        if "LastEvaluatedKey" not in resp:
            break
        params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
    store.close()
    items = Counter(k.split("/")[0] for _, k in pairs)
    now = {kind: len({p for p, k in pairs if k.split("/")[0] == kind}) for kind in items}
    print(f"  {n} tables x (create + {appends} appends) = {n * (appends + 1)} commits; items per kind:")
    print(f"  {'kind':<6}{'items':>7}{'partitions now':>16}{'layout 1 (before)':>19}")
    for kind in sorted(items):
        legacy = len({partition_v1(k) for p, k in pairs if k.split("/")[0] == kind})
        print(f"  {kind:<6}{items[kind]:>7}{now[kind]:>16}{legacy:>19}")
    versions = now.get("ver", 0)
    print(
        f"  version records of {n} tables: {versions} distinct partition keys "
        f"({'one per table' if versions == n else 'NOT one per table'}); layout 1 used 1"
    )
    return now


# == (e) the settle's listing on a long history ==================================================


def settle_listing(versions: int, tmp: Path, rounds: int = 15) -> None:
    """``manifests_above`` against the bare listing of the same ``_versions/``, local and S3."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs

    from lake_platform.engine.manifests import final_manifest_name, manifests_above
    from lake_platform.engine.storage import filesystem, s3_client
    from lake_platform.settings import load_settings

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' SeaweedFS helper
    from lake_platform_tests.s3_server import s3_for_tests

    names = [final_manifest_name(v) for v in range(1, versions + 1)]
    local = tmp / "settle.lance"
    (local / "_versions").mkdir(parents=True)
    for name in names:
        (local / "_versions" / name).touch()
    s3 = s3_for_tests(tmp / "weed")
    try:
        prefix = s3.new_prefix()
        client = s3.client()

        def put(name: str) -> None:
            client.put_object(Bucket=s3.bucket, Key=f"{prefix}/t.lance/_versions/{name}", Body=b"")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, names))
        remote = f"s3://{s3.bucket}/{prefix}/t.lance"
        options = load_settings(**s3.lake_settings()).storage_options(remote)
        fs, root = filesystem(remote, options)
        requests: list[int] = []
        ours = s3_client(options)
        ours.meta.events.register("after-call.s3.ListObjectsV2", lambda **_: requests.append(1))

        def bare_s3() -> object:
            return fs.get_file_info(pafs.FileSelector(f"{root}/_versions"))

        sides = {
            "local: manifests_above": lambda: manifests_above(str(local), versions),
            "local: os.listdir (bare)": lambda: os.listdir(local / "_versions"),
            "S3: manifests_above": lambda: manifests_above(remote, versions, options),
            "S3: pyarrow listing (bare; the settle before)": bare_s3,
        }
        assert manifests_above(remote, versions, options) == ([], True)
        times: dict[str, list[float]] = {k: [] for k in sides}
        for _ in range(rounds):  # interleaved: every side sees the same load
            for label, run in sides.items():
                sw = c.Stopwatch()
                run()
                times[label].append(sw.stop()[0])
        requests.clear()
        manifests_above(remote, versions, options)
        made = f"{len(requests)} list request(s)" if requests else "pyarrow's one list request (one page)"
        med = {k: 1000 * c.median(v) for k, v in times.items()}
        print(f"  {versions:,} versions kept; median ms of {rounds} interleaved rounds:")
        for label, ms in med.items():
            print(f"    {label:<48}{ms:>9.2f} ms")
        local_ratio = med["local: manifests_above"] / med["local: os.listdir (bare)"]
        s3_ratio = med["S3: manifests_above"] / med["S3: pyarrow listing (bare; the settle before)"]
        print(
            f"  local: ours / bare listing {local_ratio:.2f}x; S3: ours / the full listing {s3_ratio:.3f}x, "
            f"{made} against {-(-versions // 1000)} for the full listing"
        )
    finally:
        s3.stop()


# == main ========================================================================================


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(c.machine_line())
    print(
        f"backend: {args.backend}"
        + (
            f" (endpoint {args.endpoint or 'local moto server'})"
            if args.backend == "dynamodb"
            else " (WAL, synchronous=NORMAL)"
        )
    )
    note = emulator_note(args.backend)
    if note:
        print(note)
    with c.scratch_dir("bench-commits-") as tmp, backend_session(args, tmp) as session:
        if not args.skip_registry:
            print(f"\n(a) raw registry commits ({args.seconds:.0f} s per scenario, separate processes):")
            run_registry(args, session, tmp)
        if not args.skip_appends:
            print(
                f"\n(b) small appends: {args.appends} x {args.batch_rows}-row batches, {args.repeats} "
                "runs per side:"
            )
            run_appends(args, session, tmp)
            if args.profile_appends:
                print(
                    f"\n(c) where a catalog append's time goes ({args.profile_appends} appends, "
                    "timers around each step):"
                )
                profile_appends(args, session)
        if args.backend == "dynamodb" and args.partition_tables > 0:
            print(f"\n(d) partitions written by commits on {args.partition_tables} tables:")
            count_partitions(args, session, tmp)
        if args.settle_history > 0:
            print(f"\n(e) the settle's listing of _versions/ with {args.settle_history:,} versions kept:")
            settle_listing(args.settle_history, tmp)
        if args.transactions > 0:
            from transactions import run_transactions

            print(f"\n(f) a {args.transactions}-table atomic commit vs one single-table commit:")
            run_transactions(
                registry_url(new_spec(session, tmp, "tx")),
                tmp,
                tables=args.transactions,
                repeats=args.transaction_repeats,
            )
    if note:
        print("\n" + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

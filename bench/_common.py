"""Shared helpers for the benchmark scripts (not a test module; not imported by the library).

Every script runs as ``python bench/X.py``, so this file is imported as the top-level module
``_common`` (the script's folder is first on ``sys.path``).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

# The engine sets Lance's log filter before lance is first imported; import it first so bare-Lance
# runs in these scripts log exactly like the catalog's.
import lake_platform.engine.lance_engine  # noqa: F401
from lake_platform.up.processes import bound_to_parent

MB = 1_000_000  # figures are decimal megabytes (MB/s), as storage vendors and Lance report them

# -- data ----------------------------------------------------------------------------------------

CATEGORIES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("category", pa.string()),
        ("value", pa.float64()),
        ("payload", pa.string()),
    ]
)
_BASE_US = 1_700_000_000_000_000  # 2023-11-14, a fixed origin so runs are identical
_CATEGORY_ARRAY = pa.array(CATEGORIES, pa.string())


def make_batch(seed: int, index: int, start_id: int, rows: int) -> pa.RecordBatch:
    """One deterministic batch: the same (seed, index, start_id, rows) gives the same bytes."""
    rng = np.random.default_rng([seed, index])
    ids = np.arange(start_id, start_id + rows, dtype=np.int64)
    ts = _BASE_US + ids * 1_000 + rng.integers(0, 1_000, rows, dtype=np.int64)
    cat_idx = rng.integers(0, len(CATEGORIES), rows, dtype=np.int32)
    value = rng.standard_normal(rows)
    lengths = rng.integers(10, 16, rows, dtype=np.int32)  # payload: 10-15 ASCII letters
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    payload = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids),
            pa.array(ts, pa.int64()).view(pa.timestamp("us", tz="UTC")),
            _CATEGORY_ARRAY.take(pa.array(cat_idx)),
            pa.array(value),
            payload,
        ],
        schema=SCHEMA,
    )


@dataclass
class Tally:
    """What a generated stream has yielded so far (filled in while the consumer drains it)."""

    rows: int = 0
    nbytes: int = 0


def make_reader(
    rows: int, batch_rows: int, seed: int, tally: Tally | None = None, *, start_id: int = 0
) -> pa.RecordBatchReader:
    """A generator-backed reader: batches are made on the fly, never all held at once."""

    def batches() -> Iterator[pa.RecordBatch]:
        done, index = 0, 0
        while done < rows:
            n = min(batch_rows, rows - done)
            batch = make_batch(seed, index, start_id + done, n)
            if tally is not None:
                tally.rows += n
                tally.nbytes += batch.nbytes
            yield batch
            done += n
            index += 1

    return pa.RecordBatchReader.from_batches(SCHEMA, batches())


# -- catalog setup ---------------------------------------------------------------------------------

PROJECT, WAREHOUSE, NAMESPACE = "bench", "bench.wh", "bench.wh.ns"


def open_catalog(home: Path, *, registry_url: str | None = None, **catalog_kw: object):  # -> Catalog
    """A catalog on a fresh home with project/warehouse/namespace ready (``bench.wh.ns``)."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    overrides: dict[str, object] = {"home": home, "_env_file": None}
    if registry_url:
        overrides["registry_url"] = registry_url
    settings = load_settings(**overrides)
    catalog = Catalog(settings, **catalog_kw)
    catalog.containers.create_project(PROJECT)
    catalog.containers.create_warehouse(WAREHOUSE)
    catalog.containers.create_namespace(NAMESPACE)
    return catalog


@contextmanager
def scratch_dir(prefix: str, keep: bool = False) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if keep:
            print(f"(kept {path})")
        else:
            shutil.rmtree(path, ignore_errors=True)


# -- measuring -------------------------------------------------------------------------------------


def vm_hwm_bytes() -> int:
    """Peak resident set size of this process (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM not found in /proc/self/status")


def vm_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


class Stopwatch:
    """Wall time and this process's CPU time (all its threads, Lance's included) since creation.

    CPU time hardly moves when other work shares the machine, so CPU ratios are the steadier
    comparison on a busy machine; wall time is what a user waits for.
    """

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def machine_line() -> str:
    import lance

    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except OSError:
        pass
    return (
        f"machine: {os.cpu_count()} cores{mem}, {platform.machine()}, Python {platform.python_version()}, "
        f"pylance {lance.__version__}, pyarrow {pa.__version__}; {load_line()}"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_line() -> str:
    """Other work on the machine skews every figure: print the load average with them."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


# -- the REST benches ---------------------------------------------------------------------------


class SqlInfoServer(fl.FlightServerBase):
    """A bench's bare Flight SQL server on loopback, without authentication: it answers
    GetSqlInfo (which ADBC asks at connect); ``statement_info`` and ``statement_stream`` (and a
    subclass's ``do_action``) answer the statements."""

    def __init__(self) -> None:
        from lake_platform.flight import sqlinfo

        super().__init__("grpc://127.0.0.1:0")
        self.info = sqlinfo.standard_info(max_statement_bytes=1 << 20, statement_timeout_ms=60_000)

    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        from lake_platform.flight import proto, schemas

        name, payload = proto.unpack_any(descriptor.command)
        if name == "CommandGetSqlInfo":
            ticket = b"info:" + payload
            return fl.FlightInfo(schemas.SQL_INFO, descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1)
        return self.statement_info(name, payload, descriptor)

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.RecordBatchStream:
        from lake_platform.flight import proto, sqlinfo

        if ticket.ticket.startswith(b"info:"):
            info = proto.parse(proto.CommandGetSqlInfo, ticket.ticket[5:])
            return fl.RecordBatchStream(sqlinfo.sql_info_table(self.info, list(info.info)))
        return self.statement_stream(ticket.ticket)

    def statement_info(self, name: str, payload: bytes, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        raise NotImplementedError

    def statement_stream(self, ticket: bytes) -> fl.RecordBatchStream:
        raise NotImplementedError


def adbc_connect(port: int, user: str | None = "bench", password: str = "bench-password") -> Any:
    """An ADBC Flight SQL connection (autocommit, user and password) to a bench's server on
    loopback; the default login is the one the Flight benches' servers accept. ``user`` None:
    no login (a bare server without authentication)."""
    import adbc_driver_flightsql.dbapi as fsql

    login = {"username": user, "password": password} if user is not None else None
    return fsql.connect(f"grpc://127.0.0.1:{port}", db_kwargs=login, autocommit=True)


def spawn(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` for a bench's server: the kernel stops it if the bench is killed or
    crashes before its ``terminate``."""
    return subprocess.Popen(bound_to_parent(cmd), **kwargs)


def terminate(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 10) -> None:
    """Stop a bench's server processes and wait for each."""
    for proc in procs:
        proc.terminate()
        proc.wait(timeout)


def rest_lake(home: Path):  # -> tuple[Catalog, str]
    """A catalog at ``home`` with project ``p``, warehouse ``p.w``, namespace ``p.w.ns``, and a
    writer token for ``p`` (what the REST benches' clients use)."""
    catalog = open_catalog(home)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    return catalog, catalog.access.create_token("bench", project="p", role="writer")[1]


def serve_rest(home: Path, port: int, pythonpath: str | None = None) -> subprocess.Popen[bytes]:
    """A ``lake serve-rest`` process over the lake at ``home`` on ``port`` (another checkout's code
    when ``pythonpath`` is given); ``wait_rest`` until it answers."""
    env = {**os.environ, "LAKE_HOME": str(home), "LAKE_REST_PORT": str(port)}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return spawn(
        [sys.executable, "-m", "lake_platform.cli", "serve-rest"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_rest(url: str, timeout: float = 60) -> None:
    """Until a Lance REST server at ``url`` answers HTTP (any status: unauthenticated is up)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with opener.open(url + "/v1/namespace/$/list", timeout=1):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise TimeoutError(url)


# -- moto (DynamoDB emulator) for --backend dynamodb ----------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def moto_dummy_credentials() -> None:
    """moto accepts any credentials; set placeholders only where none are configured."""
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)


@contextmanager
def moto_server(log_dir: Path) -> Iterator[str]:
    """Start ``moto_server`` on a free loopback port (stopped by its pid afterwards); yield its URL."""
    script = Path(sys.executable).with_name("moto_server")
    port = free_port()
    cmd = ([str(script)] if script.exists() else [sys.executable, "-m", "moto.server"]) + [
        "-H",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    log = (log_dir / "moto.log").open("wb")
    proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(150):
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited; see {log_dir / 'moto.log'}")
            try:
                with opener.open(f"{endpoint}/moto-api/", timeout=0.5):
                    break
            except urllib.error.HTTPError:
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        else:
            raise RuntimeError("moto_server did not become ready")
        yield endpoint
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


def dynamodb_available() -> bool:
    try:
        import lake_platform.registry.dynamodb  # noqa: F401
    except ImportError:
        return False
    return True


def dynamodb_url(endpoint: str, table: str) -> str:
    from urllib.parse import urlencode

    query = urlencode({"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), "endpoint_url": endpoint})
    return f"dynamodb://{table}?{query}"

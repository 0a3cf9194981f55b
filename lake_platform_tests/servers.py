"""Test servers on free loopback ports, started and stopped by process id."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from lake_platform.up.processes import bound_to_parent

_READY_TRIES = 150
_READY_INTERVAL = 0.1


def free_port() -> int:
    """A loopback port free right now (a server that loses it to a race retries with a new one)."""
    return free_ports(1)[0]


def free_ports(count: int, *, pair_offset: int = 0) -> list[int]:
    """``count`` distinct free loopback ports; with ``pair_offset``, the last two are ``p`` and
    ``p + pair_offset`` (for a server that derives one port from another)."""
    socks: list[socket.socket] = []

    def bind(port: int) -> int | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            return None
        socks.append(sock)  # held until every port is chosen, so the ports are distinct
        return int(sock.getsockname()[1])

    try:
        if not pair_offset:
            return [port for _ in range(count) if (port := bind(0)) is not None]
        ports = [port for _ in range(count - 2) if (port := bind(0)) is not None]
        for _ in range(200):
            first = bind(0)
            if (
                first is not None
                and first + pair_offset <= 65535
                and (second := bind(first + pair_offset)) is not None
            ):
                return [*ports, first, second]
        raise RuntimeError(f"found no free loopback port pair (p, p + {pair_offset})")
    finally:
        for sock in socks:
            sock.close()


#: Lease timings for tests whose DynamoDB requests are whole-table Scans or big batches on moto: a
#: registry request gets 1 s by default (half the lease I/O timeout, so lease I/O gives up within
#: the safety margin), and moto, Python serving one request at a time, answered such a Scan of a
#: 150-item table in up to 2 s on a loaded 2-core machine (production DynamoDB: milliseconds).
#: For tests of counts and outcomes, not latency.
SLOW_IO = {"lease_ttl_seconds": 120.0, "lease_safety_margin_seconds": 40.0, "lease_io_timeout_seconds": 30.0}

# moto_server's app with fidelity and speed fixes, applied only in the server process:
# 1. One request at a time. moto's threaded server checks a condition and then writes without a
#    lock, so two concurrent conditional writes can both win (seen about once in 300 eight-way
#    races), and a cancelled TransactWriteItems restores a table snapshot over concurrent writes.
#    DynamoDB makes each item write and each transaction atomic; serializing restores that, so the
#    contract's concurrency tests test our code, not moto's races.
# 2. TransactWriteItems snapshots each table once per call, not once per operation. moto 5.2.5
#    deep-copies the whole table for every one of up to 100 ops (identical copies: nothing is
#    written yet), so a 100-op batch on a 1000-item table took seconds and hit client timeouts.
#    If moto's internals move, the patch is skipped and only speed suffers.
_SERIALIZED_MOTO = """
import copy, sys, threading, types, warnings
import uvicorn
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

try:
    import moto.dynamodb.models as models
    snapshots = None

    def deepcopy(obj, memo=None):
        if snapshots is not None and isinstance(obj, models.Table):
            if id(obj) not in snapshots:
                snapshots[id(obj)] = copy.deepcopy(obj)
            return snapshots[id(obj)]
        return copy.deepcopy(obj, memo)

    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        global snapshots
        snapshots = {}
        try:
            return original(self, transact_items)
        finally:
            snapshots = None

    if models.copy is copy:
        models.copy = types.SimpleNamespace(deepcopy=deepcopy, copy=copy.copy)
        models.DynamoDBBackend.transact_write_items = transact_write_items
except (ImportError, AttributeError):
    pass

try:
    # moto 5.2.5 still caps TransactGetItems at its old limit of 25 items; DynamoDB takes 100
    # (since 2022), as MetaStore.get_many relies on.
    import moto.dynamodb.responses as responses

    responses.TRANSACTION_MAX_ITEMS = max(responses.TRANSACTION_MAX_ITEMS, 100)
except (ImportError, AttributeError):
    pass

try:
    # 3. A Query on the table's own key reads that hash key's items only. moto 5.2.5 sorts every
    #    item of the table for each Query and then keeps the one partition's, so a Query cost
    #    grew with the table: 120 ms on a 600-item table (80 ms for an empty partition) against
    #    a GetItem's 10 ms, and a layout-2 listing is 16 Queries. The answer is unchanged: the
    #    same items, which moto then sorts by range key. Requests are serialized (the lock
    #    below), so the table's all_items is shadowed for this one call only.
    import inspect
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    query_params = inspect.signature(original_query)

    def query(self, *args, **kwargs):
        bound = query_params.bind(self, *args, **kwargs).arguments
        hash_key = bound.get("hash_key")
        if bound.get("index_name") is not None or hash_key is None or not self.range_key_attr:
            return original_query(self, *args, **kwargs)
        partition = list(self.items.get(hash_key, {}).values())
        self.all_items = lambda: partition
        try:
            return original_query(self, *args, **kwargs)
        finally:
            del self.all_items

    if "all_items" in inspect.getsource(original_query):
        Table.query = query
except (ImportError, AttributeError, TypeError, ValueError, OSError):
    pass

app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()

def serialized(environ, start_response):
    with lock:
        return list(app(environ, start_response))

# 4. Served by uvicorn, not werkzeug's dev server: werkzeug answers every request with
#    "Connection: close", so each DynamoDB call opened a new TCP connection and a new server
#    thread (about 20% of a GetItem's CPU, client and server, on loopback). uvicorn keeps
#    connections alive, long enough that none is closed under a client between two calls.
#    Its WSGI interface is deprecated in favour of a2wsgi (not installed); it is uvicorn's own.
warnings.filterwarnings("ignore", category=DeprecationWarning, module="uvicorn")
uvicorn.run(
    serialized,
    host=sys.argv[1],
    port=int(sys.argv[2]),
    interface="wsgi",
    lifespan="off",
    log_level="warning",
    timeout_keep_alive=600,
)
"""


def _moto_command(port: int) -> list[str]:
    return [sys.executable, "-c", _SERIALIZED_MOTO, "127.0.0.1", str(port)]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def start_moto_server(tmp_dir: Path) -> tuple[str, Callable[[], None]]:
    """Start moto's server on a free loopback port; return its endpoint URL and a stop function
    (which stops that one process by its id).

    The server's output goes to ``tmp_dir/moto.log`` (read it when a test fails to connect).
    """
    tmp_dir.mkdir(parents=True, exist_ok=True)
    log_path = tmp_dir / "moto.log"
    log = log_path.open("wb")
    # The port can be taken between our probe and moto's bind; a retry with a new port covers it.
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen(
            bound_to_parent(_moto_command(port)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        endpoint = f"http://127.0.0.1:{port}"
        if _wait_ready(endpoint, proc):

            def stop(proc: subprocess.Popen[bytes] = proc) -> None:
                _stop(proc)
                log.close()

            return endpoint, stop
        _stop(proc)
    log.close()
    raise RuntimeError(f"moto server did not start; see {log_path}:\n{log_path.read_text()[-2000:]}")


def _wait_ready(endpoint: str, proc: subprocess.Popen[bytes]) -> bool:
    # Readiness polling: any HTTP answer (even an error status) means the server is serving.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(_READY_TRIES):
        if proc.poll() is not None:
            return False
        try:
            with opener.open(f"{endpoint}/moto-api/", timeout=0.5):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            time.sleep(_READY_INTERVAL)
    return False


def killed_parent(
    code: str, within: float, *, servers: int = 1, env: dict[str, str] | None = None
) -> list[str]:
    """Run ``code`` as a parent process: it prints, on one line, the pids of the ``servers``
    processes it started, then anything else. Kill the parent with SIGKILL (it runs no cleanup)
    and assert each of those processes exits within ``within`` seconds. Returns the rest of
    the printed line."""
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert parent.stdout is not None
    printed = parent.stdout.readline().split()
    assert len(printed) >= servers, f"the parent printed {printed!r}, not {servers} pids"
    pids, rest = [int(pid) for pid in printed[:servers]], printed[servers:]
    watches = [os.pidfd_open(pid) for pid in pids]  # each readable once its process has exited
    try:
        assert select.select(watches, [], [], 0)[0] == []  # alive while their parent is
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + within
        waiting = list(watches)
        while waiting and (left := deadline - time.monotonic()) > 0:
            for done in select.select(waiting, [], [], left)[0]:
                waiting.remove(done)
        assert not waiting, f"{len(waiting)} of {servers} servers outlived their killed parent"
    finally:
        for pid, watch in zip(pids, watches, strict=True):
            # A failed check leaves nothing behind: a server still running (so its pid is still
            # its own, never a reused one) is killed with its process group.
            if not select.select([watch], [], [], 0)[0]:
                for kill in (os.killpg, os.kill):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        kill(pid, signal.SIGKILL)
            os.close(watch)
        if parent.stdin is not None:
            parent.stdin.close()
    return rest

"""Bring the platform up on the embedded default: Dagster webserver + daemon, Flight SQL, the
Lance Namespace REST server, the demo lake (with a demo reader), and sample files in the inbox
for the sensor.

``run_platform(settings)`` blocks until Ctrl-C and then stops everything it started;
``start_platform(settings)`` returns a handle (tests use it) whose ``stop()`` does the same.
A killed launcher (SIGKILL, the OOM killer) stops nothing itself: each server it started is
sent SIGTERM by the kernel when it dies (``die_with_parent``) and shuts down as on Ctrl-C.
Dagster keeps its state in ``DAGSTER_HOME = <LAKE_HOME>/dagster`` (``dagster.yaml`` written there
by ``lake_platform.defs.instance``: the repository's, plus Postgres storage when
``LAKE_DAGSTER_POSTGRES_URL`` is set).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from lake_platform import owner_only
from lake_platform.errors import SettingsError
from lake_platform.settings import LakeSettings
from lake_platform.up.processes import die_with_parent

DEFAULT_UI_HOST = "127.0.0.1"
DEFAULT_UI_PORT = 3000

_WORKSPACE_YAML = """\
load_from:
  - python_module:
      module_name: lake_platform.defs.definitions
      location_name: lake_platform
"""


@dataclass
class Platform:
    ui_url: str
    dagster_home: Path
    inbox: str
    demo_table: str
    seeded: list[str]
    flight_address: str = ""
    rest_address: str = ""
    #: /metrics of the Flight and the REST process ("" when LAKE_METRICS_PORT is unset).
    metrics_urls: tuple[str, ...] = ()
    demo_user: tuple[str, str] = ("", "")
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every process this platform started (each in its own process group, so the code
        servers and run workers they spawned go too)."""
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        for log in self.logs:
            log.close()


def prepare_dagster_home(settings: LakeSettings) -> Path:
    # Dagster's own storage and the runs' logs are written at the umask's mode: a 0700 folder
    # keeps them (run configs, step output) from other users of the machine.
    home = owner_only.make_dir(Path(settings.home).expanduser().resolve() / "dagster", narrow=True)
    from lake_platform.defs.instance import instance_yaml
    from lake_platform.settings import dagster_settings

    owner_only.write_text(home / "dagster.yaml", instance_yaml(dagster_settings()))
    owner_only.write_text(home / "workspace.yaml", _WORKSPACE_YAML)
    _init_dagster_storage(home)
    return home


def _init_dagster_storage(home: Path) -> None:
    """Create Dagster's SQLite storages once, before several processes race to create them
    (that race leaves two alembic heads and a code location that fails to load)."""
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
        instance.all_instigator_state()


def seed_demo_inbox(settings: LakeSettings) -> tuple[str, str, list[str]]:
    """Create the demo lake and drop sample files into its inbox folder (each once)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.maintenance.inbox import open_inbox, table_folder
    from lake_platform.up import demo

    with Catalog(settings) as catalog:
        summary = demo.seed_demo(catalog)
    location = settings.inbox_location()
    box = open_inbox(location, settings)
    folder = table_folder(demo.TABLE_NAME)
    samples = {
        f"{folder}/seed-0001.parquet": ("parquet", demo.sample_orders(1000, 500)),
        f"{folder}/seed-0002.csv": ("csv", demo.sample_orders(1500, 250)),
        f"{folder}/seed-0003.parquet": ("parquet", demo.sample_orders(1750, 250)),
    }
    dropped = []
    for key, (fmt, table) in samples.items():
        if box.stat(key) is not None or box.in_quarantine(key):
            continue
        buf = io.BytesIO()
        if fmt == "parquet":
            pq.write_table(table, buf)
        else:
            pcsv.write_csv(table, buf)
        box.put(key, buf.getvalue())
        dropped.append(key)
    return summary.table, location, dropped


def start_platform(
    settings: LakeSettings,
    ui_host: str = DEFAULT_UI_HOST,
    ui_port: int = DEFAULT_UI_PORT,
    *,
    seed: bool = True,
    log_dir: Path | None = None,
    ready_timeout: float = 180.0,
    flight_port: int | None = None,
    rest_port: int | None = None,
) -> Platform:
    lake_home = owner_only.make_dir(Path(settings.home).expanduser().resolve())
    dagster_home = prepare_dagster_home(settings)
    table, inbox, dropped = seed_demo_inbox(settings) if seed else ("", settings.inbox_location(), [])
    if "://" not in inbox:
        inbox = Path(inbox).expanduser().resolve().as_posix()
    # The processes read LakeSettings from the environment: hand them exactly these settings.
    lake_env = {
        f"LAKE_{k.upper()}": str(v) for k, v in settings.model_dump(mode="json").items() if v is not None
    }
    lake_env.update(_absolute_paths(settings))
    env = {
        **os.environ,
        **lake_env,
        "DAGSTER_HOME": str(dagster_home),
        "LAKE_HOME": str(lake_home),
        "LAKE_INBOX": inbox,
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    workspace = str(dagster_home / "workspace.yaml")
    logs = Path(log_dir) if log_dir else dagster_home / "logs"
    owner_only.make_dir(logs)
    url = f"http://{ui_host}:{ui_port}"
    from lake_platform.settings.flight import flight_settings

    flight = flight_settings(settings, **({"port": flight_port} if flight_port is not None else {}))
    platform = Platform(
        url,
        dagster_home,
        inbox,
        table,
        dropped,
        flight_address=f"{flight.host}:{flight.port}",
        rest_address=f"{settings.rest_host}:{rest_port if rest_port is not None else settings.rest_port}",
        demo_user=_demo_user(settings) if seed else ("", ""),
    )
    child_env = {name: env for name in ("webserver", "daemon", "flight", "rest")}
    rest_metrics = rest_metrics_port(settings)
    if rest_metrics is not None:
        # Flight and REST are separate processes here: one port each (in one process they share one).
        child_env["rest"] = {**env, "LAKE_METRICS_PORT": str(rest_metrics)}
        if settings.metrics_port:
            platform.metrics_urls = tuple(
                f"http://{settings.metrics_host}:{p}/metrics" for p in (settings.metrics_port, rest_metrics)
            )
    commands = {
        "webserver": [
            sys.executable,
            "-m",
            "dagster_webserver",
            "-h",
            ui_host,
            "-p",
            str(ui_port),
            "-w",
            workspace,
        ],
        # `lake dagster-daemon`: Dagster's own console script from this environment.
        "daemon": [sys.executable, "-m", "lake_platform.cli", "dagster-daemon", "run", "-w", workspace],
        "flight": [
            sys.executable,
            "-m",
            "lake_platform.cli",
            "serve-flight",
            "--host",
            flight.host,
            "--port",
            str(flight.port),
        ],
        "rest": [
            sys.executable,
            "-m",
            "lake_platform.cli",
            "serve-rest",
            "--host",
            settings.rest_host,
            "--port",
            platform.rest_address.rpartition(":")[2],
        ],
    }
    try:
        for name, cmd in commands.items():
            log = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - closed by Platform.stop
            platform.logs.append(log)
            platform.processes.append(
                subprocess.Popen(
                    cmd,
                    cwd=lake_home,
                    env=child_env[name],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # A killed `lake up` runs no stop(): its servers stop themselves instead of
                    # holding their ports and the lake.
                    preexec_fn=die_with_parent,
                )
            )
        _wait_ready(platform, ready_timeout)
    except BaseException:
        platform.stop()
        raise
    return platform


def rest_metrics_port(settings: LakeSettings) -> int | None:
    """The REST process's metrics port under ``lake up``: LAKE_METRICS_PORT + 1 (0 stays 0: any
    free port); None when metrics are off."""
    port = settings.metrics_port
    if port is None or port == 0:
        return port
    if port >= 65535:
        raise SettingsError(
            "LAKE_METRICS_PORT: lake up serves Flight's metrics there and REST's on the next port; "
            f"{port} has no next port"
        )
    return port + 1


def _demo_user(settings: LakeSettings) -> tuple[str, str]:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.up import demo

    with Catalog(settings) as catalog:
        return demo.ensure_demo_user(catalog, Path(settings.home).expanduser().resolve())


def _absolute_paths(settings: LakeSettings) -> dict[str, str]:
    """The children run in LAKE_HOME: relative paths in the settings must not change meaning."""
    out = {}
    url = settings.registry_url
    if url.startswith("sqlite:///") and not url.removeprefix("sqlite:///").startswith("/"):
        out["LAKE_REGISTRY_URL"] = "sqlite:///" + Path(url.removeprefix("sqlite:///")).resolve().as_posix()
    root = settings.warehouse_root
    if "://" not in root and not root.startswith("/"):
        out["LAKE_WAREHOUSE_ROOT"] = Path(root).resolve().as_posix()
    return out


def _wait_ready(platform: Platform, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    ui_up = flight_up = rest_up = False
    while time.monotonic() < deadline:
        if not platform.alive():
            raise RuntimeError(
                f"a platform process exited during start-up; see the logs in {platform.dagster_home / 'logs'}"
            )
        if not ui_up:
            try:
                with urllib.request.urlopen(f"{platform.ui_url}/server_info", timeout=2) as resp:
                    ui_up = resp.status == 200
            except OSError:
                pass
        if not flight_up:
            host, _, port = platform.flight_address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=2):
                    flight_up = True
            except OSError:
                pass
        if not rest_up:
            host, _, port = platform.rest_address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=2):
                    rest_up = True
            except OSError:
                pass
        if ui_up and flight_up and rest_up:
            return
        time.sleep(0.5)
    raise TimeoutError(
        f"the platform did not answer (Dagster UI {platform.ui_url}: {ui_up}, "
        f"Flight SQL {platform.flight_address}: {flight_up}, "
        f"REST {platform.rest_address}: {rest_up}) within {timeout:.0f}s"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_platform(
    settings: LakeSettings,
    ui_host: str = DEFAULT_UI_HOST,
    ui_port: int | None = None,
    flight_port: int | None = None,
    rest_port: int | None = None,
) -> int:
    """Start everything, print where it is, block until Ctrl-C, stop everything. Returns an exit code."""
    port = ui_port if ui_port is not None else settings.ui_port
    # Ctrl-C and a polite kill (service managers, `timeout`) both stop everything started here,
    # even when started from a shell that had SIGINT ignored (background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"lake home      {Path(settings.home).expanduser().resolve()}")
    print("starting Dagster (webserver + daemon), Flight SQL and the Lance REST server ...")
    platform = start_platform(settings, ui_host, port, flight_port=flight_port, rest_port=rest_port)
    print(f"Dagster UI     {platform.ui_url}")
    print(f"Flight SQL     grpc://{platform.flight_address}")
    print(f"Lance REST     http://{platform.rest_address} (Lance Namespace spec; see docs/rest.md)")
    for label, metrics_url in zip(("Flight", "REST"), platform.metrics_urls, strict=False):
        print(f"metrics        {metrics_url} ({label})")
    print(f"inbox          {platform.inbox}")
    print(f"demo table     {platform.demo_table}")
    if platform.seeded:
        print(
            f"seeded         {len(platform.seeded)} sample file(s); the inbox sensor ingests them "
            "within a minute"
        )
    print()
    print("Next steps:")
    print(f"  open {platform.ui_url}/assets to see the lake assets and their runs")
    print(
        "  drop .parquet/.csv/.jsonl/.arrow files into "
        f"{platform.inbox}/<project>/<warehouse>/<namespace>/<table>/"
    )
    print(f"  .venv/bin/lake table history {platform.demo_table}")
    user, password = platform.demo_user
    if user:
        print()
        print(f"Query it over Flight SQL (ADBC; user {user!r}, a reader in project 'demo'):")
        print("  .venv/bin/python - <<'EOF'")
        print("  import adbc_driver_flightsql.dbapi as flight_sql")
        print(f"  conn = flight_sql.connect('grpc://{platform.flight_address}',")
        print(f"                            db_kwargs={{'username': '{user}', 'password': '{password}'}})")
        print("  cur = conn.cursor()")
        print(
            "  cur.execute('SELECT region, count(*) AS orders, sum(amount) AS total FROM "
            "main.sales.orders GROUP BY region')"
        )
        print("  print(cur.fetch_arrow_table())")
        print("  EOF")
    print("  Ctrl-C stops everything started here.", flush=True)
    try:
        while platform.alive():
            time.sleep(1.0)
        print(
            f"a Dagster process exited; stopping the rest (logs under {platform.dagster_home / 'logs'})",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        platform.stop()

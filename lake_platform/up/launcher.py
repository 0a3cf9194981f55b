"""Bring the platform up on the embedded default: Dagster webserver + daemon (sharing one code
server, ``code_server``), Flight SQL, the Lance Namespace REST server, the demo lake (with a demo
reader), and sample files in the inbox for the sensor.

``run_platform(settings)`` blocks until Ctrl-C and then stops everything it started;
``start_platform(settings)`` returns a handle (tests use it) whose ``stop()`` does the same.
A killed launcher (SIGKILL, the OOM killer) stops nothing itself: each server it started is
sent SIGTERM by the kernel when it dies (``processes.bound_to_parent``) and shuts down as on
Ctrl-C. Nothing here forks after Lance is loaded (the demo seed loads it): children start
without a ``preexec_fn``, so ``subprocess`` execs them through vfork or posix_spawn.
A port that is taken fails before anything starts (ServiceUnavailable naming it); a server that
exits during start-up fails the start with the end of its log; the addresses are printed only
once every server answers.
Dagster keeps its state in ``DAGSTER_HOME = <LAKE_HOME>/dagster`` (``dagster.yaml`` written there
by ``lake_platform.defs.instance``: the repository's, plus Postgres storage when
``LAKE_DAGSTER_POSTGRES_URL`` is set).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from lake_platform import owner_only
from lake_platform.errors import SettingsError
from lake_platform.settings import LakeSettings
from lake_platform.up import code_server, dagster_program
from lake_platform.up.banner import started_record, started_text
from lake_platform.up.home_lock import HomeLock, lock_home
from lake_platform.up.processes import bound_to_parent
from lake_platform.up.readiness import check_ports, wait_code_server, wait_for_exit, wait_ready

if TYPE_CHECKING:
    from lake_platform.settings.flight import FlightSettings

DEFAULT_UI_HOST = "127.0.0.1"
DEFAULT_UI_PORT = 3000


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
    #: Each process's name (code-server, flight, rest, webserver, daemon), in the order of
    #: ``processes``.
    names: list[str] = field(default_factory=list)
    #: This run's hold on LAKE_HOME (``home_lock``), released once the servers stopped.
    home_lock: HomeLock | None = None

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
        if self.home_lock is not None:
            self.home_lock.release()


def dagster_home_of(settings: LakeSettings) -> Path:
    """Dagster's home in the lake home, made if missing. Dagster's own storage and the runs'
    logs are written at the umask's mode: a 0700 folder keeps them (run configs, step output)
    from other users of the machine."""
    return owner_only.make_dir(Path(settings.home).expanduser().resolve() / "dagster", narrow=True)


def write_dagster_home(settings: LakeSettings, code_server_address: tuple[str, int]) -> Path:
    """Dagster's home: its instance settings and the workspace naming the code server at
    ``code_server_address`` (host, port). Under ``lake up`` the code server creates the storages
    before it serves (``code_server.main``)."""
    home = dagster_home_of(settings)
    from lake_platform.defs.instance import instance_yaml
    from lake_platform.settings import dagster_settings

    owner_only.write_text(home / "dagster.yaml", instance_yaml(dagster_settings()))
    owner_only.write_text(home / "workspace.yaml", code_server.workspace_yaml(*code_server_address))
    return home


def prepare_dagster_home(settings: LakeSettings, code_server_address: tuple[str, int]) -> Path:
    """``write_dagster_home``, and Dagster's storages created in it (``code_server.init_storage``)."""
    home = write_dagster_home(settings, code_server_address)
    code_server.init_storage(home)
    return home


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
    from lake_platform.settings.flight import flight_settings

    flight = flight_settings(settings, **({"port": flight_port} if flight_port is not None else {}))
    rest_port = rest_port if rest_port is not None else settings.rest_port
    lake_home = owner_only.make_dir(Path(settings.home).expanduser().resolve())
    # First: a second `lake up` on this home is told so, not that the first one's ports are taken.
    lock = lock_home(lake_home)
    try:
        check_ports(
            {
                "the Dagster UI (--port, LAKE_UI_PORT)": (ui_host, ui_port),
                "Flight SQL (--flight-port, LAKE_FLIGHT_PORT)": (flight.host, flight.port),
                "the Lance REST server (--rest-port, LAKE_REST_PORT)": (settings.rest_host, rest_port),
            }
        )
        platform = _launch(
            settings, lake_home, ui_host, ui_port, flight, rest_port, seed, log_dir, ready_timeout
        )
    except BaseException:
        lock.release()
        raise
    platform.home_lock = lock
    return platform


def _launch(
    settings: LakeSettings,
    lake_home: Path,
    ui_host: str,
    ui_port: int,
    flight: FlightSettings,
    rest_port: int,
    seed: bool,
    log_dir: Path | None,
    ready_timeout: float,
) -> Platform:
    """Start the five servers and wait until they answer (stopping what started when that
    fails). Each server spends seconds importing, and the launcher's own work (the demo seed) as
    long again: each server starts as soon as what it needs is there, so the two overlap.
    Flight SQL and REST need nothing (they read the registry, whose every write is a transaction
    of its own); the code server (the definitions, the longest import) only its two yaml files:
    it creates Dagster's storages itself before it loads the definitions (``code_server.main``),
    so the launcher never imports Dagster; the webserver and the daemon need the code server
    answering (they read the definitions from it, and open the storages it made), and the daemon
    the seeded inbox files, which its inbox sensor's first tick then finds. The demo seed runs
    while the code server loads."""
    dagster_home = dagster_home_of(settings)
    inbox = settings.inbox_location()
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
    platform = Platform(
        url,
        dagster_home,
        inbox,
        "",
        [],
        flight_address=f"{flight.host}:{flight.port}",
        rest_address=f"{settings.rest_host}:{rest_port}",
    )
    child_env = {name: env for name in ("code-server", "webserver", "daemon", "flight", "rest")}
    rest_metrics = rest_metrics_port(settings)
    if rest_metrics is not None:
        # Flight and REST are separate processes here: one port each (in one process they share one).
        child_env["rest"] = {**env, "LAKE_METRICS_PORT": str(rest_metrics)}
        if settings.metrics_port:
            platform.metrics_urls = tuple(
                f"http://{settings.metrics_host}:{p}/metrics" for p in (settings.metrics_port, rest_metrics)
            )
    lake_cli = [sys.executable, "-m", "lake_platform.cli"]
    code_host = DEFAULT_UI_HOST  # loopback: only the webserver and the daemon talk to it
    code_port = code_server.free_port(code_host)
    commands = {
        "code-server": code_server.command(code_host, code_port, dagster_home),
        # Dagster's own console scripts from this environment, exiting without a final walk of
        # their heap (dagster_program): each server's stop is a second or more shorter.
        "webserver": dagster_program.command(
            "dagster-webserver", "-h", ui_host, "-p", str(ui_port), "-w", workspace
        ),
        "daemon": dagster_program.command("dagster-daemon", "run", "-w", workspace),
        "flight": [*lake_cli, "serve-flight", "--host", flight.host, "--port", str(flight.port)],
        "rest": [*lake_cli, "serve-rest", "--host", settings.rest_host, "--port", str(rest_port)],
    }

    def start(name: str) -> None:
        log = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - closed by Platform.stop
        platform.logs.append(log)
        platform.names.append(name)
        platform.processes.append(
            subprocess.Popen(
                # A killed `lake up` runs no stop(): its servers stop themselves instead of
                # holding their ports and the lake.
                bound_to_parent(commands[name]),
                cwd=lake_home,
                env=child_env[name],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    deadline = time.monotonic() + ready_timeout
    try:
        start("flight")
        start("rest")
        write_dagster_home(settings, (code_host, code_port))
        start("code-server")
        if seed:
            platform.demo_table, _, platform.seeded = seed_demo_inbox(settings)
            platform.demo_user = _demo_user(settings)
        wait_code_server(platform, code_host, code_port, deadline - time.monotonic())
        start("webserver")
        start("daemon")
        wait_ready(platform, deadline - time.monotonic())
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


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_platform(
    settings: LakeSettings,
    ui_host: str = DEFAULT_UI_HOST,
    ui_port: int | None = None,
    flight_port: int | None = None,
    rest_port: int | None = None,
    *,
    as_json: bool = False,
) -> int:
    """Start everything, print where it is, block until Ctrl-C, stop everything. Returns an exit code.

    ``as_json`` (``lake --json up``): stdout carries one JSON object, the started platform
    (``started_record``), once every server answers, and nothing else, so a script can pipe it to
    jq; the progress lines and the stop go to stderr."""
    port = ui_port if ui_port is not None else settings.ui_port
    progress = sys.stderr if as_json else sys.stdout
    home = Path(settings.home).expanduser().resolve()
    # Ctrl-C and a polite kill (service managers, `timeout`) both stop everything started here,
    # even when started from a shell that had SIGINT ignored (background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"lake home      {home}", file=progress, flush=True)
    platform: Platform | None = None
    try:
        # Inside the try: a Ctrl-C from the moment the user reads this stops everything cleanly.
        print(
            "starting Dagster (webserver + daemon), Flight SQL and the Lance REST server ...",
            file=progress,
            flush=True,
        )
        platform = start_platform(settings, ui_host, port, flight_port=flight_port, rest_port=rest_port)
        if as_json:
            print(json.dumps(started_record(platform, home), indent=2, sort_keys=True), flush=True)
        else:
            print(started_text(platform), flush=True)
        exited = wait_for_exit(platform)
        print(f"{exited.message}; stopping the rest", file=sys.stderr, flush=True)
        code = 1
    except KeyboardInterrupt:
        if platform is None:  # start_platform stopped whatever it had started
            print("\ninterrupted during start-up; everything started was stopped", file=progress, flush=True)
            return 130
        print("\nstopping ...", file=progress, flush=True)
        code = 0
    finally:
        if platform is not None:
            platform.stop()
    print("stopped", file=progress, flush=True)
    return code

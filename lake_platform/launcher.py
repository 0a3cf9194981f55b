"""Bring the platform up on the embedded default: Dagster webserver + daemon, the demo lake, and
sample files in the inbox for the sensor to ingest.

``run_platform(settings)`` blocks until Ctrl-C and then stops everything it started;
``start_platform(settings)`` returns a handle (tests use it) whose ``stop()`` does the same.
Dagster keeps its state in ``DAGSTER_HOME = <LAKE_HOME>/dagster`` (``dagster.yaml`` copied there
from the repository, or generated when the package runs outside it).
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from lake_platform.settings import LakeSettings

DEFAULT_UI_HOST = "127.0.0.1"
DEFAULT_UI_PORT = 3000
FLIGHT_SQL_ENDPOINT = "127.0.0.1:50051"

_REPO_DAGSTER_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"
_FALLBACK_DAGSTER_YAML = """\
telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
concurrency:
  runs:
    max_concurrent_runs: 4
    tag_concurrency_limits:
      - key: "dagster/partition"
        value:
          applyLimitPerUniqueValue: true
        limit: 1
sensors:
  use_threads: true
  num_workers: 4
"""
_WORKSPACE_YAML = """\
load_from:
  - python_module:
      module_name: lake_platform.definitions
      location_name: lake_platform
"""


def ui_port_from_env(default: int = DEFAULT_UI_PORT) -> int:
    raw = os.environ.get("LAKE_UI_PORT", "").strip()
    return int(raw) if raw else default


@dataclass
class Platform:
    ui_url: str
    dagster_home: Path
    inbox: str
    demo_table: str
    seeded: list[str]
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
    home = Path(settings.home).expanduser().resolve() / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if _REPO_DAGSTER_YAML.is_file():
        shutil.copyfile(_REPO_DAGSTER_YAML, target)
    else:
        target.write_text(_FALLBACK_DAGSTER_YAML)
    (home / "workspace.yaml").write_text(_WORKSPACE_YAML)
    return home


def seed_demo_inbox(settings: LakeSettings) -> tuple[str, str, list[str]]:
    """Create the demo lake and drop sample files into its inbox folder (each once)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from lake_platform import demo
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.maintenance.inbox import inbox_location, open_inbox, table_folder

    with Catalog(settings) as catalog:
        summary = demo.seed_demo(catalog)
    location = inbox_location(settings)
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


def start_platform(settings: LakeSettings, ui_host: str = DEFAULT_UI_HOST, ui_port: int = DEFAULT_UI_PORT, *,
                   seed: bool = True, log_dir: Path | None = None, ready_timeout: float = 180.0) -> Platform:
    lake_home = Path(settings.home).expanduser().resolve()
    lake_home.mkdir(parents=True, exist_ok=True)
    dagster_home = prepare_dagster_home(settings)
    from lake_platform.maintenance.inbox import inbox_location

    table, inbox, dropped = seed_demo_inbox(settings) if seed else ("", inbox_location(settings), [])
    if "://" not in inbox:
        inbox = Path(inbox).expanduser().resolve().as_posix()
    # The processes read LakeSettings from the environment: hand them exactly these settings.
    lake_env = {f"LAKE_{k.upper()}": str(v) for k, v in settings.model_dump(mode="json").items() if v is not None}
    lake_env.update(_absolute_paths(settings))
    env = {**os.environ, **lake_env, "DAGSTER_HOME": str(dagster_home), "LAKE_HOME": str(lake_home),
           "LAKE_INBOX": inbox, "DAGSTER_DISABLE_TELEMETRY": "1"}
    workspace = str(dagster_home / "workspace.yaml")
    logs = Path(log_dir) if log_dir else dagster_home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    url = f"http://{ui_host}:{ui_port}"
    platform = Platform(url, dagster_home, inbox, table, dropped)
    commands = {
        "webserver": [sys.executable, "-m", "dagster_webserver", "-h", ui_host, "-p", str(ui_port), "-w", workspace],
        "daemon": [sys.executable, "-m", "dagster._daemon", "run", "-w", workspace],
    }
    try:
        for name, cmd in commands.items():
            log = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - closed by Platform.stop
            platform.logs.append(log)
            platform.processes.append(subprocess.Popen(cmd, cwd=lake_home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                       start_new_session=True))
        _wait_ready(platform, ready_timeout)
    except BaseException:
        platform.stop()
        raise
    return platform


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
    while time.monotonic() < deadline:
        if not platform.alive():
            raise RuntimeError(f"Dagster exited during start-up; see the logs in {platform.dagster_home / 'logs'}")
        try:
            with urllib.request.urlopen(f"{platform.ui_url}/server_info", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the Dagster UI did not answer at {platform.ui_url} within {timeout:.0f}s")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_platform(settings: LakeSettings, ui_host: str = DEFAULT_UI_HOST, ui_port: int | None = None) -> int:
    """Start everything, print where it is, block until Ctrl-C, stop everything. Returns an exit code."""
    port = ui_port if ui_port is not None else ui_port_from_env()
    # Ctrl-C and a polite kill (service managers, `timeout`) both stop everything started here,
    # even when started from a shell that had SIGINT ignored (background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"lake home      {Path(settings.home).expanduser().resolve()}")
    print("starting Dagster (webserver + daemon) ...", flush=True)
    platform = start_platform(settings, ui_host, port)
    print(f"Dagster UI     {platform.ui_url}")
    print(f"Flight SQL     {FLIGHT_SQL_ENDPOINT} (placeholder: the query endpoint is not started by this build yet)")
    print(f"inbox          {platform.inbox}")
    print(f"demo table     {platform.demo_table}")
    if platform.seeded:
        print(f"seeded         {len(platform.seeded)} sample file(s); the inbox sensor ingests them within a minute")
    print()
    print("Next steps:")
    print(f"  open {platform.ui_url}/assets to see the lake assets and their runs")
    print(f"  drop .parquet/.csv/.jsonl/.arrow files into {platform.inbox}/<project>/<warehouse>/<namespace>/<table>/")
    print(f"  .venv/bin/lake table history {platform.demo_table}")
    print("  Ctrl-C stops everything started here.", flush=True)
    try:
        while platform.alive():
            time.sleep(1.0)
        print("a Dagster process exited; stopping the rest (logs under "
              f"{platform.dagster_home / 'logs'})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        platform.stop()

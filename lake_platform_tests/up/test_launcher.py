"""The platform as `make run` brings it up: Dagster webserver + daemon on free loopback ports, the
demo seeded through the inbox and ingested by the sensor, two runs on one table serialized by the
run queue, and the UI checked in headless Chromium (Debian's `chromium`, installed when missing)."""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform.up.demo import TABLE_NAME, seed_demo
from lake_platform.up.launcher import Platform, start_platform
from lake_platform_tests.dagster_storage import FAST_DIR
from lake_platform_tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]
SEEDED_ROWS = 1000 + 500 + 250 + 250


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], check=False, env=env, capture_output=True, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"],
            check=False,
            env=env,
            capture_output=True,
            timeout=900,
        )
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("Debian's chromium is not installed and cannot be installed here (make test installs it)")
    return found


def browse(url: str, profile: Path, *, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (virtual time), optionally with a screenshot of the
    same page load (one Chromium start for both)."""
    args = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000"]
    args += ["--dump-dom", *([f"--screenshot={screenshot}"] if screenshot else [])]
    proc = subprocess.run([*args, url], capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def gql(platform: Platform, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(
        f"{platform.ui_url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        data = json.load(resp)
    assert "errors" not in data, data
    return data["data"]


LAUNCH = """mutation($p: ExecutionParams!) { launchPipelineExecution(executionParams: $p) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
RUNS = """query($value: String!) { runsOrError(filter: {tags: [{key: "dagster/partition", value: $value}]}) {
  ... on Runs { results { runId status startTime endTime } } } }"""


def launch(platform: Platform, job: str, partition: str) -> str:
    """A run of one of the platform's table jobs for one table (its partition), by GraphQL."""
    params = {
        "selector": {
            "repositoryLocationName": "lake_platform",
            "repositoryName": "__repository__",
            "pipelineName": job,
        },
        "runConfigData": {},
        "mode": "default",
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    result = gql(platform, LAUNCH, {"p": params})["launchPipelineExecution"]
    assert result["__typename"] == "LaunchRunSuccess", result
    return str(result["run"]["runId"])


def wait_for(what: str, check: Any, timeout: float, platform: Platform) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert platform.alive(), f"a Dagster process died; logs in {logs_of(platform)}"
        value = check()
        if value:
            return value
        time.sleep(0.5)  # between looks; each check asks the servers again
    raise AssertionError(f"timed out waiting for {what}; logs in {logs_of(platform)}")


def logs_of(platform: Platform) -> Path:
    return Path(platform.logs[0].name).parent if platform.logs else platform.dagster_home / "logs"


@pytest.fixture
def lake_home() -> Iterator[Path]:
    """The lake's home (Dagster's SQLite storage inside it) in memory where the machine has it:
    the daemon's sensor ticks and the runs' events are each a commit, an fsync on a disk. The
    servers' logs are kept with the test's files (``log_dir``)."""
    with tempfile.TemporaryDirectory(prefix="lake-up-", dir=FAST_DIR) as tmp:
        yield Path(tmp) / "home"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_platform_ingests_the_demo_serializes_a_table_and_shows_it_in_the_ui(
    tmp_path: Path, lake_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = chromium()
    for name in ("LAKE_INBOX", "LAKE_REGISTRY_URL", "LAKE_WAREHOUSE_ROOT", "DAGSTER_HOME"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(home=lake_home)
    platform = start_platform(
        settings,
        "127.0.0.1",
        free_port(),
        flight_port=free_port(),
        rest_port=free_port(),
        log_dir=tmp_path / "logs",
    )
    try:
        assert len(platform.seeded) == 3 and platform.demo_table == TABLE_NAME
        assert (lake_home / "dagster" / "dagster.yaml").read_text() == (REPO / "dagster.yaml").read_text()

        # 1. Two runs on one table requested at once, while the inbox sensor's ingest run for the
        # same table is due too: the run queue runs them one after another.
        launched = [launch(platform, "table_orphan_scan", TABLE_NAME) for _ in range(2)]

        # 2. The inbox sensor ingests the seeded files (first tick at start-up, then every 30 s).
        def ingested() -> bool:
            with Catalog(settings) as catalog:
                return catalog.reads.open_table(TABLE_NAME).count_rows() == SEEDED_ROWS

        wait_for("the seeded files to be ingested", ingested, 300, platform)
        with Catalog(settings) as catalog:
            commit = next(e for e in catalog.reads.history(TABLE_NAME) if e.operation == "append")

        # The Flight SQL endpoint it started answers the demo reader with the ingested rows.
        import adbc_driver_flightsql.dbapi as flight_sql

        user, password = platform.demo_user

        def served_by_flight() -> bool:
            # The endpoint's cached catalog snapshot catches up within its TTL.
            with flight_sql.connect(
                f"grpc://{platform.flight_address}", db_kwargs={"username": user, "password": password}
            ) as conn:
                with conn.cursor() as cur:
                    cur.execute("SELECT count(*) AS n FROM main.sales.orders")
                    return cur.fetch_arrow_table().column("n").to_pylist() == [SEEDED_ROWS]

        wait_for("the Flight SQL endpoint to serve the ingested rows", served_by_flight, 60, platform)

        # The Lance REST server it started answers with a service token of the demo project.
        import requests

        with Catalog(settings) as catalog:
            token = catalog.access.create_token("launcher_test", project="demo", role="reader")[1]
        listed = requests.get(
            f"http://{platform.rest_address}/v1/namespace/demo$main$sales/table/list",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert listed.status_code == 200 and listed.json()["tables"] == ["orders"], listed.text

        def finished() -> list[dict[str, Any]] | None:
            runs = gql(platform, RUNS, {"value": TABLE_NAME})["runsOrError"]["results"]
            done = all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs)
            return runs if done and set(launched) <= {r["runId"] for r in runs} else None

        runs = wait_for("the table's runs to finish", finished, 300, platform)
        assert len(runs) >= 3 and {r["status"] for r in runs} == {"SUCCESS"}, runs
        spans = sorted((r["startTime"], r["endTime"]) for r in runs)
        for before, after in itertools.pairwise(spans):
            assert after[0] >= before[1], f"runs on one table overlapped: {spans}"

        # 3. The UI, in a real browser: the asset graph, then the partition's materialization.
        ARTIFACTS.mkdir(exist_ok=True)
        gql(platform, "mutation { setNuxSeen }")  # the UI's newsletter pop-up would cover the screenshot
        graph = browse(
            f"{platform.ui_url}/locations/lake_platform/asset-groups/lake", tmp_path / "chromium-1"
        )
        (ARTIFACTS / "dagster-asset-graph.html").write_text(graph)
        for asset in ("ingested", "expired_trash", "orphan_folder_report"):
            assert asset in graph, f"{asset} missing from the asset graph"
        assert "Something went wrong" not in graph
        page = f"{platform.ui_url}/assets/ingested?view=partitions&partition={TABLE_NAME}"
        shot = ARTIFACTS / "dagster-ingested-partition.png"
        shot.unlink(missing_ok=True)
        dom = browse(page, tmp_path / "chromium-2", screenshot=shot)
        (ARTIFACTS / "dagster-ingested-partition.html").write_text(dom)
        for text in (
            TABLE_NAME,
            "Materialized",
            "commit_id",
            commit.commit_id,
            "fragments",
            "ingested_files",
        ):
            assert text in dom, f"{text!r} not on the materialization page"
        for problem in ("Something went wrong", "PythonError", "Unexpected error", "could not be loaded"):
            assert problem not in dom
        assert shot.stat().st_size > 10_000
        assert browser
    finally:
        platform.stop()
    assert not platform.alive()


OBSERVED = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetObservations(limit: 1) { metadataEntries { label ... on IntMetadataEntry { intValue } } } } } }"""
RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
REGION_TOTALS = "demo.main.sales.region_totals"


def launch_assets(platform: Platform, path: list[str]) -> str:
    """A run of one asset launched as the UI's Materialize button does: the asset job, by GraphQL."""
    params = {
        "selector": {
            "repositoryLocationName": "lake_platform",
            "repositoryName": "__repository__",
            "pipelineName": "__ASSET_JOB",
            "assetSelection": [{"path": path}],
        },
        "runConfigData": {},
        "mode": "default",
    }
    result = gql(platform, LAUNCH, {"p": params})["launchPipelineExecution"]
    assert result["__typename"] == "LaunchRunSuccess", result
    return str(result["run"]["runId"])


def visible_text(dom: str) -> str:
    """The page's text nodes in order, joined by ``|``: what a user reads, cell by cell."""
    body = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    return re.sub(r"\|+", "|", html.unescape(re.sub(r"<[^>]+>", "|", body)))


def page_showing(url: str, texts: list[str], profile: Path, platform: Platform) -> str:
    """The page's text once it shows every one of ``texts`` (loaded again until it does)."""
    pages = itertools.count()

    def shown() -> str | None:
        text = visible_text(browse(url, profile / f"chromium-{next(pages)}"))
        return text if all(t in text for t in texts) else None

    return wait_for(f"{url} to show {texts}", shown, 120, platform)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_ui_shows_the_table_assets_schema_and_rows_and_a_graphql_launch_commits(
    tmp_path: Path, lake_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lake's tables in the Dagster UI, in headless Chromium: the orders table as the observation
    sensor reported it, and the demo's user asset materialized through the UI's GraphQL (as its
    Materialize button does), which lands as one registry commit made by that run."""
    chromium()
    for name in ("LAKE_INBOX", "LAKE_REGISTRY_URL", "LAKE_WAREHOUSE_ROOT", "DAGSTER_HOME"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(home=lake_home)
    with Catalog(settings) as catalog:
        seed_demo(catalog)  # the table alone, no inbox files: its row count stays put
        orders = catalog.reads.open_table(TABLE_NAME)
        orders_rows = orders.count_rows()
        orders_columns = "|".join(f"{f.name}|{f.type}" for f in orders.schema)
    platform = start_platform(
        settings,
        "127.0.0.1",
        free_port(),
        flight_port=free_port(),
        rest_port=free_port(),
        seed=False,
        log_dir=tmp_path / "logs",
    )
    try:

        def observed() -> dict[str, Any] | None:
            found = gql(platform, OBSERVED, {"key": {"path": ["sales", "orders"]}})["assetOrError"]
            return found["assetObservations"][0] if found.get("assetObservations") else None

        observation = wait_for("the observation sensor to observe the orders table", observed, 120, platform)
        counts = [e["intValue"] for e in observation["metadataEntries"] if e["label"] == "dagster/row_count"]
        assert counts == [orders_rows]

        run_id = launch_assets(platform, ["sales", "region_totals"])

        def run_ended() -> str | None:
            status = gql(platform, RUN_STATUS, {"id": run_id})["runOrError"]["status"]
            return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

        assert wait_for("the launched run to end", run_ended, 180, platform) == "SUCCESS"
        with Catalog(settings) as catalog:
            (commit,) = [e for e in catalog.reads.history(REGION_TOTALS) if e.run_id == run_id]
            totals = catalog.reads.open_table(REGION_TOTALS)
            totals_rows = totals.count_rows()
            totals_columns = "|".join(f"{f.name}|{f.type}" for f in totals.schema)
        assert commit.to_version == totals.version and totals_rows == 4  # one row per region

        gql(platform, "mutation { setNuxSeen }")  # the UI's newsletter pop-up would cover the page
        ui = platform.ui_url
        # The observed table: its row count on the overview, its schema in the observation's event.
        page_showing(
            f"{ui}/assets/sales/orders", [f"Row count|{orders_rows:,}|"], tmp_path / "orders", platform
        )
        page_showing(
            f"{ui}/assets/sales/orders?view=events",
            [f"dagster/column_schema|Column name|Type|Description|{orders_columns}|", f"|{orders_rows}|"],
            tmp_path / "orders-events",
            platform,
        )
        # The table's maintenance health: its checks, evaluated from the registry by the sensor.
        checks = ["fragments_under_threshold", "versions_within_retention", "no_orphans", "schema_registered"]
        page_showing(
            f"{ui}/assets/sales/orders?view=checks", [*checks, "Passed"], tmp_path / "checks", platform
        )
        # The table the user asset committed: its columns and row count on the overview.
        text = page_showing(
            f"{ui}/assets/sales/region_totals",
            ["Columns|", f"Column name|Type|Description|{totals_columns}|", f"Row count|{totals_rows:,}|"],
            tmp_path / "region-totals",
            platform,
        )
        assert commit.commit_id in text and REGION_TOTALS in text
        for problem in ("Something went wrong", "PythonError", "Unexpected error"):
            assert problem not in text
    finally:
        platform.stop()
    assert not platform.alive()


def test_a_server_that_exits_while_running_is_named_with_its_last_log_line(tmp_path: Path) -> None:
    """Once "a Dagster process exited" whichever of the four it was (Flight SQL, REST too)."""
    from lake_platform.up.launcher import wait_for_exit

    log = open(tmp_path / "rest.log", "ab")  # noqa: SIM115 - closed by Platform.stop
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "print('error [17 SERVICE_UNAVAILABLE]: lost the registry'); raise SystemExit(3)",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    platform = Platform("", tmp_path, "", "", [], processes=[proc], logs=[log], names=["rest"])
    try:
        exited = wait_for_exit(platform, poll_seconds=0.05)
    finally:
        platform.stop()
    assert exited.message == (
        "the rest process exited (exit 3): error [17 SERVICE_UNAVAILABLE]: lost the registry; "
        f"its log: {tmp_path / 'rest.log'}"
    )

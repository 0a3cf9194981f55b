"""Metrics, logs and the query audit of the REST server: /metrics scraped over HTTP around a known
sequence of REST calls (exact counter deltas by operation and status), one audit line per
QueryTable with its pins, no token in the logs or the audit, and one /metrics shared with a
Flight endpoint in the same process."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import lance
import pytest
import requests

from lake_platform.observability.audit import audit_target, read_records
from lake_platform.observability.logs import configure_logging
from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.flight.conftest import wait_until
from lake_platform_tests.observability.test_metrics import delta, scrape
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.servers import free_port

REST = {"surface": "rest"}


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    for lake in start_rest_lake(
        tmp_path, metrics_port=free_port(), rest_inline_max_rows=50, rest_inline_max_bytes=1 << 20
    ):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows(list(range(100))), namespace_client=ns, table_id=["p", "w", "ns", "t"])
        lake.service.snapshots.refresh()
        lake.service.snapshots.refresh()  # the first may join a load begun before the create
        yield lake


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("DEBUG", "json", stream=out, force=True)
    try:
        yield out
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)


def test_known_rest_calls_read_exactly_in_the_counters(lake: RestLake) -> None:
    assert lake.service.metrics_server is not None
    port = lake.service.metrics_server.port
    assert port == lake.settings.metrics_port
    before = scrape(port)
    for _ in range(3):
        assert lake.get("/v1/namespace/p$w/list").status_code == 200
    for _ in range(2):  # a failed call counts under its status
        assert lake.post("/v1/table/p$w$ns$missing/describe", {}).status_code == 404
    bad = requests.get(lake.url + "/v1/namespace/p$w/list", headers={"x-api-key": "lkt_nope"}, timeout=30)
    assert bad.status_code == 401
    assert (
        requests.get(lake.url + "/v1/p$w$ns$t/nowhere", headers=lake.headers(), timeout=30).status_code == 406
    )
    inline = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 10}, who="reader")
    handle = {"x-lake-result": "handle"}  # the spooled answer, which a client must ask for
    spooled = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0}, who="reader", headers=handle)
    assert inline.status_code == spooled.status_code == 200 and spooled.json()["rows"] == 100
    after = scrape(port)

    def requests_(method: str, code: str) -> float:
        return delta(before, after, "lake_requests_total", **REST, method=method, code=code)

    def errors(method: str, code: str) -> float:
        return delta(before, after, "lake_request_errors_total", **REST, method=method, code=code)

    assert requests_("ListNamespaces", "200") == 4 - 1  # the 401 is counted apart
    assert requests_("ListNamespaces", "401") == errors("ListNamespaces", "401") == 1
    assert errors("ListNamespaces", "200") == 0
    assert requests_("DescribeTable", "404") == errors("DescribeTable", "404") == 2
    # an unknown route answers Unsupported (406), labelled "unmatched": no path as a label value
    assert requests_("unmatched", "406") == errors("unmatched", "406") == 1
    assert requests_("QueryTable", "200") == 2
    count = "lake_request_duration_seconds_count"
    assert delta(before, after, count, **REST, method="ListNamespaces") == 4
    assert delta(before, after, count, **REST, method="QueryTable") == 2
    assert delta(before, after, "lake_queries_total", **REST, status="OK") == 2
    assert delta(before, after, "lake_query_rows_total", **REST) == 110
    assert delta(before, after, "lake_query_bytes_total", **REST) > 0
    # no label value of a series these calls touched carries an id or a path (the registry is the
    # process's: series other tests wrote, e.g. observe_request's own unit test, are not ours)
    labels = {v for key, value in after.items() if before.get(key) != value for (_, v) in key[1]}
    assert [v for v in labels if "p$w" in v or "/v1/" in v] == []


def test_every_rest_query_writes_one_audit_line_with_its_pins(lake: RestLake) -> None:
    path = Path(audit_target(lake.settings))
    assert (
        lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 5, "filter": "id < 3"}).status_code == 200
    )
    assert lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0}, who="reader").status_code == 200
    assert (
        lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1, "filter": "nope >"}).status_code == 400
    )
    assert lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1}, who="other").status_code == 404
    record = lake.catalog.reads.open_table("p.w.ns.t").record
    pins = [{"table": "p.w.ns.t", "incarnation": record.incarnation, "version": record.current_version}]
    lines = [r for r in read_records(path) if r["surface"] == "rest"]
    assert [(r["principal"], r["project"], r["status"], r["rows"]) for r in lines] == [
        ("etl", "p", "OK", 3),
        ("viewer", "p", "OK", 100),
        ("etl", "p", "INVALID_ARGUMENT", 0),
        ("qwriter", "q", "NOT_FOUND", 0),
    ]
    assert lines[0]["tables"] == lines[1]["tables"] == pins
    # What ran: the filter as DataFusion parsed it, and the row limit
    assert lines[0]["sql"].endswith("WHERE w.ns.t.id < Int64(3) LIMIT 5 OFFSET 0") and lines[0]["request_id"]
    assert lines[2]["sql"].endswith("WHERE nope >")  # a refused filter: the text as sent
    assert len({r["request_id"] for r in lines}) == 4
    assert read_records(path, project="q").__next__()["principal"] == "qwriter"


def test_logs_name_the_request_and_never_a_token(lake: RestLake, json_logs: io.StringIO) -> None:
    assert lake.get("/v1/namespace/p$w/list").status_code == 200
    key = {"x-api-key": lake.tokens["reader"]}  # the spec's other form
    query = requests.post(
        lake.url + "/v1/table/p$w$ns$t/query", json={"vector": {}, "k": 0}, headers=key, timeout=60
    )
    assert query.status_code == 200
    planted = "lkt_0123456789abcdef_Planted-Secret-Token-xyz"
    assert (
        requests.get(
            lake.url + "/v1/namespace/p$w/list", headers={"Authorization": f"Bearer {planted}"}, timeout=30
        ).status_code
        == 401
    )
    text = json_logs.getvalue()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    access = [r for r in lines if r["logger"] == "lake.request" and r.get("surface") == "rest"]
    assert [(r["method"], r["status"], r.get("principal")) for r in access] == [
        ("ListNamespaces", "200", "etl"),
        ("QueryTable", "200", "viewer"),
        ("ListNamespaces", "401", None),
    ]
    assert all(r["request_id"] and r["duration_ms"] >= 0 for r in access)
    audit = Path(audit_target(lake.settings)).read_text()
    for secret in [*lake.tokens.values(), planted]:
        assert secret not in text and secret not in audit
        # lkt_<key id>_<secret>: the secret itself may contain "_" (URL-safe base64)
        tail = secret.split("_", 2)[-1]
        assert tail not in text and tail not in audit


def test_flight_and_rest_in_one_process_share_one_metrics_port(lake: RestLake) -> None:
    from lake_platform_tests.flight.conftest import start_server

    shared = lake.service.metrics_server
    assert shared is not None
    flight = start_server(lake.settings, lake.catalog)
    try:
        assert flight.metrics_server is shared  # one port, one registry, counted users
        lake.get("/v1/namespace/p$w/list")
        samples = scrape(shared.port)
        surfaces = {
            dict(labels).get("surface") for (name, labels) in samples if name == "lake_requests_total"
        }
        assert "rest" in surfaces
    finally:
        flight.stop()
    assert scrape(shared.port)  # still served: REST still uses it


@pytest.mark.slow
def test_serve_rest_serves_metrics_when_the_port_is_set(tmp_path: Path) -> None:
    """`lake serve-rest` (a real process) serves /metrics on LAKE_METRICS_PORT."""
    import os
    import signal

    metrics_port, rest_port = free_port(), free_port()
    env = {
        **os.environ,
        "LAKE_HOME": str(tmp_path / "home"),
        "LAKE_METRICS_PORT": str(metrics_port),
        "LAKE_REST_PORT": str(rest_port),
    }
    proc = subprocess.Popen(
        bound_to_parent([sys.executable, "-m", "lake_platform.cli", "serve-rest"]),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def answered() -> bool:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
        try:
            # an unauthenticated call (the lake is empty): counted, then scraped
            requests.get(f"http://127.0.0.1:{rest_port}/v1/namespace/p$w/list", timeout=5)
            with opener.open(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
                return 'method="ListNamespaces"' in resp.read().decode()
        except OSError:
            return False

    try:
        assert wait_until(answered, timeout=120, step=0.1)
        with opener.open(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'lake_requests_total{code="401",method="ListNamespaces",surface="rest"}' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)

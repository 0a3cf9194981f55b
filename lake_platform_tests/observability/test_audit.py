"""The query audit trail of a real Flight SQL server over two tenants (projects p and q), read
back from its JSONL file and through ``lake audit queries``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform.observability.audit import audit_target, read_records
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import build_catalog, login, plan, query, start_server


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[LakeSettings, Catalog]]:
    settings, catalog = build_catalog(tmp_path / "home")
    try:
        yield settings, catalog
    finally:
        catalog.close()


def _pin(catalog: Catalog, name: str) -> dict[str, object]:
    (record,) = [r for r in catalog.reads.list_tables(".".join(name.split(".")[:2])) if r.name == name]
    return {"table": name, "incarnation": record.incarnation, "version": record.current_version}


def test_every_query_appears_once_with_its_pins(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    server = start_server(settings, catalog)
    try:
        uri = f"grpc://127.0.0.1:{server.port}"
        alice, a_opts = login(uri, "alice")
        bob, b_opts = login(uri, "bob")
        join = "SELECT count(*) AS n FROM w.ns.t JOIN w.ns.multi USING (id) -- alice-join"
        assert query(alice, a_opts, join).column("n").to_pylist() == [500]
        assert query(alice, a_opts, "SELECT id FROM w.ns.sub.u -- alice-small").num_rows == 3
        assert query(bob, b_opts, "SELECT code FROM w.ns.secret -- bob-secret").num_rows == 1
        with pytest.raises(KeyError):  # alice cannot see q's table: NOT_FOUND at planning
            plan(alice, a_opts, "SELECT * FROM w.ns.secret -- alice-probe")
        info = plan(alice, a_opts, "SELECT id FROM w.ns.t -- alice-planned-only")  # never fetched
        assert info.endpoints
    finally:
        server.stop(grace=0)

    records = list(read_records(Path(audit_target(settings))))
    by_sql = {}
    for r in records:
        assert r["sql"] not in by_sql, f"audited twice: {r['sql']}"
        by_sql[r["sql"]] = r
    assert sorted(s.rsplit("-- ", 1)[1] for s in by_sql) == [
        "alice-join",
        "alice-probe",
        "alice-small",
        "bob-secret",
    ]
    joined = by_sql[join]
    assert (joined["principal"], joined["project"], joined["status"], joined["rows"]) == (
        "alice",
        "p",
        "OK",
        1,
    )
    assert sorted(joined["tables"], key=lambda t: t["table"]) == [
        _pin(catalog, "p.w.ns.multi"),
        _pin(catalog, "p.w.ns.t"),
    ]
    assert joined["bytes"] > 0 and joined["duration_ms"] > 0 and joined["request_id"]
    probe = next(r for r in records if r["sql"].endswith("alice-probe"))
    assert (probe["status"], probe["tables"], probe["rows"]) == ("NOT_FOUND", [], 0)
    assert "not found" in probe["error"]
    secret = next(r for r in records if r["sql"].endswith("bob-secret"))
    assert (secret["project"], secret["tables"]) == ("q", [_pin(catalog, "q.w.ns.secret")])


def test_a_tenant_sees_only_its_own_queries(
    lake: tuple[LakeSettings, Catalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, catalog = lake
    server = start_server(settings, catalog)
    try:
        uri = f"grpc://127.0.0.1:{server.port}"
        alice, a_opts = login(uri, "alice")
        bob, b_opts = login(uri, "bob")
        query(alice, a_opts, "SELECT s FROM w.ns.t WHERE s = 'alice-private-literal'")
        query(bob, b_opts, "SELECT code FROM w.ns.secret WHERE code <> 'bob-private-literal'")
    finally:
        server.stop(grace=0)
    monkeypatch.setenv("LAKE_HOME", str(settings.home))
    runner = CliRunner()

    def audit(*args: str) -> tuple[str, list[dict[str, object]]]:
        text = runner.invoke(cli, ["audit", "queries", *args])
        as_json = runner.invoke(cli, ["--json", "audit", "queries", *args])
        assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
        return text.output, json.loads(as_json.stdout)

    q_text, q_records = audit("--project", "q")
    assert [r["principal"] for r in q_records] == ["bob"]
    assert "bob-private-literal" in q_text
    assert "alice-private-literal" not in q_text + json.dumps(q_records)
    p_text, p_records = audit("--project", "p")
    assert [r["principal"] for r in p_records] == ["alice"]
    assert "bob-private-literal" not in p_text + json.dumps(p_records)
    assert audit("--project", "nobody")[1] == []
    bad = runner.invoke(cli, ["audit", "queries", "--project", "Not A Name"])
    assert bad.exit_code != 0 and "INVALID_INPUT" in bad.output and "Traceback" not in bad.output


def test_audit_can_be_turned_off(tmp_path: Path) -> None:
    from lake_platform.observability.audit import AuditTrail

    trail = AuditTrail("off")
    trail.write({"sql": "x"})
    assert not trail.enabled
    assert list(read_records(tmp_path / "absent.jsonl")) == []


def test_ticket_pins_match_registry(lake: tuple[LakeSettings, Catalog]) -> None:
    """After an append, a query planned before it still audits the version it read."""
    settings, catalog = lake
    server = start_server(settings, catalog)
    try:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        before = _pin(catalog, "p.w.ns.sub.u")
        info = plan(client, options, "SELECT id FROM w.ns.sub.u -- pinned")
        catalog.tables.append("p.w.ns.sub.u", pa.table({"id": pa.array([4], pa.int64())}).to_reader())
        assert client.do_get(info.endpoints[0].ticket, options).read_all().num_rows == 3
    finally:
        server.stop(grace=0)
    (record,) = [r for r in read_records(Path(audit_target(settings))) if r["sql"].endswith("pinned")]
    assert record["tables"] == [before] and record["rows"] == 3
    assert _pin(catalog, "p.w.ns.sub.u")["version"] == before["version"] + 1  # type: ignore[operator]

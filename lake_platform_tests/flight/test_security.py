"""Authentication, tenancy, the hostile-statement corpus, health and TLS. Malformed input and
the calls the endpoint refuses: test_refusals.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.auth.tokens import Identity
from lake_platform.errors import ServiceUnavailable
from lake_platform.flight import proto
from lake_platform.query.snapshot import load_snapshot
from lake_platform_tests.doubles import StaticAuthenticator
from lake_platform_tests.flight.conftest import (
    ALICE,
    PASSWORDS,
    Running,
    basic,
    build_catalog,
    start_server,
    wait_until,
)
from lake_platform_tests.flight.helpers import self_signed

pytestmark = pytest.mark.filterwarnings("ignore:Cannot disable autocommit")


def no_leak(text: str) -> None:
    assert "Traceback" not in text
    assert ".py" not in text and "/work/" not in text and "site-packages" not in text


def cmd(message: Any) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(proto.pack(message))


def query(sql: str) -> fl.FlightDescriptor:
    return cmd(proto.CommandStatementQuery(query=sql))


# == authentication ==============================================================================


def test_wrong_password_and_unknown_user(running: Running) -> None:
    for user, password in [("alice", "not-her-password"), ("nobody", "whatever-password")]:
        client = fl.connect(running.uri)
        with pytest.raises(fl.FlightUnauthenticatedError) as err:
            client.authenticate_basic_token(user, password)
        assert "invalid credentials" in str(err.value)
        no_leak(str(err.value))
    import adbc_driver_manager

    with pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED"):
        running.adbc("alice", "wrong-password-here")


def test_every_call_needs_a_valid_bearer(running: Running) -> None:
    client = fl.connect(running.uri)
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.get_flight_info(query("SELECT 1"))
    with pytest.raises(fl.FlightUnauthenticatedError):
        list(client.do_action(fl.Action("health", b"")))
    for bad in [b"Bearer lkb2.AAAA", b"Bearer lkb1.AAAA", b"Bearer nonsense", b"Bearer ", b"Basic " + b"x"]:
        options = fl.FlightCallOptions(headers=[(b"authorization", bad)])
        with pytest.raises(fl.FlightUnauthenticatedError) as err:
            client.get_flight_info(query("SELECT 1"), options)
        no_leak(str(err.value))


def test_expired_token(running: Running) -> None:
    token = running.server.sealer.bearer(ALICE, ttl=-1)
    client = fl.connect(running.uri)
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
    with pytest.raises(fl.FlightUnauthenticatedError, match="expired"):
        client.get_flight_info(query("SELECT 1"), options)
    fresh = running.server.sealer.bearer(ALICE, ttl=60)
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {fresh}".encode())])
    assert client.get_flight_info(query("SELECT 1"), options).schema.names == ["Int64(1)"]


def test_bearer_on_handshake_is_accepted_and_echoed(running: Running) -> None:
    """JDBC's token= sends a Handshake carrying a Bearer."""
    token = running.server.sealer.bearer(ALICE, ttl=60)
    client = fl.connect(running.uri)
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
    header = client.authenticate_basic_token("", "", options)  # any Handshake carries our header too
    assert header[1].startswith(b"Bearer ")


def test_repeated_failures_are_throttled(lake: Any) -> None:
    settings, catalog = lake
    auth = StaticAuthenticator(users={"carol": ("carol-password", Identity("carol", "user", "p", "reader"))})
    server = start_server(settings, catalog, authenticator=auth, auth_max_failures=3, auth_lockout_seconds=60)
    try:
        client = fl.connect(f"grpc://127.0.0.1:{server.port}")
        for _ in range(3):
            with pytest.raises(fl.FlightUnauthenticatedError, match="invalid credentials"):
                client.authenticate_basic_token("carol", "wrong-password")
        calls = auth.calls
        with pytest.raises(fl.FlightUnauthenticatedError, match="too many failed attempts"):
            client.authenticate_basic_token("carol", "carol-password")
        assert auth.calls == calls  # refused before any password work
    finally:
        server.stop(grace=0)


# == tenancy =====================================================================================


def test_a_principal_sees_only_its_own_project(running: Running) -> None:
    with running.adbc("alice") as a, running.adbc("bob") as b:
        with a.cursor() as cur:
            cur.execute("SELECT count(*) AS n FROM w.ns.t")
            assert cur.fetch_arrow_table().to_pylist() == [{"n": 1000}]
        with b.cursor() as cur:
            cur.execute("SELECT count(*) AS n FROM w.ns.t")
            assert cur.fetch_arrow_table().to_pylist() == [{"n": 2}]
            cur.execute("SELECT code FROM w.ns.secret")
            assert cur.fetch_arrow_table().to_pylist() == [{"code": "bob-only"}]
        objects = b.adbc_get_objects(depth="tables").read_all().to_pylist()
        names = {
            t["table_name"] for s in objects[0]["catalog_db_schemas"] for t in s["db_schema_tables"] or []
        }
        assert names == {"t", "secret"}
        objects = a.adbc_get_objects(depth="all").read_all().to_pylist()
        names = {
            t["table_name"] for s in objects[0]["catalog_db_schemas"] for t in s["db_schema_tables"] or []
        }
        assert "secret" not in names


def test_another_tenants_table_looks_exactly_missing(running: Running) -> None:
    import adbc_driver_manager

    messages = {}
    with running.adbc("alice") as conn:
        for name in ("secret", "missing"):
            with conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
                cur.execute(f"SELECT * FROM w.ns.{name}")
            messages[name] = str(err.value).replace(name, "X")
    assert messages["secret"] == messages["missing"]
    assert "NOT_FOUND" in messages["secret"]


def test_tickets_and_handles_belong_to_their_principal(running: Running) -> None:
    bob, bob_opts = running.client("bob")
    alice, alice_opts = running.client("alice")
    info = bob.get_flight_info(query("SELECT code FROM w.ns.secret"), bob_opts)
    with pytest.raises(fl.FlightUnauthorizedError, match="another principal"):  # PERMISSION_DENIED
        alice.do_get(info.endpoints[0].ticket, alice_opts).read_all()
    assert bob.do_get(info.endpoints[0].ticket, bob_opts).read_all().num_rows == 1
    result = list(
        bob.do_action(
            fl.Action(
                "CreatePreparedStatement",
                proto.pack(proto.ActionCreatePreparedStatementRequest(query="SELECT code FROM w.ns.secret")),
            ),
            bob_opts,
        )
    )
    handle = _unpack_result(result[0].body.to_pybytes()).prepared_statement_handle
    with pytest.raises(fl.FlightUnauthorizedError, match="another principal"):
        alice.get_flight_info(
            cmd(proto.CommandPreparedStatementQuery(prepared_statement_handle=handle)), alice_opts
        )


def _unpack_result(body: bytes) -> Any:
    name, payload = proto.unpack_any(body)
    assert name == "ActionCreatePreparedStatementResult"
    return proto.parse(proto.ActionCreatePreparedStatementResult, payload)


# == hostile statements ==========================================================================


def hostile_corpus(tmp: Path) -> list[str]:
    return [
        "CREATE TABLE w.ns.evil AS SELECT 1",
        "CREATE TABLE evil (a INT)",
        "CREATE VIEW evil AS SELECT 1",
        "CREATE SCHEMA w.evil",
        "CREATE CATALOG evil",
        f"CREATE EXTERNAL TABLE evil STORED AS CSV LOCATION '{tmp}/x.csv'",
        "CREATE EXTERNAL TABLE evil STORED AS CSV LOCATION '/etc/passwd'",
        "DROP TABLE w.ns.t",
        "DROP SCHEMA w.ns",
        "INSERT INTO w.ns.t VALUES (1, 'a', 1.0)",
        "UPDATE w.ns.t SET id = 1",
        "DELETE FROM w.ns.t",
        "TRUNCATE w.ns.t",
        f"COPY (SELECT 1) TO '{tmp}/out.csv'",
        f"COPY w.ns.t TO '{tmp}/out.parquet'",
        "SET datafusion.execution.batch_size = 1",
        "SET TIME ZONE 'UTC'",
        "PREPARE p AS SELECT 1",
        "EXECUTE p",
        "DESCRIBE w.ns.t",
        "SHOW TABLES",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'file:///etc/passwd'",
        "SELECT * FROM 's3://bucket/key.parquet'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_parquet('/etc/passwd')",
        "SELECT * FROM read_json('http://example.com/x')",
        "EXPLAIN CREATE TABLE evil AS SELECT 1",
        f"EXPLAIN COPY (SELECT 1) TO '{tmp}/explained.csv'",
        "SELECT 1; DROP TABLE w.ns.t",
        "SELECT 1; SELECT 2",
        "WITH x AS (SELECT 1 AS a) INSERT INTO w.ns.t SELECT * FROM x",
        "",
        "   ",
        "-- nothing but a comment",
        "/* unterminated",
        "SELECT " + "(" * 20_000 + "1" + ")" * 20_000,
        "SELECT '" + "a" * (300 * 1024) + "'",
        "SELECT 1 FROM w.ns.t WHERE s = '\x00'",
        "ATTACH DATABASE 'x' AS y",
        "VACUUM",
        "GRANT ALL ON w.ns.t TO bob",
        "CALL evil()",
    ]


def registry_state(running: Running) -> list[tuple[str, bytes]]:
    return [(i.key, i.value) for i in running.catalog.store.scan_prefix("")]


def test_hostile_statements_are_invalid_and_change_nothing(running: Running, tmp_path: Path) -> None:
    import adbc_driver_manager

    before = registry_state(running)
    client, options = running.client()
    outcomes = {}
    for sql in hostile_corpus(tmp_path):
        with pytest.raises(pa.ArrowInvalid) as err:
            client.get_flight_info(query(sql), options)
        no_leak(str(err.value))
        outcomes[sql[:60]] = str(err.value)[:100]
    with running.adbc() as conn:
        for sql in hostile_corpus(tmp_path)[:20]:
            with conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="INVALID_ARGUMENT"):
                cur.execute(sql)
    assert registry_state(running) == before
    assert list(tmp_path.iterdir()) == []
    assert running.server.snapshots.current().project("p").table("w", "ns", "t") is not None


def test_health_action(running: Running) -> None:
    import json

    client, options = running.client()
    [result] = list(client.do_action(fl.Action("health", b""), options))
    health = json.loads(result.body.to_pybytes())
    assert health["status"] == "ok"
    assert 0 <= health["snapshot"]["age_seconds"] < 5
    assert health["project"] == {"name": "p", "tables": 3}  # alice's project's (test_health: views)


def test_grpc_health_service_on_the_endpoint_port(tmp_path: Path) -> None:
    """What a Kubernetes gRPC probe sees: NOT_SERVING until the catalog is loaded, SERVING while
    calls work, NOT_SERVING once the registry has been unreachable past the staleness bound."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from lake_platform.query.snapshot import CatalogSnapshot
    from lake_platform.query.snapshot_cache import SnapshotCache

    settings, catalog = build_catalog(tmp_path / "home")
    failing = {"on": True}

    def loader(previous: CatalogSnapshot | None) -> CatalogSnapshot:
        if failing["on"]:
            raise ServiceUnavailable("registry down")
        return load_snapshot(catalog.store, previous)

    snapshots = SnapshotCache(loader, ttl=0.05, max_stale=0.3)
    server = start_server(settings, catalog, snapshots=snapshots)
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)

            def status() -> int:
                return stub.Check(
                    health_pb2.HealthCheckRequest(service="arrow.flight.protocol.FlightService")
                ).status

            assert status() == not_serving
            failing["on"] = False
            assert wait_until(lambda: status() == serving)
            failing["on"] = True
            assert wait_until(lambda: status() == not_serving)
    finally:
        server.stop(grace=0)
        catalog.close()


def test_login_header_round_trip(running: Running) -> None:
    """A raw Handshake with Basic answers with a Bearer that works for later calls."""
    client = fl.connect(running.uri)
    key, value = client.authenticate_basic_token("alice", PASSWORDS["alice"])
    assert key == b"authorization" and value.startswith(b"Bearer lkb2.eyJ")
    assert basic("a", "b").startswith(b"Basic ")
    started = time.monotonic()
    info = client.get_flight_info(query("SELECT 42 AS answer"), fl.FlightCallOptions(headers=[(key, value)]))
    assert info.schema.names == ["answer"] and time.monotonic() - started < 5


def test_tls(lake: Any, tmp_path: Path) -> None:
    settings, catalog = lake
    cert, key = self_signed(tmp_path)
    server = start_server(settings, catalog, tls_cert_file=cert, tls_key_file=key, host="localhost")
    try:
        assert server.location.startswith("grpc+tls://")
        client = fl.connect(f"grpc+tls://localhost:{server.port}", tls_root_certs=cert.read_bytes())
        options = fl.FlightCallOptions(headers=[client.authenticate_basic_token("alice", PASSWORDS["alice"])])
        info = client.get_flight_info(query("SELECT count(*) AS n FROM w.ns.t"), options)
        assert client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist() == [{"n": 1000}]
        plaintext = fl.connect(f"grpc://localhost:{server.port}")
        with pytest.raises(fl.FlightError):
            plaintext.authenticate_basic_token("alice", PASSWORDS["alice"], fl.FlightCallOptions(timeout=2))
    finally:
        server.stop(grace=0)

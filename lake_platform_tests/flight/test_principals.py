"""The server with the catalog's own principals: users and service tokens made through the catalog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest

from lake_platform.flight import proto
from lake_platform.flight.server import FlightSqlServer
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.flight.conftest import build_catalog

pytestmark = pytest.mark.filterwarnings("ignore:Cannot disable autocommit")


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings, catalog = build_catalog(tmp_path_factory.mktemp("principals") / "home")
    catalog.access.add_user("dana", project="p", role="reader", password="dana-password-1")
    catalog.access.add_user("eve", project="q", role="reader", password="eve-password-1")
    record, token = catalog.access.create_token("etl", project="p", role="reader")
    server = FlightSqlServer(
        settings, flight_settings(port=0, snapshot_ttl_seconds=0.5), catalog=catalog
    ).start()
    try:
        yield {
            "server": server,
            "catalog": catalog,
            "token": token,
            "token_id": record.token_id,
            "uri": f"grpc://127.0.0.1:{server.port}",
        }
    finally:
        server.stop(grace=0)
        catalog.close()


def test_users_log_in_and_see_their_project(real: dict[str, Any]) -> None:
    import adbc_driver_flightsql.dbapi as fsql

    with (
        fsql.connect(
            real["uri"], db_kwargs={"username": "dana", "password": "dana-password-1"}, autocommit=True
        ) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SELECT count(*) AS n FROM w.ns.t")
        assert cur.fetch_arrow_table().to_pylist() == [{"n": 1000}]
    with (
        fsql.connect(
            real["uri"], db_kwargs={"username": "eve", "password": "eve-password-1"}, autocommit=True
        ) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SELECT code FROM w.ns.secret")
        assert cur.fetch_arrow_table().to_pylist() == [{"code": "bob-only"}]


def test_wrong_password_for_a_real_user(real: dict[str, Any]) -> None:
    client = fl.connect(real["uri"])
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid credentials"):
        client.authenticate_basic_token("dana", "not-the-password")


def test_service_token_as_bearer_and_revocation(real: dict[str, Any]) -> None:
    client = fl.connect(real["uri"])
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {real['token']}".encode())])
    descriptor = fl.FlightDescriptor.for_command(
        proto.pack(proto.CommandStatementQuery(query="SELECT 1 AS one"))
    )
    assert client.get_flight_info(descriptor, options).schema.names == ["one"]
    bad = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {real['token']}x".encode())])
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.get_flight_info(descriptor, bad)


def test_local_admin_cannot_use_flight(real: dict[str, Any]) -> None:
    from lake_platform.auth.service import flight_identity
    from lake_platform.catalog.principals import LOCAL_ADMIN
    from lake_platform.errors import Unauthenticated

    with pytest.raises(Unauthenticated):
        flight_identity(LOCAL_ADMIN)


def test_real_tokens_verified_once_then_cached(real: dict[str, Any], tmp_path: Path) -> None:
    server: FlightSqlServer = real["server"]
    identity = server.auth.verify_bearer(real["token"])
    assert identity.project == "p" and identity.kind == "token"
    calls = []
    original = server.auth.authenticator.authenticate_token
    server.auth.authenticator.authenticate_token = lambda t: calls.append(t) or original(t)  # type: ignore
    try:
        for _ in range(5):
            server.auth.verify_bearer(real["token"])
        assert calls == []  # cached: no registry read or scrypt per call
    finally:
        del server.auth.authenticator.authenticate_token


def test_the_configured_failure_limit_is_the_only_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One throttle in series: LAKE_FLIGHT_AUTH_MAX_FAILURES decides, with the catalog's users
    (a second, hard-coded throttle behind it used to lock out after 5 whatever the setting)."""
    monkeypatch.setenv("LAKE_FLIGHT_AUTH_MAX_FAILURES", "8")
    monkeypatch.setenv("LAKE_FLIGHT_AUTH_LOCKOUT_SECONDS", "600")
    settings, catalog = build_catalog(tmp_path / "home")
    catalog.access.add_user("fred", project="p", role="reader", password="fred-password-1")
    server = FlightSqlServer(settings, flight_settings(port=0), catalog=catalog).start()
    try:
        client = fl.connect(f"grpc://127.0.0.1:{server.port}")
        for _ in range(7):
            with pytest.raises(fl.FlightUnauthenticatedError, match="invalid credentials"):
                client.authenticate_basic_token("fred", "wrong-guess")
        client.authenticate_basic_token("fred", "fred-password-1")  # 7 failures are allowed
        for _ in range(8):
            with pytest.raises(fl.FlightUnauthenticatedError, match="invalid credentials"):
                client.authenticate_basic_token("fred", "wrong-guess")
        with pytest.raises(fl.FlightUnauthenticatedError, match="too many failed attempts"):
            client.authenticate_basic_token("fred", "fred-password-1")  # the 8th locked it out
    finally:
        server.stop(grace=0)
        catalog.close()

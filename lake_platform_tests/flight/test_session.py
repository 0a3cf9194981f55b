"""Session options through stock clients: a default catalog (warehouse) and schema (namespace)
kept in a sealed cookie, so one-, two- and three-part names resolve as a SQL user expects, on
any replica."""

from __future__ import annotations

from typing import Any

import adbc_driver_flightsql.dbapi
import pyarrow.flight as fl
import pytest

from lake_platform.flight import proto, session
from lake_platform.sqlalchemy_dialect import set_session_defaults
from lake_platform_tests.flight.conftest import Running, login, serving
from lake_platform_tests.flight.helpers import CookieJar

COOKIES = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}


def _set(conn: Any, catalog: str | None = None, schema: str | None = None) -> None:
    """Set the defaults as the SQLAlchemy dialect does (read back, set again while lost: ADBC's
    cookie middleware loses a cookie now and then under load)."""
    set_session_defaults(adbc_driver_flightsql.dbapi, conn, catalog, schema)


def _rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_adbc_current_catalog_and_schema_make_short_names_work(running: Running) -> None:
    with running.adbc(**COOKIES) as conn:
        with pytest.raises(Exception, match=r"table t not found: .*default schema") as info:
            _rows(conn, "SELECT count(*) FROM t")
        assert "datafusion" not in str(info.value)
        _set(conn, catalog="w")
        assert _rows(conn, "SELECT count(*) FROM ns.t") == [(1000,)]
        _set(conn, catalog="w", schema="ns")
        assert _rows(conn, "SELECT count(*) FROM t") == [(1000,)]
        assert _rows(conn, "SELECT count(*) FROM w.ns.t") == [(1000,)]
        assert _rows(conn, 'SELECT count(*) FROM "ns.sub".u') == [(3,)]
        _set(conn, catalog="w", schema="ns.sub")
        assert _rows(conn, "SELECT count(*) FROM u") == [(3,)]
        with pytest.raises(Exception, match=r"table w\.ns\.sub\.nope not found|w.\"?ns.sub\"?.nope"):
            _rows(conn, "SELECT * FROM nope")


def test_bad_options_are_refused_by_name_and_change_nothing(running: Running) -> None:
    with running.adbc(**COOKIES) as conn:
        _set(conn, catalog="w")
        with pytest.raises(Exception, match="'catalog' \\(invalid value\\)"):
            conn.adbc_current_catalog = "no_such_warehouse"
        with pytest.raises(Exception, match="'schema' \\(invalid value\\)"):
            conn.adbc_current_db_schema = "secret_ns"
        with pytest.raises(Exception, match="'colour' \\(invalid name\\)"):
            conn.adbc_connection.set_options(**{"adbc.flight.sql.session.option.colour": "blue"})
        assert conn.adbc_current_catalog == "w"


def _set_options(uri: str, **options: str) -> str:
    cookies = CookieJar()
    client = fl.connect(uri, middleware=[cookies])
    call = fl.FlightCallOptions(headers=[client.authenticate_basic_token("alice", "alice-password")])
    request = session.SetSessionOptionsRequest()
    for name, value in options.items():
        request.session_options[name].string_value = value
    results = list(client.do_action(fl.Action("SetSessionOptions", request.SerializeToString()), call))
    errors = session.SetSessionOptionsResult()
    errors.ParseFromString(results[0].body.to_pybytes())
    assert not errors.errors and cookies.set_cookie is not None
    return cookies.set_cookie


def test_the_session_is_read_by_any_replica_and_ends_when_closed(running: Running) -> None:
    cookie = _set_options(running.uri, catalog="w", schema="ns")
    assert cookie.startswith(session.COOKIE + "=")
    with serving(running.settings, running.catalog) as other:  # a replica sharing the keys
        client, options = login(f"grpc://127.0.0.1:{other.port}")
        headers = fl.FlightCallOptions(headers=[*options.headers, (b"cookie", cookie.encode())])
        descriptor = fl.FlightDescriptor.for_command(
            proto.pack(proto.CommandStatementQuery(query="SELECT id FROM t"))
        )
        info = client.get_flight_info(descriptor, headers)
        # The ticket carries the defaults: the DoGet needs no cookie, on this replica or the first.
        assert client.do_get(info.endpoints[0].ticket, options).read_all().num_rows == 1000
        first, first_options = login(running.uri)
        assert first.do_get(info.endpoints[0].ticket, first_options).read_all().num_rows == 1000
        got = list(client.do_action(fl.Action("GetSessionOptions", b""), headers))
        result = session.GetSessionOptionsResult()
        result.ParseFromString(got[0].body.to_pybytes())
        assert {k: v.string_value for k, v in result.session_options.items()} == {
            "catalog": "w",
            "schema": "ns",
        }
        closed = list(client.do_action(fl.Action("CloseSession", b""), headers))
        assert (
            proto.CloseSessionResult.FromString(closed[0].body.to_pybytes()).status
            == proto.CLOSE_SESSION_CLOSED
        )


def test_another_principals_session_cookie_is_refused(running: Running) -> None:
    cookie = _set_options(running.uri, catalog="w")
    client, options = login(running.uri, "bob")
    headers = fl.FlightCallOptions(headers=[*options.headers, (b"cookie", cookie.encode())])
    with pytest.raises(fl.FlightUnauthorizedError, match="issued to another principal"):
        list(client.do_action(fl.Action("GetSessionOptions", b""), headers))


def test_a_prepared_statement_keeps_the_defaults_it_was_prepared_with(running: Running) -> None:
    with running.adbc(**COOKIES) as conn:
        _set(conn, catalog="w", schema="ns")
        with conn.cursor() as cur:
            cur.adbc_prepare("SELECT count(*) FROM t WHERE id < ?")
            _set(conn, catalog="w", schema="ns.sub")  # later changes do not move a prepared statement
            cur.execute("SELECT count(*) FROM t WHERE id < ?", (10,))
            assert cur.fetchall() == [(10,)]

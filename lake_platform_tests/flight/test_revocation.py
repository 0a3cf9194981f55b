"""Removing a user or revoking a service token ends access within one snapshot refresh
(``LAKE_FLIGHT_SNAPSHOT_TTL_SECONDS``), not when the login token expires: every call checks the
caller against the process's catalog snapshot (no registry read on the request path)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pyarrow.flight as fl
import pytest

from lake_platform.flight import proto, session
from lake_platform.flight.server import FlightSqlServer
from lake_platform.flight.spool import SEGMENT_PREFIX
from lake_platform.registry import keys
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.flight.conftest import build_catalog, plan, wait_until
from lake_platform_tests.flight.helpers import CookieJar

SQL = "SELECT count(*) AS n FROM w.ns.t"
TTL = 0.3


@pytest.fixture
def real(tmp_path: Any) -> Iterator[dict[str, Any]]:
    settings, catalog = build_catalog(tmp_path / "home")
    catalog.access.add_user("dana", project="p", role="reader", password="dana-password-1")
    record, token = catalog.access.create_token("etl", project="p", role="reader")
    server = FlightSqlServer(
        settings, flight_settings(port=0, snapshot_ttl_seconds=TTL, keys="k1:" + "ab" * 32), catalog=catalog
    ).start()
    try:
        yield {"server": server, "catalog": catalog, "token": token, "token_id": record.token_id}
    finally:
        server.stop(grace=0)
        catalog.close()


def _uri(server: FlightSqlServer) -> str:
    return f"grpc://127.0.0.1:{server.port}"


def _login(server: FlightSqlServer, user: str, password: str) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    client = fl.connect(_uri(server))
    return client, fl.FlightCallOptions(headers=[client.authenticate_basic_token(user, password)])


def _refused(client: fl.FlightClient, options: fl.FlightCallOptions) -> bool:
    try:
        plan(client, options, SQL)
    except fl.FlightUnauthenticatedError:
        return True
    return False


def test_a_removed_users_session_ends_at_the_next_snapshot_refresh(real: dict[str, Any]) -> None:
    server: FlightSqlServer = real["server"]
    client, options = _login(server, "dana", "dana-password-1")
    assert not _refused(client, options)
    real["catalog"].access.remove_user("dana")
    server.snapshots.refresh()  # the refresh the background thread makes within the TTL
    with pytest.raises(fl.FlightUnauthenticatedError, match="no longer exists or was revoked"):
        plan(client, options, SQL)


def test_the_bound_is_the_snapshot_ttl(real: dict[str, Any]) -> None:
    server: FlightSqlServer = real["server"]
    client, options = _login(server, "dana", "dana-password-1")
    assert not _refused(client, options)
    removed = time.monotonic()
    real["catalog"].access.remove_user("dana")
    # Only the background refresh runs here; the poll is bounded well above the TTL.
    assert wait_until(lambda: _refused(client, options), timeout=TTL + 5.0)
    assert time.monotonic() - removed < TTL + 5.0


def test_a_revoked_service_token_ends_at_the_next_snapshot_refresh(real: dict[str, Any]) -> None:
    server: FlightSqlServer = real["server"]
    client = fl.connect(_uri(server))
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {real['token']}".encode())])
    assert not _refused(client, options)  # verified once, then cached (SERVICE_TOKEN_CACHE_SECONDS)
    real["catalog"].access.revoke_token(real["token_id"])
    server.snapshots.refresh()
    assert _refused(client, options)


def test_a_user_added_after_the_last_refresh_is_not_refused(real: dict[str, Any]) -> None:
    server: FlightSqlServer = real["server"]
    server.snapshots.stop()  # the snapshot stays older than the user
    real["catalog"].access.add_user("fred", project="p", role="reader", password="fred-password-1")
    client, options = _login(server, "fred", "fred-password-1")
    assert not _refused(client, options)
    token = real["catalog"].access.create_token("late", project="p", role="reader")[1]
    late = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
    assert not _refused(client, late) and not _refused(client, late)  # verified, then cached


def test_a_role_change_ends_the_old_session(real: dict[str, Any]) -> None:
    """``set_user_role`` (lake user set-role): the Bearer sealed with the old role is refused
    after the next refresh; the same password logs in again, with the new role."""
    server: FlightSqlServer = real["server"]
    client, options = _login(server, "dana", "dana-password-1")
    real["catalog"].access.set_user_role("dana", "writer")
    server.snapshots.refresh()
    assert _refused(client, options)
    client2, options2 = _login(server, "dana", "dana-password-1")
    assert not _refused(client2, options2)


def _adbc(server: FlightSqlServer, user: str, password: str) -> Any:
    import adbc_driver_flightsql.dbapi as fsql

    db_kwargs = {"username": user, "password": password}
    return fsql.connect(_uri(server), db_kwargs=db_kwargs, autocommit=True)


@pytest.mark.filterwarnings("ignore:Cannot disable autocommit")
def test_a_user_removed_and_added_again_does_not_revive_the_old_login(real: dict[str, Any]) -> None:
    """The Bearer names the user record it was issued under, not just the name: a new user of
    the same name, project and role (another person) does not bring the old login back."""
    import adbc_driver_manager

    server: FlightSqlServer = real["server"]
    with _adbc(server, "dana", "dana-password-1") as old:
        with old.cursor() as cur:
            cur.execute(SQL)
            assert cur.fetch_arrow_table().to_pylist() == [{"n": 1000}]
        real["catalog"].access.remove_user("dana")
        real["catalog"].access.add_user("dana", project="p", role="reader", password="other-person-2")
        server.snapshots.refresh()  # the refresh the background thread makes within the TTL
        with old.cursor() as cur:  # the same connection: the Bearer of the first login
            with pytest.raises(adbc_driver_manager.Error, match="no longer exists or was revoked"):
                cur.execute(SQL)
    with _adbc(server, "dana", "other-person-2") as new, new.cursor() as cur:
        cur.execute(SQL)
        assert cur.fetch_arrow_table().to_pylist() == [{"n": 1000}]


def test_a_service_token_revoked_and_created_again_under_its_name_stays_revoked(
    real: dict[str, Any],
) -> None:
    """A token created again under a revoked one's name is another token (new id and secret):
    the revoked one stays refused."""
    server: FlightSqlServer = real["server"]
    client = fl.connect(_uri(server))
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {real['token']}".encode())])
    assert not _refused(client, options)
    real["catalog"].access.revoke_token(real["token_id"])
    _, again = real["catalog"].access.create_token("etl", project="p", role="reader")
    server.snapshots.refresh()
    assert _refused(client, options)
    renewed = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {again}".encode())])
    assert not _refused(client, renewed)


def test_a_user_recorded_before_records_had_an_id_keeps_signing_in(real: dict[str, Any]) -> None:
    """A record written by an earlier release has no ``user_id``: its logins carry none and stay
    valid; once the user is removed and added again (with an id), they are refused."""
    catalog, server = real["catalog"], real["server"]
    catalog.access.add_user("olde", project="p", role="reader", password="olde-password-1")
    item = catalog.store.get(keys.user("olde"))
    earlier = {k: v for k, v in json.loads(item.value).items() if k != "user_id"}
    catalog.store.compare_and_swap(item.key, item.revision, json.dumps(earlier).encode())
    client, options = _login(server, "olde", "olde-password-1")
    server.snapshots.refresh()
    assert server.snapshots.current().principals.users["olde"] == ("p", "reader", "")  # type: ignore[union-attr]
    assert not _refused(client, options)
    issued = _issued(server, "olde", "olde-password-1")  # tickets and handles without an id too
    assert _redeem(client, options, issued) == list(issued)
    catalog.access.remove_user("olde")
    catalog.access.add_user("olde", project="p", role="reader", password="olde-password-1")
    server.snapshots.refresh()
    assert _refused(client, options)


def _issued(server: FlightSqlServer, user: str, password: str) -> dict[str, Any]:
    """What a login is handed to present later: a statement ticket, a spooled result's segment
    ticket, a prepared-statement handle and a session cookie."""
    cookies = CookieJar()
    client = fl.connect(_uri(server), middleware=[cookies])
    options = fl.FlightCallOptions(headers=[client.authenticate_basic_token(user, password)])
    spool = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
    request = proto.ActionCreatePreparedStatementRequest(query=SQL)
    [result] = client.do_action(fl.Action("CreatePreparedStatement", proto.pack(request)), options)
    created = proto.parse(
        proto.ActionCreatePreparedStatementResult, proto.unpack_any(result.body.to_pybytes())[1]
    )
    setting = session.SetSessionOptionsRequest()
    setting.session_options["catalog"].string_value = "w"
    list(client.do_action(fl.Action("SetSessionOptions", setting.SerializeToString()), options))
    assert cookies.set_cookie is not None
    segment = plan(client, spool, SQL).endpoints[0].ticket
    assert proto.statement_handle(segment.ticket).startswith(SEGMENT_PREFIX)
    return {
        "ticket": plan(client, options, SQL).endpoints[0].ticket,
        "segment": segment,
        "handle": created.prepared_statement_handle,
        "cookie": cookies.set_cookie,
    }


def _redeem(client: fl.FlightClient, options: fl.FlightCallOptions, issued: dict[str, Any]) -> list[str]:
    """Which of ``issued`` the caller of ``options`` could use."""
    prepared = proto.CommandPreparedStatementQuery(prepared_statement_handle=issued["handle"])
    with_cookie = fl.FlightCallOptions(headers=[*options.headers, (b"cookie", issued["cookie"].encode())])
    uses = {
        "ticket": lambda: client.do_get(issued["ticket"], options).read_all(),
        "segment": lambda: client.do_get(issued["segment"], options).read_all(),
        "handle": lambda: client.get_flight_info(
            fl.FlightDescriptor.for_command(proto.pack(prepared)), options
        ),
        "cookie": lambda: plan(client, with_cookie, "SELECT count(*) AS n FROM ns.t"),
    }
    accepted = []
    for name, use in uses.items():
        try:
            use()
        except fl.FlightUnauthorizedError as exc:
            assert "issued to another principal" in str(exc), (name, exc)
        else:
            accepted.append(name)
    return accepted


def test_a_user_added_again_cannot_redeem_the_removed_users_tickets(real: dict[str, Any]) -> None:
    """Tickets, spooled segments, prepared handles and session cookies name the user record
    they were issued under, as the Bearer does: a new user of the same name, project and role
    (another person) cannot use what the removed one was handed."""
    server: FlightSqlServer = real["server"]
    old = _issued(server, "dana", "dana-password-1")
    assert _redeem(*_login(server, "dana", "dana-password-1"), old) == list(old)  # its own, before
    real["catalog"].access.remove_user("dana")
    real["catalog"].access.add_user("dana", project="p", role="reader", password="other-person-2")
    server.snapshots.refresh()
    client, options = _login(server, "dana", "other-person-2")
    assert _redeem(client, options, old) == []
    assert _redeem(client, options, _issued(server, "dana", "other-person-2")) == list(old)

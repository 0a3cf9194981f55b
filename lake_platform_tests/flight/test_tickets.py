"""Statement tickets through the endpoint, sealed as tokens (the sealer on its own:
auth/test_tokens.py): any replica with the keys runs them, across a key rotation.

Attacks on tickets (and prepared handles, sealed the same way) are refused with a clean status
and never crash the server: tampered bytes (a hypothesis property flipping bits, truncating,
appending), another principal's ticket, an expired one, an oversized one, an unknown key id,
an earlier release's envelope, claims beyond this server's limits.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake_platform.auth.tokens import Identity, Sealer
from lake_platform.errors import InvalidInput
from lake_platform.flight import proto
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import fetch, login, plan, start_server

K1, K2, K9 = (secrets.token_hex(32) for _ in range(3))
LEGACY_SECRET = secrets.token_hex(32)


def handle_of(info: fl.FlightInfo) -> bytes:
    name, payload = proto.unpack_any(info.endpoints[0].ticket.ticket)
    assert name == "TicketStatementQuery"
    return proto.parse(proto.TicketStatementQuery, payload).statement_handle


def ticket_with(handle: bytes) -> fl.Ticket:
    return fl.Ticket(proto.pack(proto.TicketStatementQuery(statement_handle=handle)))


@pytest.fixture(scope="module")
def servers(lake: tuple[LakeSettings, Any]) -> Iterator[dict[str, Any]]:
    """Replicas of one deployment at different points of a key rotation, plus strangers."""
    settings, catalog = lake
    configs = {
        "k1": {"keys": f"k1:{K1}"},
        "k1k2": {"keys": f"k1:{K1},k2:{K2}"},  # k2 is newest: it seals, both open
        "k2": {"keys": f"k2:{K2}"},
        "k9": {"keys": f"k9:{K9}"},  # another deployment
        "legacy": {"secret_key": LEGACY_SECRET},  # the single-secret setting: key id "default"
        "migrated": {"keys": f"default:{LEGACY_SECRET},k2:{K2}"},
        "strict": {"keys": f"k1:{K1}", "max_sql_bytes": 2048, "max_ticket_tables": 1, "max_param_bytes": 64},
    }
    running = {name: start_server(settings, catalog, **options) for name, options in configs.items()}
    try:
        yield running
    finally:
        for server in running.values():
            server.stop(grace=0)


def uri(server: Any) -> str:
    return f"grpc://127.0.0.1:{server.port}"


def header_of(blob: bytes) -> dict[str, Any]:
    segment = blob.split(b".")[0]
    return json.loads(base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4)))


# == attacks through the endpoint ==================================================================


def test_ticket_from_a_replica_with_the_same_keys_runs(servers: dict[str, Any]) -> None:
    a, a_opts = login(uri(servers["k1k2"]))
    b, b_opts = login(uri(servers["k2"]))
    info = plan(a, a_opts, "SELECT count(*) AS n FROM w.ns.t")
    assert fetch(b, b_opts, info).to_pylist() == [{"n": 1000}]
    # The bearer token crosses replicas too.
    assert fetch(b, a_opts, info).to_pylist() == [{"n": 1000}]


def test_key_rotation_through_the_endpoint(servers: dict[str, Any]) -> None:
    old, old_opts = login(uri(servers["k1"]))
    mid, mid_opts = login(uri(servers["k1k2"]))
    new, new_opts = login(uri(servers["k2"]))
    from_old = plan(old, old_opts, "SELECT count(*) AS n FROM w.ns.t")
    assert fetch(mid, mid_opts, from_old).to_pylist() == [{"n": 1000}]  # k1 still opens
    with pytest.raises(fl.FlightUnauthenticatedError, match="unknown key id 'k1'"):
        fetch(new, new_opts, from_old)  # k1 retired
    from_mid = plan(mid, mid_opts, "SELECT count(*) AS n FROM w.ns.t")
    assert header_of(handle_of(from_mid))["kid"] == "k2"
    assert fetch(new, new_opts, from_mid).to_pylist() == [{"n": 1000}]


def test_unknown_key_id_is_refused(servers: dict[str, Any]) -> None:
    stranger, s_opts = login(uri(servers["k9"]))
    client, options = login(uri(servers["k1k2"]))
    info = plan(stranger, s_opts, "SELECT 1 AS one")
    with pytest.raises(fl.FlightUnauthenticatedError, match="unknown key id 'k9'"):
        fetch(client, options, info)


def test_single_secret_setting_is_one_key_and_migrates(servers: dict[str, Any]) -> None:
    legacy, l_opts = login(uri(servers["legacy"]))
    migrated, m_opts = login(uri(servers["migrated"]))
    info = plan(legacy, l_opts, "SELECT count(*) AS n FROM w.ns.t")
    assert header_of(handle_of(info))["kid"] == "default"
    assert fetch(migrated, m_opts, info).to_pylist() == [{"n": 1000}]


def test_earlier_envelopes_are_refused_through_the_endpoint(servers: dict[str, Any]) -> None:
    client, options = login(uri(servers["legacy"]))
    # What the release before this one sealed: version byte 3, the key id, the sealed claims ...
    for version in (1, 2, 3):
        envelope = bytes([version, 7]) + b"default" + os.urandom(200)
        with pytest.raises(pa.ArrowInvalid, match=f"envelope version {version}.*plan the query again"):
            client.do_get(ticket_with(envelope), options).read_all()
    # ... and its bearer tokens.
    old_bearer = "lkb1." + base64.urlsafe_b64encode(bytes([3, 7]) + b"default" + os.urandom(200)).decode()
    stale = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {old_bearer}".encode())])
    with pytest.raises(fl.FlightUnauthenticatedError, match="another version; authenticate again"):
        plan(client, stale, "SELECT 1 AS one")


def test_another_principals_ticket_is_refused(servers: dict[str, Any]) -> None:
    bob, bob_opts = login(uri(servers["k1k2"]), "bob")
    alice, alice_opts = login(uri(servers["k2"]), "alice")
    info = plan(bob, bob_opts, "SELECT code FROM w.ns.secret")
    with pytest.raises(fl.FlightUnauthorizedError, match="another principal"):
        fetch(alice, alice_opts, info)


def test_expired_ticket_is_refused(servers: dict[str, Any]) -> None:
    server = servers["k1"]
    client, options = login(uri(server))
    info = plan(client, options, "SELECT 1 AS one")
    claims = server.sealer.open("ticket", handle_of(info))
    body = {k: v for k, v in claims.items() if k not in ("v", "kid", "pur", "iat", "exp")}
    expired = server.sealer.seal("ticket", body, -1)
    with pytest.raises(pa.ArrowInvalid, match="expired"):
        client.do_get(ticket_with(expired), options).read_all()


def test_oversized_ticket_and_too_many_tables(servers: dict[str, Any]) -> None:
    client, options = login(uri(servers["strict"]))
    huge = b"eyJ" + os.urandom(3 << 20)
    with pytest.raises(pa.ArrowInvalid, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        client.do_get(ticket_with(huge), options).read_all()
    with pytest.raises(pa.ArrowInvalid, match="LAKE_FLIGHT_MAX_TICKET_TABLES"):
        plan(client, options, "SELECT count(*) FROM w.ns.t JOIN w.ns.multi USING (id)")
    assert fetch(client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.t")).to_pylist() == [
        {"n": 1000}
    ]


def test_claims_beyond_this_servers_limits_are_refused_after_opening(servers: dict[str, Any]) -> None:
    """A replica with smaller limits (same keys) refuses what a laxer one sealed."""
    lax, lax_opts = login(uri(servers["k1"]))
    strict, strict_opts = login(uri(servers["strict"]))
    long_sql = "SELECT count(*) AS n FROM w.ns.t WHERE s <> '" + "x" * 3000 + "'"
    with pytest.raises(pa.ArrowInvalid, match="LAKE_FLIGHT_MAX_SQL_BYTES"):
        fetch(strict, strict_opts, plan(lax, lax_opts, long_sql))
    with pytest.raises(pa.ArrowInvalid, match="LAKE_FLIGHT_MAX_TICKET_TABLES"):
        fetch(
            strict, strict_opts, plan(lax, lax_opts, "SELECT count(*) FROM w.ns.t JOIN w.ns.multi USING (id)")
        )


def test_prepared_handles_use_the_same_sealing(servers: dict[str, Any]) -> None:
    old, old_opts = login(uri(servers["k1"]))
    new, new_opts = login(uri(servers["k2"]))
    mid, mid_opts = login(uri(servers["k1k2"]))
    request = proto.ActionCreatePreparedStatementRequest(query="SELECT count(*) AS n FROM w.ns.t")
    [result] = list(old.do_action(fl.Action("CreatePreparedStatement", proto.pack(request)), old_opts))
    handle = proto.parse(
        proto.ActionCreatePreparedStatementResult, proto.unpack_any(result.body.to_pybytes())[1]
    ).prepared_statement_handle
    assert header_of(handle)["kid"] == "k1"
    descriptor = fl.FlightDescriptor.for_command(
        proto.pack(proto.CommandPreparedStatementQuery(prepared_statement_handle=handle))
    )
    info = mid.get_flight_info(descriptor, mid_opts)
    assert fetch(mid, mid_opts, info).to_pylist() == [{"n": 1000}]
    with pytest.raises(fl.FlightUnauthenticatedError, match="unknown key id 'k1'"):
        new.get_flight_info(descriptor, new_opts)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tampered_tickets_are_refused_by_the_endpoint(servers: dict[str, Any], data: st.DataObject) -> None:
    """Property: whatever is done to a real ticket's bytes, DoGet answers UNAUTHENTICATED or
    INVALID_ARGUMENT with a clean message, and the server keeps serving."""
    client, options = _tamper_client(servers)
    original = _tamper_ticket(servers)
    whole = data.draw(st.booleans())
    blob = bytearray(original.ticket if whole else handle_of_ticket(original))
    how = data.draw(st.sampled_from(["flip", "truncate", "append"]))
    if how == "flip":
        for bit in data.draw(
            st.lists(st.integers(0, len(blob) * 8 - 1), min_size=1, max_size=4, unique=True)
        ):
            blob[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    else:
        blob += data.draw(st.binary(min_size=1, max_size=8))
    ticket = fl.Ticket(bytes(blob)) if whole else ticket_with(bytes(blob))
    if ticket.ticket == original.ticket:
        return
    try:
        client.do_get(ticket, options).read_all()
    except (fl.FlightUnauthenticatedError, pa.ArrowInvalid) as exc:
        text = str(exc)
        assert "Traceback" not in text and ".py" not in text
    else:
        # Even a change that leaves the sealed handle intact (an unknown field in a wrapper) is
        # refused: the wrappers are decoded strictly.
        pytest.fail(f"a tampered ticket was served ({how}): {ticket.ticket.hex()}")
    assert fetch(client, options, original).to_pylist() == [{"n": 1000}]


_TAMPER: dict[str, Any] = {}


def _tamper_client(servers: dict[str, Any]) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    if "client" not in _TAMPER:
        _TAMPER["client"] = login(uri(servers["k1k2"]))
    return _TAMPER["client"]


def _tamper_ticket(servers: dict[str, Any]) -> fl.Ticket:
    if "ticket" not in _TAMPER:
        client, options = _tamper_client(servers)
        _TAMPER["ticket"] = plan(client, options, "SELECT count(*) AS n FROM w.ns.t").endpoints[0].ticket
    return _TAMPER["ticket"]


def handle_of_ticket(ticket: fl.Ticket) -> bytes:
    _name, payload = proto.unpack_any(ticket.ticket)
    return proto.parse(proto.TicketStatementQuery, payload).statement_handle


def test_time_travel_refs_round_trip_and_stay_canonical() -> None:
    """A ticket may pin a table as it is and older versions of it (``a``: the selector written);
    written names stay unique and ordered, and a malformed selector never opens."""
    from lake_platform.flight.tickets import TicketLimits, Tickets
    from lake_platform.query.snapshot import TableRef

    tickets = Tickets(Sealer([("k1", bytes.fromhex(K1))]), TicketLimits(), lifetime=60, prepared_lifetime=60)
    who = Identity("alice", "user", "p", "reader")
    now = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 3, "_versions/3.manifest")
    v1 = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 1, "_versions/1.manifest", at="v1")
    eod = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 1, "_versions/1.manifest", at="tag:eod")
    blob, _ = tickets.seal_statement(who, "SELECT 1", None, (v1, now, eod))
    opened = tickets.open_statement(blob, who)
    assert opened.snapshots == (now, eod, v1)  # by written name: t, t@tag:eod, t@v1
    assert [r.written for r in opened.snapshots] == ["p.w.ns.t", "p.w.ns.t@tag:eod", "p.w.ns.t@v1"]
    assert "a" not in now.to_json() and v1.to_json()["a"] == "v1"  # plain pins are unchanged
    with pytest.raises(InvalidInput):  # the same written name twice
        tickets.seal_statement(who, "SELECT 1", None, (v1, v1))
    for bad in ("V1", "v0", "tag:Bad", "", 12):
        with pytest.raises(ValueError):
            TableRef.from_json({**v1.to_json(), "a": bad})

"""The sealed envelope (issue 7): versioned, key-rotated, canonical and bounded claims.

Attacks on tickets (and prepared handles, sealed the same way) are refused with a clean status
and never crash the server: tampered bytes (a hypothesis property flipping bits, truncating,
appending), another principal's ticket, an expired one, an oversized one, an unknown key id,
a legacy or a newer envelope version, claims beyond this server's limits.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake_platform.auth.tokens import (
    ENVELOPE_VERSION,
    Expired,
    Identity,
    Sealer,
    UnknownKey,
    UnsupportedEnvelope,
    new_ticket_id,
)
from lake_platform.errors import InvalidInput, Unauthenticated
from lake_platform.flight import proto
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.flight.conftest import fetch, login, plan, start_server

K1, K2, K9 = (secrets.token_hex(32) for _ in range(3))
LEGACY_SECRET = secrets.token_hex(32)
ALICE = Identity("alice", "user", "p", "reader")


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


# == the sealer on its own ========================================================================


def test_envelope_round_trip_and_header() -> None:
    sealer = Sealer([("k1", bytes.fromhex(K1))])
    blob = sealer.seal("ticket", {"sql": "SELECT 1"}, 60)
    assert blob[0] == ENVELOPE_VERSION == 3
    assert blob[1] == 2 and blob[2:4] == b"k1"  # key id in the clear, bound as associated data
    sealed = int.from_bytes(blob[4:8], "big")
    claims = sealer.open("ticket", blob)
    assert claims["sql"] == "SELECT 1" and claims["v"] == 3 and claims["kid"] == "k1"
    assert claims["exp"] - claims["iat"] == 60_000  # milliseconds
    assert b"SELECT" not in blob  # the kept claims are encrypted ...
    # ... the head (times only) is not, and a 16-byte MAC closes the envelope.
    assert blob[8 + sealed : -16] == b'{"exp":%d,"iat":%d}' % (claims["exp"], claims["iat"])
    with pytest.raises(Unauthenticated):
        sealer.open("prepared", blob)  # purpose-bound


def test_rotation_newest_seals_any_opens() -> None:
    old = Sealer([("k1", bytes.fromhex(K1))])
    both = Sealer([("k1", bytes.fromhex(K1)), ("k2", bytes.fromhex(K2))])
    new = Sealer([("k2", bytes.fromhex(K2))])
    from_old = old.seal("ticket", {"a": 1}, 60)
    assert both.open("ticket", from_old)["a"] == 1
    from_both = both.seal("ticket", {"a": 2}, 60)
    assert from_both[2:4] == b"k2"
    assert new.open("ticket", from_both)["a"] == 2
    with pytest.raises(UnknownKey, match="'k2'"):
        old.open("ticket", from_both)
    with pytest.raises(UnknownKey, match="'k1'"):
        new.open("ticket", from_old)


def test_legacy_and_newer_envelope_versions_are_refused_clearly() -> None:
    secret = bytes.fromhex(LEGACY_SECRET)
    sealer = Sealer([("default", secret)])
    with pytest.raises(UnsupportedEnvelope, match="version 1") as err:
        sealer.open("ticket", legacy_v1_envelope(secret, "ticket", {"sql": "SELECT 1"}))
    assert isinstance(err.value, InvalidInput)
    with pytest.raises(UnsupportedEnvelope, match="version 2.*no longer reads"):
        sealer.open("ticket", v2_envelope(secret, "default", "ticket", {"sql": "SELECT 1"}))
    newer = bytearray(sealer.seal("ticket", {"sql": "SELECT 1"}, 60))
    newer[0] = 4
    with pytest.raises(UnsupportedEnvelope, match="version 4.*newer"):
        sealer.open("ticket", bytes(newer))


def test_claims_are_canonical_after_opening() -> None:
    """A sealed part or a head that is not exactly its canonical encoding (duplicate keys,
    spacing, key order, floats for times), or the two naming one claim, is refused even though
    it authenticates: only this code seals."""
    sealer = Sealer([("k1", bytes.fromhex(K1))])
    now = int(sealer.now() * 1000)
    good = {"v": 3, "kid": "k1", "pur": "ticket", "sql": "SELECT 1"}
    times = {"exp": now + 60_000, "iat": now}

    def opened(body: bytes, head: bytes) -> dict[str, Any]:
        return sealer.open("ticket", sealer._seal_body("ticket", body, head))

    assert opened(canonical(good), canonical(times))["sql"] == "SELECT 1"
    assert opened(canonical(good), canonical({**times, "id": "q1"}))["id"] == "q1"
    bad_bodies = [
        canonical(good)[:-1] + b',"sql":"SELECT 2"}',  # duplicate key: the last would win
        json.dumps(good).encode(),  # not canonical spacing
        json.dumps(good, separators=(",", ":")).encode(),  # keys not sorted
        canonical({**good, "v": 2}),  # the version inside must match the header
        canonical({**good, "kid": "k2"}),  # and so must the key id
        canonical({**good, "pur": "prepared"}),
        canonical({**good, "iat": now}),  # a time in the sealed part too
        b"[1, 2]",
        b"\xff\xfe",
    ]
    for body in bad_bodies:
        with pytest.raises(Unauthenticated):
            opened(body, canonical(times))
    bad_heads = [
        canonical(times)[:-1] + b',"iat":1}',  # duplicate key
        json.dumps(times).encode(),  # not canonical spacing
        canonical({**times, "exp": now + 60_000.5}),
        canonical({"exp": now + 60_000}),  # no iat
        canonical({**times, "sql": "SELECT 2"}),  # a kept claim again: which one wins?
        canonical({**times, "id": 7}),  # per-envelope claims are strings
        b"[1, 2]",
        b"\xff\xfe",
    ]
    for head in bad_heads:
        with pytest.raises(Unauthenticated):
            opened(canonical(good), head)


def test_a_head_belongs_to_its_envelope_and_purpose() -> None:
    """The head is in the clear, but the MAC binds it: a later expiry written in, or one
    envelope's head on another's sealed part, or an envelope of one purpose opened as another,
    is refused."""
    sealer = Sealer([("k1", bytes.fromhex(K1))])
    mine = sealer.seal("ticket", {"sql": "SELECT 1"}, 60)
    theirs = sealer.seal("ticket", {"sql": "SELECT 2"}, 3600)
    head_at = 8 + int.from_bytes(mine[4:8], "big")
    claims = sealer.open("ticket", mine)
    later = mine.replace(b'"exp":%d' % claims["exp"], b'"exp":%d' % (claims["exp"] + 10**9))
    assert later != mine
    swapped = mine[:head_at] + theirs[8 + int.from_bytes(theirs[4:8], "big") :]
    for forged in (later, swapped):
        with pytest.raises(Unauthenticated, match="invalid ticket"):
            sealer.open("ticket", forged)
    with pytest.raises(Unauthenticated):
        sealer.open("segment", mine)


def test_ids_are_unique_and_a_forked_child_draws_its_own() -> None:
    """Ticket ids come from a counter over a random start: unique in a process, and a forked
    child (a worker of a pre-forking server) does not hand out its parent's next ids."""
    ids = [new_ticket_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids) and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, new_ticket_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parents = {new_ticket_id() for _ in range(10_000)}
    assert len(child) == 16 and child not in parents


def test_oversized_envelopes_are_refused_before_decrypting() -> None:
    sealer = Sealer([("k1", bytes.fromhex(K1))], max_bytes=4096)
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        sealer.seal("ticket", {"sql": "x" * 5000}, 60)
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        sealer.open("ticket", bytes([ENVELOPE_VERSION, 2]) + b"k1" + b"\0" * 5000)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_tampered_envelopes_never_open(data: st.DataObject) -> None:
    sealer = _PROPERTY_SEALER
    blob = bytearray(_PROPERTY_BLOB)
    how = data.draw(st.sampled_from(["flip", "truncate", "append", "splice"]))
    if how == "flip":
        for bit in data.draw(
            st.lists(st.integers(0, len(blob) * 8 - 1), min_size=1, max_size=8, unique=True)
        ):
            blob[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif how == "append":
        blob += data.draw(st.binary(min_size=1, max_size=64))
    else:
        at = data.draw(st.integers(0, len(blob) - 1))
        blob = blob[:at] + data.draw(st.binary(min_size=1, max_size=32)) + blob[at + 1 :]
    if bytes(blob) == _PROPERTY_BLOB:
        return
    with pytest.raises((Unauthenticated, InvalidInput)):
        sealer.open("ticket", bytes(blob))


_PROPERTY_SEALER = Sealer([("k1", bytes.fromhex(K1)), ("k2", bytes.fromhex(K2))])
_PROPERTY_BLOB = _PROPERTY_SEALER.seal("ticket", {"sql": "SELECT * FROM w.ns.t", "snp": []}, 3600)


def canonical(claims: dict[str, Any]) -> bytes:
    return json.dumps(claims, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def v2_envelope(secret: bytes, kid: str, purpose: str, claims: dict[str, Any]) -> bytes:
    """What the release before this one sealed: version byte 2, the key id, and the whole
    claims object (times too) under AES-GCM."""
    key = AESGCM(hmac.new(secret, f"lake-flight/{purpose}/v2".encode(), hashlib.sha256).digest())
    header = bytes([2, len(kid)]) + kid.encode()
    nonce = os.urandom(12)
    now = int(time.time() * 1000)
    body = canonical({**claims, "v": 2, "kid": kid, "pur": purpose, "iat": now, "exp": now + 60_000})
    return header + nonce + key.encrypt(nonce, body, b"lake-flight/" + purpose.encode() + b"\0" + header)


def legacy_v1_envelope(secret: bytes, purpose: str, claims: dict[str, Any]) -> bytes:
    """What the previous release sealed: version byte 1, no key id, float expiry."""
    key = AESGCM(hmac.new(secret, f"lake-flight/{purpose}/v1".encode(), hashlib.sha256).digest())
    nonce = os.urandom(12)
    body = json.dumps({**claims, "exp": 9e12}, separators=(",", ":"), sort_keys=True).encode()
    return bytes([1]) + nonce + key.encrypt(nonce, body, purpose.encode())


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
    assert handle_of(from_mid)[2:4] == b"k2"
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
    assert handle_of(info)[2:9] == b"default"
    assert fetch(migrated, m_opts, info).to_pylist() == [{"n": 1000}]


def test_legacy_and_newer_envelopes_are_refused_through_the_endpoint(servers: dict[str, Any]) -> None:
    client, options = login(uri(servers["legacy"]))
    old = legacy_v1_envelope(
        bytes.fromhex(LEGACY_SECRET),
        "ticket",
        {
            "sub": "alice",
            "knd": "user",
            "prj": "p",
            "rol": "reader",
            "sql": "SELECT 1",
            "ref": [],
            "prm": None,
            "id": "x",
        },
    )
    with pytest.raises(pa.ArrowInvalid, match="envelope version 1") as err:
        client.do_get(ticket_with(old), options).read_all()
    assert "blue/green" in str(err.value) or "plan the query again" in str(err.value)
    # The release before this one sealed whole claims under AES-GCM (version 2).
    claims = {"sub": "alice", "knd": "user", "prj": "p", "rol": "reader", "sql": "SELECT 1"}
    v2 = v2_envelope(
        bytes.fromhex(LEGACY_SECRET), "default", "ticket", {**claims, "prm": None, "snp": [], "id": "x"}
    )
    with pytest.raises(pa.ArrowInvalid, match="envelope version 2.*plan the query again"):
        client.do_get(ticket_with(v2), options).read_all()
    newer = bytearray(handle_of(plan(client, options, "SELECT 1 AS one")))
    newer[0] = ENVELOPE_VERSION + 1
    with pytest.raises(pa.ArrowInvalid, match=f"envelope version {ENVELOPE_VERSION + 1}"):
        client.do_get(ticket_with(bytes(newer)), options).read_all()


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
    huge = bytes([ENVELOPE_VERSION, 2]) + b"k1" + os.urandom(3 << 20)
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
    assert handle[0] == ENVELOPE_VERSION and handle[2:4] == b"k1"
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


def test_settings_parse_keys() -> None:
    fs = flight_settings(keys=f" k1:{K1} , k2:{K2} ")
    assert [kid for kid, _ in fs.sealing_keys()] == ["k1", "k2"]
    assert flight_settings(secret_key=LEGACY_SECRET).sealing_keys() == [
        ("default", bytes.fromhex(LEGACY_SECRET))
    ]
    both = flight_settings(secret_key=LEGACY_SECRET, keys=f"k2:{K2}").sealing_keys()
    assert [kid for kid, _ in both] == ["default", "k2"]  # the single secret is the oldest key
    assert flight_settings().sealing_keys() == []
    from lake_platform.errors import SettingsError

    for bad in ["k1", f"k1:{K1[:40]}", f"k1:{K1},k1:{K2}", f"bad id:{K1}", f"k1:{'zz' * 32}", f":{K1}"]:
        with pytest.raises(SettingsError, match="LAKE_FLIGHT_KEYS"):
            flight_settings(keys=bad)


def test_expired_helper_kind() -> None:
    sealer = Sealer([("k1", bytes.fromhex(K1))])
    with pytest.raises(Expired):
        sealer.open("ticket", sealer.seal("ticket", {}, -1))


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

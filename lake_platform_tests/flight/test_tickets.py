"""The sealed tokens (JWE, ``dir`` + ``A256GCM``): key-rotated, purpose-bound, strictly decoded
and bounded claims.

Attacks on tickets (and prepared handles, sealed the same way) are refused with a clean status
and never crash the server: tampered bytes (a hypothesis property flipping bits, truncating,
appending), another principal's ticket, an expired one, an oversized one, an unknown key id,
an earlier release's envelope, claims beyond this server's limits.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
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
from joserfc import jwe
from joserfc.jwk import OctKey

from lake_platform.auth.tokens import (
    REMEMBERED_MAX_BYTES,
    Expired,
    Identity,
    Sealer,
    UnknownKey,
    UnsupportedEnvelope,
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


def content_key(secret: str, purpose: str) -> OctKey:
    """The JWE key a ring key gives one purpose, worked out here as the module's docstring says."""
    derived = hmac.new(bytes.fromhex(secret), f"lake-flight/{purpose}/jwe".encode(), hashlib.sha256)
    return OctKey.import_key(derived.digest())


def header_of(blob: bytes) -> dict[str, Any]:
    segment = blob.split(b".")[0]
    return json.loads(base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4)))


def jwe_of(secret: str, purpose: str, body: bytes, **header: str) -> bytes:
    """A JWE a stock library seals with the right key, with the header ``header`` changes."""
    protected = {"alg": "dir", "enc": "A256GCM", "kid": "k1", **header}
    return jwe.encrypt_compact(
        protected, body, content_key(secret, purpose), algorithms=["dir", "A256GCM"]
    ).encode()


def test_a_token_is_a_standard_jwe() -> None:
    """Any JWE library with the key opens a ticket; the claims are encrypted; the header names
    the key; a token of one purpose does not open as another."""
    sealer = Sealer([("k1", bytes.fromhex(K1))])
    blob = sealer.seal("ticket", {"sql": "SELECT 1"}, 60)
    assert header_of(blob) == {"alg": "dir", "enc": "A256GCM", "kid": "k1"}
    assert blob.split(b".")[1] == b""  # no wrapped key: the content key is the ring key's
    opened = jwe.decrypt_compact(blob, content_key(K1, "ticket"), algorithms=["dir", "A256GCM"])
    claims = sealer.open("ticket", blob)
    assert json.loads(opened.plaintext) == claims
    assert claims["sql"] == "SELECT 1" and claims["exp"] - claims["iat"] == 60_000  # milliseconds
    assert b"SELECT" not in blob and b"sql" not in base64.urlsafe_b64decode(blob.split(b".")[3] + b"==")
    for other in ("prepared", "bearer", "segment"):
        with pytest.raises(Unauthenticated):
            sealer.open(other, blob)


def test_rotation_newest_seals_any_opens() -> None:
    old = Sealer([("k1", bytes.fromhex(K1))])
    both = Sealer([("k1", bytes.fromhex(K1)), ("k2", bytes.fromhex(K2))])
    new = Sealer([("k2", bytes.fromhex(K2))])
    from_old = old.seal("ticket", {"a": 1}, 60)
    assert both.open("ticket", from_old)["a"] == 1
    from_both = both.seal("ticket", {"a": 2}, 60)
    assert header_of(from_both)["kid"] == "k2"
    assert new.open("ticket", from_both)["a"] == 2
    with pytest.raises(UnknownKey, match="'k2'"):
        old.open("ticket", from_both)
    with pytest.raises(UnknownKey, match="'k1'"):
        new.open("ticket", from_old)


def test_earlier_envelopes_are_refused_clearly() -> None:
    """The home-made envelopes of earlier releases start with their version byte (1, 2, 3);
    their bearer tokens with ``lkb1.``."""
    sealer = Sealer([("k1", bytes.fromhex(K1))])
    for version in (1, 2, 3):
        envelope = bytes([version, 2]) + b"k1" + os.urandom(120)
        with pytest.raises(UnsupportedEnvelope, match=f"version {version}.*no longer reads") as err:
            sealer.open("ticket", envelope)
        assert isinstance(err.value, InvalidInput) and "plan the query again" in str(err.value)
    old_bearer = "lkb1." + base64.urlsafe_b64encode(bytes([3, 2]) + b"k1" + os.urandom(120)).decode()
    with pytest.raises(Unauthenticated, match="another version; authenticate again"):
        sealer.open_bearer(old_bearer)


def test_decoding_is_strict() -> None:
    """A token sealed with the right key but not as this server seals it (another header, an
    algorithm or compression it does not use, a wrapped key, claims that are no object or
    lack integer times) is refused; so is a second base64 spelling of a real token."""
    sealer = Sealer([("k1", bytes.fromhex(K1)), ("k2", bytes.fromhex(K2))])
    now = sealer.now_ms()
    good = json.dumps({"sql": "SELECT 1", "iat": now, "exp": now + 60_000}).encode()
    assert sealer.open("ticket", jwe_of(K1, "ticket", good))["sql"] == "SELECT 1"  # the control
    forged = [
        jwe_of(K1, "ticket", good, typ="JWT"),  # a header field it never writes
        jwe_of(K1, "ticket", good, cty="json"),
        jwe_of(K1, "ticket", good, kid="k2"),  # the key of another id
        b"[1, 2]",
        b"not json",
        json.dumps({"sql": "SELECT 1", "iat": now}).encode(),  # no exp
        json.dumps({"iat": now, "exp": now + 60_000.5}).encode(),  # not an integer
        json.dumps({"iat": True, "exp": now + 60_000}).encode(),
        json.dumps({"iat": str(now), "exp": now + 60_000}).encode(),
    ]
    for token in forged:
        blob = token if token.startswith(b"eyJ") else jwe_of(K1, "ticket", token)
        with pytest.raises(Unauthenticated):
            sealer.open("ticket", blob)
    zipped = jwe.encrypt_compact(
        {"alg": "dir", "enc": "A256GCM", "zip": "DEF", "kid": "k1"}, good, content_key(K1, "ticket")
    ).encode()
    a128 = jwe.encrypt_compact(
        {"alg": "dir", "enc": "A128GCM", "kid": "k1"}, good, OctKey.import_key(os.urandom(16))
    ).encode()
    wrapped = jwe.encrypt_compact(
        {"alg": "A256KW", "enc": "A256GCM", "kid": "k1"}, good, content_key(K1, "ticket")
    ).encode()
    real = sealer.seal("ticket", {"sql": "SELECT 1"}, 60)
    tag = real.rsplit(b".", 1)[1]  # 16 bytes in 22 characters: the last one's low bits are unused
    respelled = real[:-1] + bytes([tag[-1] + 1])
    assert base64.urlsafe_b64decode(tag + b"==") == base64.urlsafe_b64decode(
        respelled.rsplit(b".", 1)[1] + b"=="
    )
    for blob in (zipped, a128, wrapped, respelled, real + b".", real.replace(b".", b"..", 1)):
        with pytest.raises(Unauthenticated, match="invalid ticket"):
            sealer.open("ticket", blob)


def test_oversized_tokens_are_refused_before_decrypting() -> None:
    sealer = Sealer([("k1", bytes.fromhex(K1))], max_bytes=4096)
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        sealer.seal("ticket", {"sql": "x" * 5000}, 60)
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        sealer.open("ticket", sealer.seal("ticket", {"sql": "x"}, 60) + b"A" * 5000)
    # Above joserfc's own 64 KiB bound, within ours: bound parameters may be that large.
    roomy = Sealer([("k1", bytes.fromhex(K1))])
    assert roomy.open("ticket", roomy.seal("ticket", {"prm": "x" * 200_000}, 60))["prm"] == "x" * 200_000


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def test_a_remembered_token_opens_as_any_replica_opens_it() -> None:
    """A sealer remembers what it sealed or opened, by purpose and exact bytes: such a token
    skips the decryption (a hit), opens to what another replica decrypts, still expires on
    time, and opens for its own purpose only; an altered byte or a token above the size bound
    is opened in full."""
    clock = Clock()
    keys = [("k1", bytes.fromhex(K1))]
    here, elsewhere = Sealer(keys, clock=clock), Sealer(keys, clock=clock)
    blob = here.seal("ticket", {"sql": "SELECT 1", "snp": [{"n": "p.w.ns.t", "v": 3}], "prt": None}, 60)
    hits = here._remembered.hits
    remembered = here.open("ticket", blob)
    assert here._remembered.hits == hits + 1 and remembered == elsewhere.open("ticket", blob)
    remembered["sql"] = "SELECT 2"  # a caller's copy, not the memory
    assert here.open("ticket", blob)["sql"] == elsewhere.open("ticket", blob)["sql"] == "SELECT 1"
    assert elsewhere.open("ticket", blob) == here.open("ticket", blob)  # remembered there too now
    for other in ("prepared", "bearer"):
        with pytest.raises(Unauthenticated):
            here.open(other, blob)
    altered = blob[:-3] + (b"A" if blob[-3:-2] != b"A" else b"B") + blob[-2:]
    with pytest.raises(Unauthenticated, match="invalid ticket"):
        here.open("ticket", altered)
    big = here.seal("ticket", {"sql": "x" * REMEMBERED_MAX_BYTES}, 60)
    assert here._remembered.peek(("ticket", big)) is None and here.open("ticket", big)["sql"] == "x" * 4096
    clock.t += 60.001
    for sealer in (here, elsewhere):
        with pytest.raises(Expired):
            sealer.open("ticket", blob)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_tampered_tokens_never_open(data: st.DataObject) -> None:
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

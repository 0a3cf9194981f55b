"""The sealed tokens on their own (``auth.tokens.Sealer``): standard JWE (``dir`` + ``A256GCM``)
a stock library opens, key-rotated (the newest key seals, any opens), purpose-bound, strictly
decoded, bounded in size, remembered by exact bytes as any replica would open them, expiring on
time; tampered bytes (a hypothesis property flipping bits, truncating, appending) never open, and
an earlier release's envelope is refused clearly. The same tokens through the endpoint:
flight/test_tickets.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from joserfc import jwe
from joserfc.jwk import OctKey

from lake_platform.auth.tokens import (
    REMEMBERED_MAX_BYTES,
    Expired,
    Sealer,
    UnknownKey,
    UnsupportedEnvelope,
)
from lake_platform.errors import InvalidInput, Unauthenticated
from lake_platform.settings.flight import flight_settings

K1, K2 = (secrets.token_hex(32) for _ in range(2))
LEGACY_SECRET = secrets.token_hex(32)


def content_key(secret: str, purpose: str) -> OctKey:
    """The JWE key a ring key gives one purpose, worked out here as auth/tokens.py's docstring says."""
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
    hits = here.hits
    remembered = here.open("ticket", blob)
    assert here.hits == hits + 1 and remembered == elsewhere.open("ticket", blob)
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
    hits = here.hits
    for _ in range(2):  # sealed here and opened: never remembered, decrypted each time
        assert here.open("ticket", big)["sql"] == "x" * 4096
    assert here.hits == hits
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

"""AuthService's Bearer checks: every call opens its token (the sealer's memory of the exact
bytes skips only the decryption), so a token expires on time, an altered one is refused, and an
earlier release's token is refused with a message saying so. (Revocation through the catalog
snapshot: test_revocation.py.)"""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest

from lake_platform.auth.service import AuthService, Throttle, authenticate_call
from lake_platform.auth.tokens import Expired, Identity, Sealer
from lake_platform.errors import Unauthenticated
from lake_platform_tests.doubles import StaticAuthenticator

ALICE = Identity("alice", "user", "p", "reader")
BOB = Identity("bob", "user", "q", "writer")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _service(sealer: Sealer) -> AuthService:
    return AuthService(
        StaticAuthenticator(users={}),
        sealer,
        token_ttl=60,
        service_token_cache=60,
        throttle=Throttle(5, 60),
    )


def _headers(token: str) -> Any:
    return (("user-agent", "test"), ("authorization", f"Bearer {token}"))


def test_a_token_expires_on_time() -> None:
    clock = Clock()
    sealer = Sealer([("k1", b"k" * 32)], clock=clock)
    service = _service(sealer)
    token = sealer.bearer(ALICE, ttl=10)
    assert authenticate_call(service, _headers(token), handshake=False)[0] == ALICE
    clock.now += 9.9
    assert service.verify_bearer(token) == ALICE
    clock.now += 0.2
    with pytest.raises(Expired):
        service.verify_bearer(token)
    with pytest.raises(Unauthenticated, match="expired"):  # what the client is told
        authenticate_call(service, _headers(token), handshake=False)


def test_an_altered_token_is_refused() -> None:
    sealer = Sealer([("k1", b"k" * 32)])
    service = _service(sealer)
    token = sealer.bearer(ALICE, ttl=60)
    assert service.verify_bearer(token) == ALICE
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    for bad in (flipped, token + "A", token[:-1], token.replace(".", "..", 1)):
        with pytest.raises(Unauthenticated):
            authenticate_call(service, _headers(bad), handshake=False)
    assert service.verify_bearer(token) == ALICE


def test_each_token_answers_its_own_identity() -> None:
    sealer = Sealer([("k1", b"k" * 32)])
    service = _service(sealer)
    alice, bob = sealer.bearer(ALICE, ttl=60), sealer.bearer(BOB, ttl=60)
    for _ in range(2):
        assert service.verify_bearer(alice) == ALICE
        assert service.verify_bearer(bob) == BOB


def test_another_servers_token_is_refused_although_it_looks_alike() -> None:
    ours, theirs = Sealer([("k1", b"k" * 32)]), Sealer([("k1", b"x" * 32)])
    service = _service(ours)
    assert service.verify_bearer(ours.bearer(ALICE, ttl=60)) == ALICE
    with pytest.raises(Unauthenticated):
        service.verify_bearer(theirs.bearer(ALICE, ttl=60))


def test_an_earlier_releases_token_is_refused_with_a_reason() -> None:
    """Envelope version 3's bearer tokens (``lkb1.`` and a version byte): authenticate again."""
    service = _service(Sealer([("k1", b"k" * 32)]))
    old = "lkb1." + base64.urlsafe_b64encode(bytes([3, 2]) + b"k1" + os.urandom(150)).decode().rstrip("=")
    with pytest.raises(Unauthenticated, match="issued by a server of another version; authenticate again"):
        authenticate_call(service, _headers(old), handshake=False)


def test_a_login_token_carries_the_user_record_it_was_issued_under() -> None:
    """``uid``: the user record's id, opened back from the Bearer; absent for a principal
    without one (service tokens, users recorded before records had an id)."""
    sealer = Sealer([("k1", b"k" * 32)])
    service = _service(sealer)
    dana = Identity("dana", "user", "p", "reader", user_id="3f2a")
    assert service.verify_bearer(sealer.bearer(dana, ttl=60)).user_id == "3f2a"
    assert service.verify_bearer(sealer.bearer(ALICE, ttl=60)).user_id == ""
    assert sealer.open("bearer", sealer.bearer(ALICE, ttl=60).removeprefix("lkb2.").encode()).keys() == {
        "sub",
        "knd",
        "prj",
        "rol",
        "iat",
        "exp",
    }

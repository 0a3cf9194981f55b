"""AuthService's memory of opened Bearer tokens: a client's later calls skip the decryption, but
a remembered token still expires on time, an altered one is still refused, and the memory is
bounded. (Revocation through the catalog snapshot with the same memory: test_revocation.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform.auth import service as auth_module
from lake_platform.auth.service import AuthService, StaticAuthenticator, Throttle, authenticate_call
from lake_platform.auth.tokens import Expired, Identity, Sealer
from lake_platform.errors import Unauthenticated

ALICE = Identity("alice", "user", "p", "reader")
BOB = Identity("bob", "user", "q", "writer")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class CountingSealer(Sealer):
    """A real sealer that counts how many tokens it had to open."""

    def __init__(self, clock: Clock) -> None:
        super().__init__([("k1", b"k" * 32)], clock=clock)
        self.opened = 0

    def open_bearer_times(self, token: str) -> tuple[Identity, float, int]:
        self.opened += 1
        return super().open_bearer_times(token)


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


def test_a_token_is_opened_once_then_remembered() -> None:
    clock = Clock()
    sealer = CountingSealer(clock)
    service = _service(sealer)
    token = sealer.bearer(ALICE, ttl=60)
    for _ in range(5):
        assert authenticate_call(service, _headers(token), handshake=False)[0] == ALICE
    assert sealer.opened == 1


def test_a_remembered_token_still_expires_on_time() -> None:
    clock = Clock()
    sealer = CountingSealer(clock)
    service = _service(sealer)
    token = sealer.bearer(ALICE, ttl=10)
    assert service.verify_bearer(token) == ALICE
    clock.now += 9.9
    assert service.verify_bearer(token) == ALICE
    clock.now += 0.2
    with pytest.raises(Expired):
        service.verify_bearer(token)
    with pytest.raises(Unauthenticated, match="expired"):  # what the client is told
        authenticate_call(service, _headers(token), handshake=False)
    assert sealer.opened == 1  # expiry came from the remembered entry, not a second opening


def test_an_altered_token_is_refused_even_after_the_original_was_remembered() -> None:
    clock = Clock()
    sealer = CountingSealer(clock)
    service = _service(sealer)
    token = sealer.bearer(ALICE, ttl=60)
    assert service.verify_bearer(token) == ALICE
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    for bad in (flipped, token + "A", token[:-1]):
        with pytest.raises(Unauthenticated):
            authenticate_call(service, _headers(bad), handshake=False)
    assert service.verify_bearer(token) == ALICE


def test_each_token_answers_its_own_identity() -> None:
    clock = Clock()
    sealer = CountingSealer(clock)
    service = _service(sealer)
    alice, bob = sealer.bearer(ALICE, ttl=60), sealer.bearer(BOB, ttl=60)
    for _ in range(3):
        assert service.verify_bearer(alice) == ALICE
        assert service.verify_bearer(bob) == BOB
    assert sealer.opened == 2


def test_another_servers_token_is_refused_although_it_looks_alike() -> None:
    clock = Clock()
    ours, theirs = CountingSealer(clock), Sealer([("k1", b"x" * 32)], clock=clock)
    service = _service(ours)
    assert service.verify_bearer(ours.bearer(ALICE, ttl=60)) == ALICE
    with pytest.raises(Unauthenticated):
        service.verify_bearer(theirs.bearer(ALICE, ttl=60))


def test_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_module, "BEARER_CACHE_SIZE", 4)
    clock = Clock()
    sealer = CountingSealer(clock)
    service = _service(sealer)
    tokens = [sealer.bearer(ALICE, ttl=60) for _ in range(10)]
    for token in tokens:
        service.verify_bearer(token)
    assert len(service._bearers) == 4  # noqa: SLF001 - the bound is what is tested
    assert sealer.opened == 10
    service.verify_bearer(tokens[-1])  # the newest is still remembered
    assert sealer.opened == 10
    service.verify_bearer(tokens[0])  # the oldest was evicted: opened (and accepted) again
    assert sealer.opened == 11

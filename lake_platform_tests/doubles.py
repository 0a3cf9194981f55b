"""Test doubles of the package's injectable parts: a clock moved by hand, principals held in
memory. They live with the tests: nothing in production constructs them."""

from __future__ import annotations

import hashlib
import hmac
import time

from lake_platform.auth.tokens import Identity
from lake_platform.errors import Unauthenticated


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, start_monotonic: float = 1000.0, start_wall_ms: int | None = None) -> None:
        self._mono = start_monotonic
        self._wall = start_wall_ms if start_wall_ms is not None else int(time.time() * 1000)

    def monotonic(self) -> float:
        return self._mono

    def wall_ms(self) -> int:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall += int(seconds * 1000)


class StaticAuthenticator:
    """Users and service tokens held in memory (tests, demos). Constant-time comparisons."""

    def __init__(
        self, users: dict[str, tuple[str, Identity]] | None = None, tokens: dict[str, Identity] | None = None
    ) -> None:
        self._users = {
            name: (hashlib.sha256(pw.encode()).digest(), ident) for name, (pw, ident) in (users or {}).items()
        }
        self._tokens = {hashlib.sha256(t.encode()).digest(): ident for t, ident in (tokens or {}).items()}
        self.calls = 0

    def authenticate_password(self, username: str, password: str) -> Identity:
        self.calls += 1
        digest = hashlib.sha256(password.encode()).digest()
        stored, identity = self._users.get(username, (b"\0" * 32, None))
        if not hmac.compare_digest(stored, digest) or identity is None:
            raise Unauthenticated("invalid credentials")
        return identity

    def authenticate_token(self, token: str) -> Identity:
        self.calls += 1
        identity = self._tokens.get(hashlib.sha256(token.encode()).digest())
        if identity is None:
            raise Unauthenticated("invalid credentials")
        return identity

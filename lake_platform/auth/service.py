"""Authentication: Basic in Handshake -> sealed Bearer token; every later call carries a Bearer.

The transport calls :func:`authenticate_call` with the headers of every call:

- Handshake with ``authorization: Basic`` checks the password (through the catalog's
  principals) and answers with ``authorization: Bearer <sealed token>``;
- Handshake with a Bearer (JDBC's ``token=``) validates it and echoes it back;
- every other call needs a Bearer: one of our sealed tokens (no I/O: opened, its expiry
  checked, on every call), or a service token, checked against the registry and then trusted
  for a short while;
- with the catalog's own principals, every call also checks the caller against the process's
  catalog snapshot (no I/O): a removed user, changed role or revoked token is refused once a
  snapshot refresh that began after the change is in place (``SNAPSHOT_TTL_SECONDS``).

Failures answer UNAUTHENTICATED with the same message whatever failed, and repeated failures
for one user name lock it out for a while (checked before any password work).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from lake_platform.auth.tokens import BEARER_PREFIX, LEGACY_BEARER_PREFIX, Expired, Identity, Sealer
from lake_platform.catalog.principals import split_token
from lake_platform.errors import LakeError, ServiceUnavailable, Throttling, Unauthenticated
from lake_platform.query.snapshot import CatalogSnapshot

log = logging.getLogger(__name__)


class PrincipalLike(Protocol):
    name: str
    kind: str
    project: str
    role: str
    # A user's ``user_id`` is read too, with a default ("" for principals without one).


class Authenticator(Protocol):
    """What the server needs from the catalog's principals (``Catalog.access`` implements it)."""

    def authenticate_password(self, username: str, password: str) -> PrincipalLike: ...

    def authenticate_token(self, token: str) -> PrincipalLike: ...


class Throttle:
    """Lock a user name out after ``max_failures`` failed logins, for ``lockout`` seconds."""

    def __init__(
        self, max_failures: int, lockout: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_failures = max_failures
        self.lockout = lockout
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def check(self, key: str) -> None:
        with self._lock:
            count, since = self._failures.get(key, (0, 0.0))
            if count >= self.max_failures:
                wait = since + self.lockout - self._clock()
                if wait > 0:
                    raise Unauthenticated(f"too many failed attempts; try again in {int(wait) + 1}s")
                del self._failures[key]

    def failed(self, key: str) -> None:
        with self._lock:
            count, _ = self._failures.get(key, (0, 0.0))
            self._failures[key] = (count + 1, self._clock())
            if len(self._failures) > 100_000:  # bound memory under a spray of names
                self._failures.clear()

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


class AuthService:
    def __init__(
        self,
        authenticator: Authenticator,
        sealer: Sealer,
        *,
        token_ttl: float,
        service_token_cache: float,
        throttle: Throttle,
        clock: Callable[[], float] = time.monotonic,
        snapshot: Callable[[], CatalogSnapshot] | None = None,
    ) -> None:
        """``snapshot``: the process's catalog snapshot, when ``authenticator`` reads the same
        registry; every call is then checked against its principals (see :meth:`_still_valid`)."""
        self.snapshot = snapshot
        self.authenticator = authenticator
        self.sealer = sealer
        self.token_ttl = token_ttl
        self.service_token_cache = service_token_cache
        self.throttle = throttle
        self._clock = clock
        self._service: dict[bytes, tuple[Identity, float, float]] = {}
        self._lock = threading.Lock()

    def login(self, username: str, password: str) -> tuple[Identity, str]:
        key = f"user:{username}"
        self.throttle.check(key)
        try:
            principal = self.authenticator.authenticate_password(username, password)
        except Unauthenticated:
            self.throttle.failed(key)
            raise Unauthenticated("invalid credentials") from None
        except Throttling as exc:
            raise Unauthenticated(exc.message) from None
        identity = flight_identity(principal)
        self.throttle.succeeded(key)
        return identity, self.sealer.bearer(identity, self.token_ttl)

    def verify_bearer(self, token: str) -> Identity:
        if token.startswith((BEARER_PREFIX, LEGACY_BEARER_PREFIX)):
            identity, issued_wall = self.sealer.open_bearer_issued(token)
            snap = self._newer_snapshot(lambda s: s.started_at_wall > issued_wall)
            if snap is not None and identity.kind == "user":
                assert snap.principals is not None
                # The user record's id too: a user removed and added again under the same
                # name, project and role is another user to a token issued before.
                live = snap.principals.users.get(identity.name)
                self._still_valid(live == (identity.project, identity.role, identity.user_id))
            return identity
        return self._service_token(token)

    def _newer_snapshot(self, began_after: Callable[[CatalogSnapshot], bool]) -> CatalogSnapshot | None:
        """The snapshot, if its load began after the credential was verified against the
        registry (an older one may not know a principal added since: no verdict)."""
        if self.snapshot is None:
            return None
        snap = self.snapshot()  # no I/O; ServiceUnavailable past the staleness bound
        if snap.principals is None or not began_after(snap):
            return None
        return snap

    @staticmethod
    def _still_valid(ok: bool) -> None:
        # The bound on revocation: a removed user, a changed role or a revoked token is refused
        # once a snapshot load that began after the change is in place (LAKE_FLIGHT_SNAPSHOT_TTL_SECONDS).
        if not ok:
            raise Unauthenticated("this user or token no longer exists or was revoked; authenticate again")

    def _service_token(self, token: str) -> Identity:
        digest = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        with self._lock:
            hit = self._service.get(digest)
        if hit is not None and hit[1] > now:
            identity, _, verified = hit
            snap = self._newer_snapshot(lambda s: s.started_at > verified)
            if snap is not None:
                assert snap.principals is not None
                live = snap.principals.tokens.get(_token_id(token))
                if live != (identity.name, identity.project, identity.role):
                    with self._lock:
                        self._service.pop(digest, None)
                    self._still_valid(False)
            return identity
        key = "token"
        verified = time.monotonic()  # before the registry read: a snapshot begun later saw it too
        self.throttle.check(key + ":" + digest.hex()[:16])
        try:
            principal = self.authenticator.authenticate_token(token)
        except Unauthenticated:
            self.throttle.failed(key + ":" + digest.hex()[:16])
            raise Unauthenticated("invalid credentials") from None
        identity = flight_identity(principal)
        with self._lock:
            if len(self._service) > 10_000:
                self._service.clear()
            # verified: time.monotonic(), the clock the snapshot's start is measured with.
            self._service[digest] = (identity, now + self.service_token_cache, verified)
        return identity


def _token_id(token: str) -> str | None:
    try:
        return split_token(token)[0]
    except Unauthenticated:
        return None


def flight_identity(principal: PrincipalLike) -> Identity:
    identity = Identity.of(principal)
    if not identity.project or identity.project == "*":
        # A principal without one project (the local admin) has no tenant to serve over Flight.
        raise Unauthenticated("this principal cannot use the Flight SQL endpoint")
    return identity


def authenticate_call(
    service: AuthService, headers: Iterable[tuple[str, str | bytes]], *, handshake: bool
) -> tuple[Identity, str | None]:
    """Who is calling, and the Bearer to answer with (Handshake only).

    Any failure is UNAUTHENTICATED with a message that does not say which part was wrong; a
    registry outage while checking a service token stays UNAVAILABLE (the caller may retry).
    """
    try:
        return _authenticate(service, headers, handshake)
    except LakeError as exc:
        if isinstance(exc, Throttling):
            raise Unauthenticated(exc.message) from None
        if isinstance(exc, (Unauthenticated, ServiceUnavailable)):
            raise
        raise Unauthenticated("invalid credentials") from None
    except Exception:
        log.exception("authentication failed unexpectedly")
        raise Unauthenticated("invalid credentials") from None


def _authenticate(
    service: AuthService, headers: Iterable[tuple[str, str | bytes]], handshake: bool
) -> tuple[Identity, str | None]:
    value = _header(headers, "authorization")
    scheme, _, credential = (value or "").partition(" ")
    scheme = scheme.lower()
    credential = credential.strip()
    if handshake:
        if scheme == "basic":
            username, password = _basic(credential)
            identity, token = service.login(username, password)
            log.info("login: %s (%s, project %s)", identity.name, identity.kind, identity.project)
            return identity, token
        if scheme == "bearer":
            return _bearer(service, credential), credential
        raise Unauthenticated("Handshake needs 'authorization: Basic' (user and password) or a Bearer token")
    if scheme != "bearer" or not credential:
        raise Unauthenticated("authenticate first: Handshake with user and password, or send a Bearer token")
    return _bearer(service, credential), None


def _bearer(service: AuthService, credential: str) -> Identity:
    try:
        return service.verify_bearer(credential)
    except Expired:
        raise Unauthenticated("the token has expired; authenticate again") from None


def _header(headers: Iterable[tuple[str, str | bytes]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


def _basic(credential: str) -> tuple[str, str]:
    try:
        # Go clients (ADBC) send unpadded base64.
        padded = credential + "=" * (-len(credential) % 4)
        raw = base64.b64decode(padded.encode("ascii"), validate=True).decode("utf-8")
    except Exception:  # noqa: BLE001
        raise Unauthenticated("malformed Basic credentials") from None
    username, sep, password = raw.partition(":")
    if not sep or not username or len(username) > 256 or len(password) > 1024:
        raise Unauthenticated("malformed Basic credentials")
    return username, password

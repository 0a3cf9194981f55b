"""Sealed tokens: bearer tokens, statement tickets, prepared-statement handles, segment tickets.

Each is a JWE in compact serialization (RFC 7516), sealed and opened by ``joserfc``:
``BASE64URL({"alg":"dir","enc":"A256GCM","kid":...}) . (no wrapped key) . iv . ciphertext . tag``,
the claims (JSON, plus ``iat`` and ``exp`` in integer milliseconds) encrypted. The header is
authenticated and names the ring key that sealed the token: the newest key seals, every key
opens, and a key id this server lacks is refused as such ("unknown key id"). Each ring key gives
one content key per purpose (HMAC-SHA256), so a ticket never opens as a handle or bearer token.

Opening is strict: above ``max_bytes`` refused before any cryptography; the header exactly one
this server writes, every segment canonical base64url, the claims an object with integer
times; every failure a typed error (``Unauthenticated``, :class:`Expired`, :class:`UnknownKey`,
:class:`UnsupportedEnvelope`, ``InvalidInput`` for size), never a library's. The home-made
envelopes of earlier releases (versions 1 to 3, a version byte first; bearers ``lkb1.``) are
refused with a message saying so.

A sealer remembers the tokens it sealed or opened, by purpose and exact bytes, with their claims
(:data:`REMEMBERED`): such a token skips only the decryption; its expiry is checked on every
use, and any other bytes (one altered byte) are opened in full.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from joserfc import jwe
from joserfc.jwk import OctKey

from lake_platform.errors import InvalidInput, PermissionDenied, Unauthenticated
from lake_platform.lru import BoundedLRU
from lake_platform.settings.flight import KEY_ID

BEARER_PREFIX = "lkb2."
#: The bearer tokens of earlier releases (envelope versions 1 to 3).
LEGACY_BEARER_PREFIX = "lkb1."
#: The first byte of the earlier releases' envelopes: their version.
LEGACY_VERSIONS = frozenset({1, 2, 3})
PURPOSES = ("bearer", "ticket", "prepared", "segment", "session")
#: Claims every token carries, set by the sealer.
ENVELOPE_CLAIMS = frozenset({"iat", "exp"})
#: The claim naming a login's user record id (``Identity.user_id``), when there is one.
UID = "uid"
DEFAULT_MAX_BYTES = 2 << 20
#: Tokens sealed or opened here, remembered by purpose and exact bytes with their claims (least
#: recently used out first; a token above REMEMBERED_MAX_BYTES is opened every time).
REMEMBERED = 4096
REMEMBERED_MAX_BYTES = 4096
_ALGORITHMS = ("dir", "A256GCM")
_MAX_KID = 32
ROLLOUT_HINT = "servers sealing different token formats must not share a load balancer: deploy blue/green"


class Expired(Unauthenticated):
    """The token was valid but its lifetime is over."""


class UnknownKey(Unauthenticated):
    """The token names a key id this server does not have (retired, or another deployment's)."""


class UnsupportedEnvelope(InvalidInput):
    """The token is one of an earlier release's envelopes, which this server no longer reads."""


@dataclass(frozen=True)
class Identity:
    """Who a token speaks for: the principal's name, kind, project and role; for a login, also
    the id of the user record it signed in under (``uid``: "" for service tokens and for users
    recorded before records had one)."""

    name: str
    kind: str
    project: str
    role: str
    #: A Bearer carries it (checked against the user record on every call), and so do the
    #: tickets, handles and session cookies sealed for it (``check_owner``): a user removed and
    #: added again under the same name is another owner, so equality compares it too.
    user_id: str = ""

    def claims(self) -> dict[str, str]:
        """The identity's claims: ``uid`` only when there is a user record id (absent rather
        than "", so a service principal's claims stay as they were)."""
        claims = {"sub": self.name, "knd": self.kind, "prj": self.project, "rol": self.role}
        if self.user_id:
            claims[UID] = self.user_id
        return claims

    @classmethod
    def from_claims(cls, claims: dict[str, Any]) -> Identity:
        values = [claims.get(k) for k in ("sub", "knd", "prj", "rol")]
        user_id = claims.get(UID, "")
        if not all(isinstance(v, str) and v for v in values) or not isinstance(user_id, str):
            raise KeyError("identity")
        return cls(*values, user_id=user_id)  # type: ignore[arg-type]

    @classmethod
    def of(cls, principal: Any) -> Identity:
        return cls(
            str(principal.name),
            str(principal.kind),
            str(principal.project),
            str(principal.role),
            str(getattr(principal, "user_id", "") or ""),
        )


class Sealer:
    """Seals and opens tokens under a key ring (oldest first; the last key seals).

    ``keys=None``: one random key for this process (tokens die with it)."""

    def __init__(
        self,
        keys: Sequence[tuple[str, bytes]] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.ephemeral = not keys
        if not keys:
            keys = [(f"eph-{secrets.token_hex(4)}", secrets.token_bytes(32))]
        self._keys: dict[str, dict[str, OctKey]] = {}
        #: The header segment each key's tokens carry, to its key id.
        self._headers: dict[str, str] = {}
        for kid, key in keys:
            if not KEY_ID.fullmatch(kid) or len(kid) > _MAX_KID:
                raise ValueError(f"invalid key id {kid!r}")
            if len(key) < 32:
                raise ValueError(f"the key {kid!r} must be at least 32 bytes")
            if kid in self._keys:
                raise ValueError(f"key id {kid!r} appears twice")
            self._keys[kid] = {p: OctKey.import_key(_subkey(key, p)) for p in PURPOSES}
        self._registry = jwe.JWERegistry(algorithms=_ALGORITHMS)
        # joserfc's own bound (64 KiB) would refuse tokens ours allows (bound parameters).
        self._registry.max_ciphertext_length = max_bytes
        for kid, subkeys in self._keys.items():  # the header as joserfc writes it
            sample = jwe.encrypt_compact(_header(kid), b"", subkeys["ticket"], registry=self._registry)
            self._headers[sample.split(".")[0]] = kid
        self.sealing_kid = keys[-1][0]
        self.key_ids = tuple(self._keys)
        self.max_bytes = max_bytes
        self._clock = clock
        self._remembered: BoundedLRU[tuple[str, bytes], dict[str, Any]] = BoundedLRU(REMEMBERED)

    @property
    def hits(self) -> int:
        """How many opens this sealer answered from what it remembered, without decrypting."""
        return self._remembered.hits

    def now(self) -> float:
        return float(self._clock())

    def now_ms(self) -> int:
        return round(self.now() * 1000)

    def seal(self, purpose: str, claims: dict[str, Any], ttl: float) -> bytes:
        """A token of ``claims`` (plus ``iat`` and ``exp``) for ``ttl`` seconds."""
        return self.seal_until(purpose, claims, ttl)[0]

    def seal_until(self, purpose: str, claims: dict[str, Any], ttl: float) -> tuple[bytes, int]:
        """:meth:`seal`, and the token's ``exp`` (milliseconds since the epoch)."""
        if ENVELOPE_CLAIMS & claims.keys():
            raise ValueError(f"claims may not set {sorted(ENVELOPE_CLAIMS & claims.keys())}")
        now = self.now_ms()
        exp = now + round(ttl * 1000)
        body = json.dumps(
            {**claims, "iat": now, "exp": exp}, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        key = self._keys[self.sealing_kid][purpose]
        token = jwe.encrypt_compact(_header(self.sealing_kid), body, key, registry=self._registry)
        if len(token) > self.max_bytes:
            raise InvalidInput(
                f"the {_noun(purpose)} would be {len(token)} bytes, above "
                f"LAKE_FLIGHT_MAX_TICKET_BYTES={self.max_bytes}; shorten the query or its parameters"
            )
        blob = token.encode("ascii")
        self._remember(purpose, blob, json.loads(body))  # what opening it gives, types and all
        return blob, exp

    def open(self, purpose: str, blob: bytes, *, what: str | None = None) -> dict[str, Any]:
        """The claims of a token.

        Unauthenticated if forged, altered or malformed; UnknownKey if its key id is not
        configured here; UnsupportedEnvelope (InvalidInput) if an earlier release's envelope;
        InvalidInput if larger than ``max_bytes``; Expired once ``exp`` has passed."""
        what = what or _noun(purpose)
        remembered = self._remembered.get((purpose, blob)) if type(blob) is bytes else None
        if remembered is not None:
            self._check_unexpired(remembered["exp"], what)
            return dict(remembered)
        invalid = Unauthenticated(f"invalid {what}")
        if not isinstance(blob, (bytes, bytearray)) or not blob:
            raise invalid
        if len(blob) > self.max_bytes:
            raise InvalidInput(
                f"the {what} is {len(blob)} bytes, above LAKE_FLIGHT_MAX_TICKET_BYTES={self.max_bytes}"
            )
        if blob[0] in LEGACY_VERSIONS:
            raise UnsupportedEnvelope(
                f"this {what} uses envelope version {blob[0]}, which this server no longer reads "
                f"(it reads JWE tokens); plan the query again ({ROLLOUT_HINT})"
            )
        try:
            text = bytes(blob).decode("ascii")
        except UnicodeDecodeError:
            raise invalid from None
        segments = text.split(".")
        if len(segments) != 5 or segments[1]:  # joserfc decodes the rest strictly (canonical base64url)
            raise invalid
        kid = self._headers.get(segments[0])
        if kid is None:
            raise _unknown_key(segments[0], what) or invalid
        try:
            plaintext = jwe.decrypt_compact(text, self._keys[kid][purpose], registry=self._registry).plaintext
            claims = json.loads(plaintext or b"")
        except Exception:  # noqa: BLE001 - joserfc's errors (a bad tag) and bad JSON: one answer
            raise invalid from None
        if not isinstance(claims, dict) or not all(_is_int(claims.get(k)) for k in ENVELOPE_CLAIMS):
            raise invalid
        self._check_unexpired(claims["exp"], what)
        self._remember(purpose, bytes(blob), claims)
        return dict(claims)

    def _remember(self, purpose: str, blob: bytes, claims: dict[str, Any]) -> None:
        # What comes back is mostly the same bytes within milliseconds: a client's bearer token
        # on every call, a ticket's DoGet and a prepared handle's GetFlightInfo on the replica
        # that sealed them. Opening one in a live server took ~0.1 ms, and without this memo
        # the point query took 10-20 % longer (docs/flight-sql.md, "Ticket overhead").
        if len(blob) <= REMEMBERED_MAX_BYTES:
            self._remembered.put((purpose, blob), claims)

    def _check_unexpired(self, exp: int, what: str) -> None:
        if exp < self.now_ms():
            raise Expired(f"the {what} has expired")

    # -- bearer tokens -----------------------------------------------------------------

    def bearer(self, identity: Identity, ttl: float) -> str:
        return BEARER_PREFIX + self.seal("bearer", identity.claims(), ttl).decode("ascii")

    def open_bearer(self, token: str) -> Identity:
        return self.open_bearer_issued(token)[0]

    def open_bearer_issued(self, token: str) -> tuple[Identity, float]:
        """The identity and when the token was issued (wall-clock seconds, the sealer's clock)."""
        if token.startswith(LEGACY_BEARER_PREFIX):
            raise Unauthenticated("the token was issued by a server of another version; authenticate again")
        if not token.startswith(BEARER_PREFIX):
            raise Unauthenticated("invalid token")
        try:
            claims = self.open("bearer", token[len(BEARER_PREFIX) :].encode("ascii"), what="token")
            return Identity.from_claims(claims), claims["iat"] / 1000.0
        except (InvalidInput, UnicodeEncodeError, KeyError):
            raise Unauthenticated("invalid token") from None


def _header(kid: str) -> dict[str, str]:
    return {"alg": "dir", "enc": "A256GCM", "kid": kid}


def _unknown_key(segment: str, what: str) -> UnknownKey | None:
    """UnknownKey if ``segment`` is a header this server would write but for its key id."""
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
        kid = header["kid"]
        ours = header == _header(kid) and KEY_ID.fullmatch(kid) is not None
    except (ValueError, TypeError, KeyError):
        return None
    if not ours:
        return None
    return UnknownKey(
        f"the {what} was sealed with unknown key id {kid!r} (a retired key, or another "
        "deployment's); get a new one"
    )


def _subkey(key: bytes, purpose: str) -> bytes:
    return hmac.new(key, f"lake-flight/{purpose}/jwe".encode(), hashlib.sha256).digest()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _noun(purpose: str) -> str:
    return {"bearer": "token", "prepared": "prepared statement handle"}.get(purpose, "ticket")


def claim_names(claims: dict[str, Any]) -> set[str]:
    """The names of a ticket's, handle's or cookie's claims but a well-formed ``uid`` (only an
    owner with a user record id has one), for the exact-names check each kind makes; a
    malformed ``uid`` stays in, so that check refuses it."""
    names = set(claims)
    if isinstance(claims.get(UID), str) and claims[UID]:
        names.discard(UID)
    return names


def check_owner(claims: dict[str, Any], identity: Identity, what: str) -> None:
    """A ticket or handle is usable only by exactly the principal it was issued to (name, kind,
    project and role, and a user's record id: a user removed and added again under the same
    name is another principal; claims and caller without an id, earlier records, match)."""
    if (
        any(claims.get(k) != v for k, v in identity.claims().items())
        or claims.get(UID, "") != identity.user_id
    ):
        raise PermissionDenied(f"this {what} was issued to another principal")

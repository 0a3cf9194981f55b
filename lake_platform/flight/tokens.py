"""Sealed, versioned envelopes: bearer tokens, statement tickets and prepared-statement handles.

Wire format (envelope version 2)::

    version (1 byte, = 2) | key-id length (1 byte, 1..32) | key id (ASCII) | nonce (12 bytes)
    | AES-256-GCM(canonical JSON claims) (ciphertext + 16-byte tag)

The associated data is ``"lake-flight/" + purpose + "\\0" + header`` (header = version, key-id
length and key id), so the version and key id travel in the clear but cannot be altered, and an
envelope of one purpose ("bearer", "ticket", "prepared") can never be replayed as another. Each
configured key has a subkey per purpose (HMAC-SHA256 of the key with the purpose and version).

Keys rotate: the newest key seals, every configured key opens; an envelope sealed under a key
id this server does not have is refused as such ("unknown key id"). The claims always carry
``v`` (the envelope version again), ``kid``, ``pur``, ``iat`` and ``exp`` (integer milliseconds
since the epoch) and must be exactly their canonical encoding (sorted keys, no spaces, no
duplicate keys): anything else is refused even if it decrypts. An envelope of another version
(the previous release's version 1, or a newer one) is refused with a message saying so.
Envelopes larger than ``max_bytes`` are refused before any cryptography.

Sealing many envelopes of the same claims (a kept plan's tickets): :meth:`Sealer.encode`
encodes the claims that do not change once (with ``v``, ``kid`` and ``pur``), and
:meth:`Sealer.seal_encoded` writes only what changes per envelope (``exp``, ``iat`` and a few
named claims that sort before every kept one) in front of them: the same canonical bytes
:meth:`Sealer.seal` writes, so the opener cannot tell them apart and nothing in the format
changed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lake_platform.errors import InvalidInput, PermissionDenied, Unauthenticated
from lake_platform.flight.settings import KEY_ID

ENVELOPE_VERSION = 2
#: Versions earlier releases sealed; refused with "no longer accepted" rather than "invalid".
LEGACY_VERSIONS = frozenset({1})
#: Version bytes we would call "newer" (beyond: garbage).
_NEWEST_PLAUSIBLE = 15
_NONCE = 12
#: Random bytes of an id :meth:`Sealer.seal_encoded` makes (a ticket's, as ``new_ticket_id``).
_ID_BYTES = 8
_TAG = 16
_MAX_KID = 32
BEARER_PREFIX = "lkb1."
PURPOSES = ("bearer", "ticket", "prepared", "segment")
#: Claims every envelope carries, set by the sealer.
ENVELOPE_CLAIMS = frozenset({"v", "kid", "pur", "iat", "exp"})
DEFAULT_MAX_BYTES = 2 << 20
#: The name of a claim spliced in per envelope (written as is, no escaping needed).
_HEAD = re.compile(r"[a-z]{1,16}")
ROLLOUT_HINT = "servers reading different envelope versions must not share a load balancer: deploy blue/green"


class Expired(Unauthenticated):
    """The envelope was valid but its lifetime is over."""


class UnknownKey(Unauthenticated):
    """The envelope names a key id this server does not have (retired, or another deployment's)."""


class UnsupportedEnvelope(InvalidInput):
    """The envelope is of an older or newer version than this server reads."""


@dataclass(frozen=True)
class Identity:
    """Who an envelope speaks for: the principal's name, kind, project and role."""

    name: str
    kind: str
    project: str
    role: str

    def claims(self) -> dict[str, str]:
        return {"sub": self.name, "knd": self.kind, "prj": self.project, "rol": self.role}

    @classmethod
    def from_claims(cls, claims: dict[str, Any]) -> Identity:
        values = [claims.get(k) for k in ("sub", "knd", "prj", "rol")]
        if not all(isinstance(v, str) and v for v in values):
            raise KeyError("identity")
        return cls(*values)  # type: ignore[arg-type]

    @classmethod
    def of(cls, principal: Any) -> Identity:
        return cls(str(principal.name), str(principal.kind), str(principal.project), str(principal.role))


_CANONICAL = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def canonical(claims: dict[str, Any]) -> bytes:
    """The one byte encoding of a claims object that the sealer produces and the opener accepts."""
    return _CANONICAL.encode(claims).encode("utf-8")


class Encoded(NamedTuple):
    """Claims encoded once for many envelopes (:meth:`Sealer.encode`)."""

    purpose: str
    kid: str  # the key id they were encoded for (``kid`` is one of them)
    heads: tuple[str, ...]  # the claims each envelope adds (besides exp, iat), in key order
    keys: tuple[bytes, ...]  # how each of ``heads`` starts in the encoding (``"id":``)
    tail: bytes  # the canonical encoding of the kept claims, without its opening brace


@functools.lru_cache(maxsize=16)
def _head_keys(heads: tuple[str, ...]) -> tuple[bytes, ...]:
    """How each per-envelope claim starts in the encoding (``"id":``), once the names are
    checked: lowercase letters, unique, in key order after ``exp`` and ``iat``."""
    order = ["exp", "iat", *heads]
    if not all(_HEAD.fullmatch(h) for h in heads):
        raise ValueError("per-envelope claims are named in lowercase letters")
    if order != sorted(set(order)):
        raise ValueError("the claims added per envelope must sort after iat, in order, once")
    return tuple(b'"%s":' % h.encode() for h in heads)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("duplicate key")
        out[key] = value
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Sealer:
    """Seals and opens envelopes under a key ring (oldest first; the last key seals).

    ``keys=None``: one random key for this process (envelopes die with it)."""

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
        self._keys: dict[str, dict[str, AESGCM]] = {}
        for kid, key in keys:
            if not KEY_ID.fullmatch(kid) or len(kid) > _MAX_KID:
                raise ValueError(f"invalid key id {kid!r}")
            if len(key) < 32:
                raise ValueError(f"the key {kid!r} must be at least 32 bytes")
            if kid in self._keys:
                raise ValueError(f"key id {kid!r} appears twice")
            self._keys[kid] = {
                p: AESGCM(
                    hmac.new(key, f"lake-flight/{p}/v{ENVELOPE_VERSION}".encode(), hashlib.sha256).digest()
                )
                for p in PURPOSES
            }
        self.sealing_kid = keys[-1][0]
        self.key_ids = tuple(self._keys)
        # What every envelope sealed here starts with, per purpose: worked out once.
        kid = self.sealing_kid.encode("ascii")
        header = bytes([ENVELOPE_VERSION, len(kid)]) + kid
        self._header = {p: (header, _aad(p, header)) for p in PURPOSES}
        self._sealing = self._keys[self.sealing_kid]
        self.max_bytes = max_bytes
        self._clock = clock

    def now(self) -> float:
        return float(self._clock())

    def now_ms(self) -> int:
        return round(self.now() * 1000)

    # -- seal ----------------------------------------------------------------------------

    def seal(self, purpose: str, claims: dict[str, Any], ttl: float) -> bytes:
        """Seal ``claims`` (plus the envelope claims) for ``ttl`` seconds."""
        clash = ENVELOPE_CLAIMS & set(claims)
        if clash:
            raise ValueError(f"claims may not set {sorted(clash)}")
        now = self.now_ms()
        body = {
            **claims,
            "v": ENVELOPE_VERSION,
            "kid": self.sealing_kid,
            "pur": purpose,
            "iat": now,
            "exp": now + round(ttl * 1000),
        }
        return self._seal_body(purpose, canonical(body))

    def encode(self, purpose: str, claims: dict[str, Any], heads: Sequence[str] = ()) -> Encoded:
        """``claims`` (plus ``v``, ``kid`` and ``pur``) encoded once, for :meth:`seal_encoded`
        to seal with ``exp``, ``iat`` and the string claims ``heads`` added per envelope.

        Every claim of ``heads`` must sort after ``iat`` and before every kept claim, so the
        encoding is the kept claims' canonical one with the changing ones spliced in front."""
        heads = tuple(heads)
        keys = _head_keys(heads)
        clash = (ENVELOPE_CLAIMS | set(heads)) & claims.keys()
        if clash:
            raise ValueError(f"claims may not set {sorted(clash)}")
        kept = {**claims, "v": ENVELOPE_VERSION, "kid": self.sealing_kid, "pur": purpose}
        if (heads[-1] if heads else "iat") >= min(kept):
            raise ValueError("the claims added per envelope must sort before every kept claim")
        return Encoded(purpose, self.sealing_kid, heads, keys, canonical(kept)[1:])

    def seal_encoded(self, encoded: Encoded, heads: Sequence[str | None], ttl: float) -> tuple[bytes, int]:
        """Seal ``encoded``'s claims for ``ttl`` seconds with the string claims ``heads`` (the
        values of ``encoded.heads``, in that order; None: a new random id, 16 hex digits)
        added: byte for byte what :meth:`seal` seals for the same claims. Also returns ``exp``
        (milliseconds).

        The hot path of a kept plan's GetFlightInfo: one draw from the OS's random source
        gives the nonce and any new id, and nothing but the changing claims is encoded."""
        if encoded.kid != self.sealing_kid or len(heads) != len(encoded.heads):
            raise ValueError("claims encoded for another key or with other per-envelope claims")
        now = round(self._clock() * 1000)
        exp = now + round(ttl * 1000)
        rand = os.urandom(_NONCE + _ID_BYTES * heads.count(None))
        parts = [b'{"exp":%d,"iat":%d,' % (exp, now)]
        at = _NONCE
        for key, value in zip(encoded.keys, heads, strict=True):
            if value is None:
                parts += (key, b'"', binascii.hexlify(rand[at : at + _ID_BYTES]), b'",')
                at += _ID_BYTES
            elif isinstance(value, str):
                parts += (key, encode_basestring(value).encode(), b",")
            else:
                raise ValueError("per-envelope claims are strings")
        parts.append(encoded.tail)
        return self._seal_body(encoded.purpose, b"".join(parts), rand[:_NONCE]), exp

    def _seal_body(self, purpose: str, body: bytes, nonce: bytes | None = None) -> bytes:
        """``body`` sealed for ``purpose`` under a fresh nonce (``nonce``: one the caller drew,
        with other random bytes, from the same call to the OS's random source)."""
        header, aad = self._header[purpose]
        nonce = nonce or os.urandom(_NONCE)
        blob = header + nonce + self._sealing[purpose].encrypt(nonce, body, aad)
        if len(blob) > self.max_bytes:
            raise InvalidInput(
                f"the {_noun(purpose)} would be {len(blob)} bytes, above "
                f"LAKE_FLIGHT_MAX_TICKET_BYTES={self.max_bytes}; shorten the query or its parameters"
            )
        return blob

    # -- open ----------------------------------------------------------------------------

    def open(self, purpose: str, blob: bytes, *, what: str | None = None) -> dict[str, Any]:
        """The claims of a sealed envelope.

        Unauthenticated if forged, altered or not canonical; UnknownKey if its key id is not
        configured here; UnsupportedEnvelope (InvalidInput) if of another version; InvalidInput
        if larger than ``max_bytes``; Expired once ``exp`` has passed."""
        what = what or _noun(purpose)
        invalid = Unauthenticated(f"invalid {what}")
        if not isinstance(blob, (bytes, bytearray)) or not blob:
            raise invalid
        blob = bytes(blob)
        if len(blob) > self.max_bytes:
            raise InvalidInput(
                f"the {what} is {len(blob)} bytes, above LAKE_FLIGHT_MAX_TICKET_BYTES={self.max_bytes}"
            )
        version = blob[0]
        if version != ENVELOPE_VERSION:
            raise _version_error(version, what) or invalid
        if len(blob) < 2:
            raise invalid
        kid_len = blob[1]
        if not 1 <= kid_len <= _MAX_KID or len(blob) < 2 + kid_len + _NONCE + _TAG:
            raise invalid
        try:
            kid = blob[2 : 2 + kid_len].decode("ascii")
        except UnicodeDecodeError:
            raise invalid from None
        if not KEY_ID.fullmatch(kid):
            raise invalid
        keys = self._keys.get(kid)
        if keys is None:
            raise UnknownKey(
                f"the {what} was sealed with unknown key id {kid!r} (a retired key, or another "
                "deployment's); get a new one"
            )
        header = blob[: 2 + kid_len]
        nonce = blob[2 + kid_len : 2 + kid_len + _NONCE]
        try:
            body = keys[purpose].decrypt(nonce, blob[2 + kid_len + _NONCE :], _aad(purpose, header))
            claims = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
        except Exception:  # noqa: BLE001 - InvalidTag, bad UTF-8 or JSON, duplicate keys: one answer
            raise invalid from None
        if (
            not isinstance(claims, dict)
            or canonical(claims) != body
            or claims.get("v") != ENVELOPE_VERSION
            or claims.get("kid") != kid
            or claims.get("pur") != purpose
            or not _is_int(claims.get("iat"))
            or not _is_int(claims.get("exp"))
        ):
            raise invalid
        if claims["exp"] < self.now_ms():
            raise Expired(f"the {what} has expired")
        return claims

    # -- bearer tokens -----------------------------------------------------------------

    def bearer(self, identity: Identity, ttl: float) -> str:
        blob = self.seal("bearer", identity.claims(), ttl)
        return BEARER_PREFIX + base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def open_bearer(self, token: str) -> Identity:
        return self.open_bearer_issued(token)[0]

    def open_bearer_issued(self, token: str) -> tuple[Identity, float]:
        """The identity and when the token was issued (wall-clock seconds, the sealer's clock)."""
        identity, issued, _ = self.open_bearer_times(token)
        return identity, issued

    def open_bearer_times(self, token: str) -> tuple[Identity, float, int]:
        """The identity, when the token was issued (wall-clock seconds) and when it expires
        (milliseconds, compare with :meth:`now_ms`)."""
        if not token.startswith(BEARER_PREFIX) or len(token) > 4 * self.max_bytes:
            raise Unauthenticated("invalid token")
        text = token[len(BEARER_PREFIX) :]
        try:
            blob = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except Exception:  # noqa: BLE001
            raise Unauthenticated("invalid token") from None
        try:
            claims = self.open("bearer", blob, what="token")
        except UnsupportedEnvelope:
            raise Unauthenticated(
                "the token was issued by a server of another version; authenticate again"
            ) from None
        except InvalidInput:
            raise Unauthenticated("invalid token") from None
        try:
            return Identity.from_claims(claims), claims["iat"] / 1000.0, claims["exp"]
        except KeyError:
            raise Unauthenticated("invalid token") from None


def _aad(purpose: str, header: bytes) -> bytes:
    return b"lake-flight/" + purpose.encode() + b"\0" + header


def _noun(purpose: str) -> str:
    return {
        "bearer": "token",
        "ticket": "ticket",
        "prepared": "prepared statement handle",
        "segment": "ticket",
    }.get(purpose, purpose)


def _version_error(version: int, what: str) -> UnsupportedEnvelope | None:
    if version in LEGACY_VERSIONS:
        return UnsupportedEnvelope(
            f"this {what} uses envelope version {version}, which this server no longer reads (it reads "
            "version "
            f"{ENVELOPE_VERSION}); plan the query again ({ROLLOUT_HINT})"
        )
    if ENVELOPE_VERSION < version <= _NEWEST_PLAUSIBLE:
        return UnsupportedEnvelope(
            f"this {what} uses envelope version {version}, newer than this server reads (version "
            f"{ENVELOPE_VERSION}); a newer server issued it ({ROLLOUT_HINT}); plan the query again"
        )
    return None


def check_owner(claims: dict[str, Any], identity: Identity, what: str) -> None:
    """A ticket or handle is usable only by exactly the principal it was issued to (name, kind,
    project and role)."""
    if any(claims.get(k) != v for k, v in identity.claims().items()):
        raise PermissionDenied(f"this {what} was issued to another principal")


def require(claims: dict[str, Any], key: str, kind: type) -> Any:
    value = claims.get(key)
    if not isinstance(value, kind):
        raise InvalidInput("malformed envelope")
    return value

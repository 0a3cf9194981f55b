"""Sealed, versioned envelopes: bearer tokens, statement tickets and prepared-statement handles.

Each envelope is ``version byte || nonce || AES-256-GCM(JSON claims)``, with the purpose
("bearer", "ticket", "prepared") as associated data and a key derived per purpose from the
server secret, so one kind can never be replayed as another, clients cannot read or alter the
claims (SQL, table locations, principal), and any replica sharing the secret can open them.
The claims always carry ``exp`` (wall-clock seconds); an expired envelope is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lake_platform.errors import InvalidInput, Unauthenticated

VERSION = 1
_NONCE = 12
BEARER_PREFIX = "lkb1."
PURPOSES = ("bearer", "ticket", "prepared")


class Expired(Unauthenticated):
    """The envelope was valid but its lifetime is over."""


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
        return cls(str(claims["sub"]), str(claims["knd"]), str(claims["prj"]), str(claims["rol"]))

    @classmethod
    def of(cls, principal: Any) -> Identity:
        return cls(str(principal.name), str(principal.kind), str(principal.project), str(principal.role))


class Sealer:
    def __init__(self, secret: bytes | None = None, *, clock: Any = time.time) -> None:
        if secret is not None and len(secret) < 32:
            raise ValueError("the sealing secret must be at least 32 bytes")
        self.ephemeral = secret is None
        master = secret if secret is not None else secrets.token_bytes(32)
        self._keys = {p: AESGCM(hmac.new(master, f"lake-flight/{p}/v{VERSION}".encode(), hashlib.sha256).digest())
                      for p in PURPOSES}
        self._clock = clock

    def now(self) -> float:
        return float(self._clock())

    def seal(self, purpose: str, claims: dict[str, Any], ttl: float) -> bytes:
        body = dict(claims)
        body["exp"] = round(self.now() + ttl, 3)
        nonce = os.urandom(_NONCE)
        data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        return bytes([VERSION]) + nonce + self._keys[purpose].encrypt(nonce, data, purpose.encode())

    def open(self, purpose: str, blob: bytes, *, what: str = "credential") -> dict[str, Any]:
        """The claims of a sealed envelope; Unauthenticated if forged, altered or expired."""
        if not isinstance(blob, (bytes, bytearray)) or len(blob) < 1 + _NONCE + 16 or blob[0] != VERSION:
            raise Unauthenticated(f"invalid {what}")
        nonce, sealed = bytes(blob[1:1 + _NONCE]), bytes(blob[1 + _NONCE:])
        try:
            data = self._keys[purpose].decrypt(nonce, sealed, purpose.encode())
            claims = json.loads(data)
        except Exception:  # noqa: BLE001 - InvalidTag, bad JSON: same answer
            raise Unauthenticated(f"invalid {what}") from None
        if not isinstance(claims, dict) or not isinstance(claims.get("exp"), (int, float)):
            raise Unauthenticated(f"invalid {what}")
        if claims["exp"] < self.now():
            raise Expired(f"the {what} has expired")
        return claims

    # -- bearer tokens -----------------------------------------------------------------

    def bearer(self, identity: Identity, ttl: float) -> str:
        blob = self.seal("bearer", identity.claims(), ttl)
        return BEARER_PREFIX + base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def open_bearer(self, token: str) -> Identity:
        if not token.startswith(BEARER_PREFIX):
            raise Unauthenticated("invalid token")
        text = token[len(BEARER_PREFIX):]
        try:
            blob = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except Exception:  # noqa: BLE001
            raise Unauthenticated("invalid token") from None
        claims = self.open("bearer", blob, what="token")
        try:
            return Identity.from_claims(claims)
        except KeyError:
            raise Unauthenticated("invalid token") from None


def check_owner(claims: dict[str, Any], identity: Identity, what: str) -> None:
    """A ticket or handle is usable only by the principal it was issued to."""
    if claims.get("sub") != identity.name or claims.get("prj") != identity.project:
        raise Unauthenticated(f"this {what} was issued to another principal")


def require(claims: dict[str, Any], key: str, kind: type) -> Any:
    value = claims.get(key)
    if not isinstance(value, kind):
        raise InvalidInput("malformed envelope")
    return value

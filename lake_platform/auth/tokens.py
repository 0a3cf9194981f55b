"""Sealed, versioned envelopes: bearer tokens, statement tickets and prepared-statement handles.

Wire format (envelope version 3)::

    version (1 byte, = 3) | key-id length (1 byte, 1..32) | key id (ASCII)
    | sealed length (4 bytes, big-endian) | sealed: nonce (12 bytes)
      + AES-256-GCM(canonical JSON of the kept claims) (ciphertext + 16-byte tag)
    | head: canonical JSON of the per-envelope claims (``exp``, ``iat``, and a ticket's ``id``)
    | MAC: BLAKE2b-128, keyed with the purpose's MAC subkey, of every byte before it

An envelope's claims are the kept claims and the head's, which never share a key. The kept
claims (identity, SQL, snapshots: what must stay confidential) are encrypted; the head holds
only what a client may see (times and a ticket id) and what changes with every envelope. The
MAC binds the head to the sealed part and both to the version and key id: nothing can be
altered, moved between envelopes or between purposes. The associated data of the AES-GCM
seal is ``"lake-flight/" + purpose + "\\0" + header`` (header = version, key-id length and key
id). Each configured key has two subkeys per purpose (HMAC-SHA256 of the key with the purpose
and version): one for AES-GCM, one for the MAC.

Why two parts (version 2 sealed the whole claims object with AES-GCM on every envelope): a kept
plan's tickets all carry the same claims, so they are sealed once (:meth:`Sealer.encode`), and
each ticket (:meth:`Sealer.seal_encoded`; on every GetFlightInfo of a kept plan its one-step
form :meth:`Sealer.seal_new_id`) only writes its head and one keyed BLAKE2b over it, continued
from the state kept after the sealed part: no AES-GCM setup and no system call per ticket,
which is most of what pinning added to a point query's GetFlightInfo (docs/benchmarks.md,
"fifteenth round"). The sealed part is also what an opener may remember
(:meth:`Sealer.sealed_part`, :meth:`Sealer.open_head`): every envelope of one encoding shares it.

Keys rotate: the newest key seals, every configured key opens; an envelope sealed under a key
id this server does not have is refused as such ("unknown key id"). The claims always carry
``v`` (the envelope version again), ``kid``, ``pur`` (kept), ``iat`` and ``exp`` (head; integer
milliseconds since the epoch), and each part must be exactly its canonical encoding (sorted
keys, no spaces, no duplicate keys): anything else is refused even if it authenticates. An
envelope of another version (the earlier releases' versions 1 and 2, or a newer one) is refused
with a message saying so. Envelopes larger than ``max_bytes`` are refused before any
cryptography.

Ticket ids (:func:`new_ticket_id`) are unique, not secret: a random 64-bit start per process (drawn
again in a forked child) plus a counter. An id is only ever taken from an opened envelope, so
knowing one gives nothing (CancelFlightInfo and early starts go by the sealed ticket).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import itertools
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
from lake_platform.settings.flight import KEY_ID

ENVELOPE_VERSION = 3
#: Versions earlier releases sealed; refused with "no longer accepted" rather than "invalid".
LEGACY_VERSIONS = frozenset({1, 2})
#: Version bytes we would call "newer" (beyond: garbage).
_NEWEST_PLAUSIBLE = 15
_NONCE = 12
_TAG = 16
_MAC = 16
#: Bytes of the sealed part's length.
_LENGTH = 4
_ID_MASK = (1 << 64) - 1
_ID_HEADS = ("id",)
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
    """Claims sealed once for many envelopes (:meth:`Sealer.encode`)."""

    purpose: str
    kid: str  # the key id they were sealed under (``kid`` is one of them)
    heads: tuple[str, ...]  # the claims each envelope adds (besides exp, iat), in key order
    keys: tuple[bytes, ...]  # how each of ``heads`` starts in the head (``,"id":``)
    prefix: bytes  # the envelope up to its head: header, sealed length, sealed part
    mac: Any  # the MAC's state (``hashlib.blake2b``) after ``prefix``: copied per envelope


class _Ids:
    """Unique ids without a system call per id: a random 64-bit start per process and a
    counter (``next`` on ``itertools.count`` is atomic under the GIL)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start = int.from_bytes(os.urandom(8), "big")
        self.count = itertools.count()

    def next(self) -> int:
        return (self.start + next(self.count)) & _ID_MASK


_IDS = _Ids()
# A forked child would otherwise hand out its parent's next ids again.
os.register_at_fork(after_in_child=_IDS.reset)


def new_ticket_id() -> str:
    """A new ticket id: 16 hex digits, unique in this process, and across processes but for a
    2^-64-scale chance (see the module's docstring)."""
    return "%016x" % _IDS.next()


@functools.lru_cache(maxsize=16)
def _head_keys(heads: tuple[str, ...]) -> tuple[bytes, ...]:
    """How each per-envelope claim starts in the head (``,"id":``), once the names are
    checked: lowercase letters, unique, in key order after ``exp`` and ``iat``."""
    order = ["exp", "iat", *heads]
    if not all(_HEAD.fullmatch(h) for h in heads):
        raise ValueError("per-envelope claims are named in lowercase letters")
    if order != sorted(set(order)):
        raise ValueError("the claims added per envelope must sort after iat, in order, once")
    return tuple(b',"%s":' % h.encode() for h in heads)


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
        self._macs: dict[str, dict[str, bytes]] = {}
        for kid, key in keys:
            if not KEY_ID.fullmatch(kid) or len(kid) > _MAX_KID:
                raise ValueError(f"invalid key id {kid!r}")
            if len(key) < 32:
                raise ValueError(f"the key {kid!r} must be at least 32 bytes")
            if kid in self._keys:
                raise ValueError(f"key id {kid!r} appears twice")
            self._keys[kid] = {p: AESGCM(_subkey(key, f"{p}/v{ENVELOPE_VERSION}")) for p in PURPOSES}
            self._macs[kid] = {p: _subkey(key, f"{p}/mac/v{ENVELOPE_VERSION}") for p in PURPOSES}
        self.sealing_kid = keys[-1][0]
        self.key_ids = tuple(self._keys)
        # What every envelope sealed here starts with, per purpose: worked out once.
        kid = self.sealing_kid.encode("ascii")
        header = bytes([ENVELOPE_VERSION, len(kid)]) + kid
        self._header = {p: (header, _aad(p, header)) for p in PURPOSES}
        self._sealing = self._keys[self.sealing_kid]
        self._sealing_macs = self._macs[self.sealing_kid]
        self.max_bytes = max_bytes
        self._clock = clock

    def now(self) -> float:
        return float(self._clock())

    def now_ms(self) -> int:
        return round(self.now() * 1000)

    # -- seal ----------------------------------------------------------------------------

    def seal(self, purpose: str, claims: dict[str, Any], ttl: float) -> bytes:
        """Seal ``claims`` (plus the envelope claims) for ``ttl`` seconds: all of them kept
        (encrypted) but ``exp`` and ``iat``."""
        return self.seal_opened(purpose, claims, ttl)[0]

    def seal_opened(self, purpose: str, claims: dict[str, Any], ttl: float) -> tuple[bytes, dict[str, Any]]:
        """:meth:`seal`, and the claims :meth:`open` gives for the envelope (a new dict)."""
        clash = ENVELOPE_CLAIMS & set(claims)
        if clash:
            raise ValueError(f"claims may not set {sorted(clash)}")
        now = self.now_ms()
        kept = {**claims, "v": ENVELOPE_VERSION, "kid": self.sealing_kid, "pur": purpose}
        times = {"exp": now + round(ttl * 1000), "iat": now}
        blob = self._seal_body(purpose, canonical(kept), canonical(times))
        return blob, {**kept, **times}

    def encode(self, purpose: str, claims: dict[str, Any], heads: Sequence[str] = ()) -> Encoded:
        """``claims`` (plus ``v``, ``kid`` and ``pur``) sealed once, for :meth:`seal_encoded`
        to make envelopes of, each with ``exp``, ``iat`` and the string claims ``heads`` in
        its head. Names in ``heads`` are lowercase letters that sort after ``iat``."""
        heads = tuple(heads)
        keys = _head_keys(heads)
        clash = (ENVELOPE_CLAIMS | set(heads)) & claims.keys()
        if clash:
            raise ValueError(f"claims may not set {sorted(clash)}")
        kept = {**claims, "v": ENVELOPE_VERSION, "kid": self.sealing_kid, "pur": purpose}
        prefix = self._prefix(purpose, canonical(kept))
        mac = hashlib.blake2b(prefix, key=self._sealing_macs[purpose], digest_size=_MAC)
        return Encoded(purpose, self.sealing_kid, heads, keys, prefix, mac)

    def seal_encoded(self, encoded: Encoded, heads: Sequence[str | None], ttl: float) -> tuple[bytes, int]:
        """An envelope of ``encoded``'s claims for ``ttl`` seconds, with the string claims
        ``heads`` (the values of ``encoded.heads``, in that order; None: a new id,
        :func:`new_ticket_id`) in its head. Also returns ``exp`` (milliseconds).

        The hot path of a kept plan's GetFlightInfo: the head (a few bytes) and one keyed BLAKE2b
        over the head, continued from the state kept after the sealed part."""
        if encoded.kid != self.sealing_kid or len(heads) != len(encoded.heads):
            raise ValueError("claims encoded for another key or with other per-envelope claims")
        now = round(self._clock() * 1000)
        exp = now + round(ttl * 1000)
        parts = [b'{"exp":%d,"iat":%d' % (exp, now)]
        for key, value in zip(encoded.keys, heads, strict=True):
            if value is None:
                value = new_ticket_id()
            elif not isinstance(value, str):
                raise ValueError("per-envelope claims are strings")
            parts += (key, encode_basestring(value).encode())
        parts.append(b"}")
        head = b"".join(parts)
        self._check_size(encoded.purpose, len(encoded.prefix) + len(head) + _MAC)
        mac = encoded.mac.copy()
        mac.update(head)
        return b"".join((encoded.prefix, head, mac.digest())), exp

    def seal_new_id(self, encoded: Encoded, ttl_ms: int) -> tuple[bytes, int, str]:
        """:meth:`seal_encoded` of ``encoded`` (its one per-envelope claim ``id``) with a new id
        (:func:`new_ticket_id`) for ``ttl_ms`` milliseconds, and ``exp`` (milliseconds) and the
        id: the same bytes (tested against :meth:`seal_encoded`'s).

        It is all a kept plan's GetFlightInfo does to pin its snapshots, and it runs cold there
        (every step ~10x its time in a warm loop), so it takes as few steps as it can: the head,
        id included, in one formatting, and the size checked on the result."""
        if encoded.kid != self.sealing_kid or encoded.heads != _ID_HEADS:
            raise ValueError("claims encoded for another key or with other per-envelope claims")
        now = round(self._clock() * 1000)
        exp = now + ttl_ms
        # new_ticket_id(), inlined: the id is formatted with the head
        head = b'{"exp":%d,"iat":%d,"id":"%016x"}' % (exp, now, (_IDS.start + next(_IDS.count)) & _ID_MASK)
        mac = encoded.mac.copy()
        mac.update(head)
        blob = b"".join((encoded.prefix, head, mac.digest()))
        if len(blob) > self.max_bytes:
            self._check_size(encoded.purpose, len(blob))
        return blob, exp, head[-18:-2].decode()

    def sealed_part(self, blob: bytes) -> bytes | None:
        """The envelope ``blob`` up to its head (the header and the sealed claims: the same
        bytes in every envelope of one :meth:`encode`), or None if it cannot be one."""
        if len(blob) < 2 or blob[0] != ENVELOPE_VERSION:
            return None
        at = 2 + blob[1]
        end = at + _LENGTH + int.from_bytes(blob[at : at + _LENGTH], "big")
        return blob[:end] if len(blob) >= end + 2 + _MAC else None

    def open_head(self, purpose: str, blob: bytes, sealed: int, heads: frozenset[str]) -> dict[str, Any]:
        """The head claims of the envelope ``blob`` whose first ``sealed`` bytes (its
        :meth:`sealed_part`) the caller knows it opened before, with the kept claims those
        bytes hold: the MAC over the whole envelope is checked, the head must be canonical
        with exactly ``exp``, ``iat`` and ``heads`` (strings), and ``exp`` still ahead, as
        :meth:`open` checks them. Unauthenticated or Expired as :meth:`open` (which would
        also decrypt and parse the kept claims again)."""
        what = _noun(purpose)
        keys = self._macs.get(blob[2 : 2 + blob[1]].decode("ascii", "replace"))
        if keys is None or not _mac_matches(blob, keys[purpose]):
            raise Unauthenticated(f"invalid {what}")
        times = _head_claims(blob[sealed:-_MAC])
        if times is None or times.keys() != heads | {"exp", "iat"}:
            raise Unauthenticated(f"invalid {what}")
        self._check_unexpired(times["exp"], what)
        return times

    def _prefix(self, purpose: str, body: bytes) -> bytes:
        """An envelope up to its head: the header, and ``body`` (the kept claims' encoding)
        sealed under a fresh nonce, with its length."""
        header, aad = self._header[purpose]
        nonce = os.urandom(_NONCE)
        sealed = nonce + self._sealing[purpose].encrypt(nonce, body, aad)
        return header + len(sealed).to_bytes(_LENGTH, "big") + sealed

    def _seal_body(self, purpose: str, body: bytes, head: bytes) -> bytes:
        """The envelope of the kept claims' encoding ``body`` and the head ``head``."""
        prefix = self._prefix(purpose, body)
        self._check_size(purpose, len(prefix) + len(head) + _MAC)
        mac = hashlib.blake2b(prefix + head, key=self._sealing_macs[purpose], digest_size=_MAC)
        return prefix + head + mac.digest()

    def _check_size(self, purpose: str, size: int) -> None:
        if size > self.max_bytes:
            raise InvalidInput(
                f"the {_noun(purpose)} would be {size} bytes, above "
                f"LAKE_FLIGHT_MAX_TICKET_BYTES={self.max_bytes}; shorten the query or its parameters"
            )

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
        at = 2 + kid_len
        sealed_len = int.from_bytes(blob[at : at + _LENGTH], "big")
        head_at = at + _LENGTH + sealed_len
        if sealed_len < _NONCE + _TAG or len(blob) < head_at + 2 + _MAC:
            raise invalid
        if not _mac_matches(blob, self._macs[kid][purpose]):
            raise invalid
        header = blob[:at]
        nonce = blob[at + _LENGTH : at + _LENGTH + _NONCE]
        try:
            body = keys[purpose].decrypt(nonce, blob[at + _LENGTH + _NONCE : head_at], _aad(purpose, header))
            claims = json.loads(body.decode("utf-8"))
            # Each part must be exactly its canonical encoding: that also refuses duplicate
            # keys (the re-encoding has one of them), NaN and other spellings of a value.
            canonical_body = canonical(claims) == body
        except Exception:  # noqa: BLE001 - InvalidTag, bad UTF-8 or JSON, NaN: one answer
            raise invalid from None
        times = _head_claims(blob[head_at:-_MAC])
        if (
            not canonical_body
            or not isinstance(claims, dict)
            or times is None
            or claims.keys() & times.keys()
        ):
            raise invalid
        claims.update(times)
        if claims.get("v") != ENVELOPE_VERSION or claims.get("kid") != kid or claims.get("pur") != purpose:
            raise invalid
        self._check_unexpired(claims["exp"], what)
        return claims

    def _check_unexpired(self, exp: int, what: str) -> None:
        if exp < self.now_ms():
            raise Expired(f"the {what} has expired")

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


def _mac_matches(blob: bytes, key: bytes) -> bool:
    """Whether the envelope ``blob`` ends with the MAC, under ``key``, of every byte before it."""
    mac = hashlib.blake2b(blob[:-_MAC], key=key, digest_size=_MAC).digest()
    return hmac.compare_digest(mac, blob[-_MAC:])


def _head_claims(head: bytes) -> dict[str, Any] | None:
    """An envelope's head as its claims, or None unless it is exactly the canonical encoding
    of an object with integer ``exp`` and ``iat`` and string values for every other claim."""
    try:
        times = json.loads(head.decode("utf-8"))
        exact = canonical(times) == head
    except Exception:  # noqa: BLE001 - bad UTF-8 or JSON, NaN: one answer
        return None
    if (
        not exact
        or not isinstance(times, dict)
        or not _is_int(times.get("exp"))
        or not _is_int(times.get("iat"))
        or any(not isinstance(v, str) for k, v in times.items() if k not in ("exp", "iat"))
    ):
        return None
    return times


def _subkey(key: bytes, label: str) -> bytes:
    return hmac.new(key, f"lake-flight/{label}".encode(), hashlib.sha256).digest()


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

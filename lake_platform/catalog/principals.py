"""Principals: users (name + password) and service tokens, each with one role in one project.

Passwords are stored only as salted scrypt hashes (stdlib ``hashlib.scrypt``), token secrets as
salted SHA-256 hashes, and both are compared in constant time. Unknown names cost the same hashing
work as known ones, so the time taken does not tell whether a user or token exists.

Why two hashes: scrypt's cost protects a password, which people choose from a small space, against
offline guessing. A token secret is 256 random bits (:func:`new_token`), out of reach of any search
whatever a guess costs, so it is hashed once: scrypt's ~70 ms of CPU bought nothing on every token
created, on every server's first check of a token and on every wrong one. Token records hashed with
scrypt by earlier versions still verify.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from lake_platform.errors import InvalidInput, PermissionDenied, Unauthenticated
from lake_platform.registry.records import Record, now_ms

Role = Literal["reader", "writer", "admin"]
Action = Literal["read", "write", "admin"]
ROLES: tuple[Role, ...] = ("reader", "writer", "admin")
_RANK = {"reader": 0, "writer": 1, "admin": 2}
_NEEDS = {"read": 0, "write": 1, "admin": 2}

# scrypt cost: ~15 ms per check here; high enough to make offline guessing expensive.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
TOKEN_PREFIX = "lkt"
MIN_PASSWORD_LENGTH = 8


@dataclass(frozen=True)
class Principal:
    name: str
    kind: Literal["user", "token", "local"]
    project: str  # "*" only for the local admin
    role: Role
    #: A user's record id (``UserRecord.user_id``): which user of that name signed in. Not part
    #: of what the principal may do, so not of equality either.
    user_id: str = field(default="", compare=False)

    def can(self, project: str, action: Action) -> bool:
        if self.project != "*" and self.project != project:
            return False
        return _RANK[self.role] >= _NEEDS[action]

    def require(self, project: str, action: Action, what: str) -> None:
        if not self.can(project, action):
            raise PermissionDenied(
                f"{self.kind} {self.name} may not {what} (needs {action} on project {project})"
            )


LOCAL_ADMIN = Principal(name="local-admin", kind="local", project="*", role="admin")


class UserRecord(Record):
    name: str
    project: str
    role: Role
    password_hash: str
    created_at_ms: int = Field(default_factory=now_ms)
    created_by: str = ""
    #: Random, new for each ``add_user``: a login token carries it, so a user removed and added
    #: again under the same name (another person, or one whose access was meant to end) is
    #: another user to a token issued before. "" in records written before it existed: tokens
    #: then carry "" too, and match only such a record (every record added since has an id).
    user_id: str = ""


class TokenRecord(Record):
    token_id: str
    name: str
    project: str
    role: Role
    secret_hash: str
    created_at_ms: int = Field(default_factory=now_ms)
    created_by: str = ""
    revoked: bool = False


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def hash_token_secret(secret: str) -> str:
    """A service token's secret (256 random bits): one salted SHA-256, see the module's doc."""
    salt = secrets.token_bytes(16)
    return f"sha256${salt.hex()}${hashlib.sha256(salt + secret.encode()).hexdigest()}"


def verify_secret(secret: str, stored: str | None, *, dummy: str | None = None) -> bool:
    """Constant-time check of either hash; with ``stored=None`` it burns the work of checking
    ``dummy`` (default: a password's) and returns False."""
    if stored is None:
        stored = dummy or _DUMMY_HASH
        result = False
    else:
        result = True
    try:
        if stored.startswith("sha256$"):
            _, salt, digest = stored.split("$")
            computed = hashlib.sha256(bytes.fromhex(salt) + secret.encode()).digest()
        else:
            _, n, r, p, salt, digest = stored.split("$")
            computed = hashlib.scrypt(
                secret.encode(),
                salt=bytes.fromhex(salt),
                n=int(n),
                r=int(r),
                p=int(p),
                dklen=len(digest) // 2,
            )
    except ValueError:
        return False
    return hmac.compare_digest(computed.hex(), digest) and result


_DUMMY_HASH = "scrypt$16384$8$1$" + "00" * 16 + "$" + "00" * 32
#: What an unknown token id costs: the work of a known one's check.
DUMMY_TOKEN_HASH = "sha256$" + "00" * 16 + "$" + "00" * 32


def check_password(password: str) -> str:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"password must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > 1024:
        raise InvalidInput("password is too long (limit 1024 characters)")
    try:
        password.encode()  # what the hash reads: stdin's undecodable bytes arrive as surrogates
    except UnicodeEncodeError:
        raise InvalidInput("password must be UTF-8 text") from None
    return password


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise InvalidInput(f"invalid role {role!r}: use one of {', '.join(ROLES)}")
    return role  # type: ignore[return-value]


def new_token() -> tuple[str, str, str]:
    """Return (token id, secret, the token string handed to the user once)."""
    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return token_id, secret, f"{TOKEN_PREFIX}_{token_id}_{secret}"


def split_token(token: str) -> tuple[str, str]:
    parts = token.split("_", 2) if isinstance(token, str) else []
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or len(parts[1]) != 16 or not parts[2]:
        raise Unauthenticated("invalid credentials")
    return parts[1], parts[2]

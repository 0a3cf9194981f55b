"""Who is calling: ``Authorization: Bearer <token>`` or ``x-api-key: <token>`` (the spec's two
forms), with the same tokens Flight SQL accepts: service tokens (``lkt_…``, checked against the
registry, then trusted briefly) and login tokens (``lkb2.…``, sealed by a Flight Handshake under
the shared sealing keys). Verification is Flight's own :class:`~lake_platform.auth.service.AuthService`,
so expiry, revocation (through the catalog snapshot) and the failure throttle are the same.

Every failure is Unauthenticated with one message whatever was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

from lake_platform.auth.service import AuthService
from lake_platform.auth.tokens import Expired
from lake_platform.catalog.principals import Principal
from lake_platform.errors import LakeError, ServiceUnavailable, Unauthenticated


def credential(headers: Mapping[str, str]) -> str:
    value = headers.get("authorization")
    if value is not None:
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("send 'Authorization: Bearer <token>' or 'x-api-key: <token>'")
        return token.strip()
    key = headers.get("x-api-key")
    if key and key.strip():
        return key.strip()
    raise Unauthenticated("send 'Authorization: Bearer <token>' or 'x-api-key: <token>'")


def authenticate(service: AuthService, headers: Mapping[str, str]) -> Principal:
    token = credential(headers)
    try:
        identity = service.verify_bearer(token)
    except Expired:
        raise Unauthenticated("the token has expired; authenticate again") from None
    except (Unauthenticated, ServiceUnavailable):
        raise
    except LakeError:
        raise Unauthenticated("invalid credentials") from None
    if identity.kind not in ("user", "token") or identity.role not in ("reader", "writer", "admin"):
        raise Unauthenticated("invalid credentials")
    return Principal(
        name=identity.name,
        kind=identity.kind,  # type: ignore[arg-type]
        project=identity.project,
        role=identity.role,  # type: ignore[arg-type]
    )

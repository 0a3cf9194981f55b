"""Users and service tokens: who may do what, stored in the registry (mixin of Catalog)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from lake_platform.catalog.principals import (
    LOCAL_ADMIN,
    Principal,
    TokenRecord,
    UserRecord,
    check_password,
    check_role,
    hash_secret,
    new_token,
    split_token,
    verify_secret,
)
from lake_platform.errors import ConditionFailed, InvalidInput, NamespaceNotFound, Throttling, Unauthenticated
from lake_platform.naming import ProjectName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import decode
from lake_platform.registry.store import ABSENT, Check, Delete, Put

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

#: Failed logins per name within the window before further attempts are refused for a while.
MAX_FAILURES, FAILURE_WINDOW_S, LOCKOUT_S = 5, 60.0, 30.0


class _FailureThrottle:
    """Per-process throttle of repeated authentication failures, keyed by user name."""

    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def check(self, key: str) -> None:
        with self._lock:
            recent = [t for t in self._failures.get(key, []) if time.monotonic() - t < FAILURE_WINDOW_S]
            self._failures[key] = recent
            if len(recent) >= MAX_FAILURES and time.monotonic() - recent[-1] < LOCKOUT_S:
                raise Throttling("too many failed sign-ins; try again later")

    def failed(self, key: str) -> None:
        with self._lock:
            self._failures.setdefault(key, []).append(time.monotonic())

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


class AccessMixin:
    @property
    def _throttle(self) -> _FailureThrottle:
        # One throttle per catalog (a Flight process has one catalog, so one per process).
        throttle = self.__dict__.get("_failure_throttle")
        if throttle is None:
            throttle = self.__dict__.setdefault("_failure_throttle", _FailureThrottle())
        return throttle

    def add_user(self: Catalog, name: str, *, project: str, role: str, password: str,
                 principal: Principal | None = None) -> UserRecord:
        who = self._who(principal)
        check_segment(name, "user name")
        pname = ProjectName.parse(project)
        role_ = check_role(role)
        check_password(password)
        project_item = self.store.get(keys.project(pname))
        if project_item is None:
            raise NamespaceNotFound(f"project {pname} does not exist")
        who.require(pname.project, "admin", f"add users to {pname}")
        record = UserRecord(name=name, project=pname.project, role=role_, password_hash=hash_secret(password),
                            created_by=self._actor(None, who))
        ops = [Put(keys.user(name), record.encode(), ABSENT), Check(keys.project(pname), project_item.revision)]
        ops += self._log_ops(pname.project, "user add", self._actor(None, who), detail={"user": name, "role": role_})
        try:
            self.store.transact(ops)
        except ConditionFailed as exc:
            if exc.key == keys.user(name):
                from lake_platform.errors import NamespaceAlreadyExists

                raise NamespaceAlreadyExists(f"user {name} already exists") from None
            raise NamespaceNotFound(f"project {pname} was dropped concurrently") from None
        return record

    def remove_user(self: Catalog, name: str, *, principal: Principal | None = None) -> None:
        who = self._who(principal)
        check_segment(name, "user name")
        item = self.store.get(keys.user(name))
        if item is None:
            raise InvalidInput(f"no user named {name}")
        record = decode(UserRecord, item.value, item.key)
        who.require(record.project, "admin", f"remove users from {record.project}")
        self.store.transact([Delete(item.key, item.revision),
                             *self._log_ops(record.project, "user remove", self._actor(None, who),
                                            detail={"user": name})])

    def list_users(self: Catalog, project: str | None = None, *, principal: Principal | None = None) -> list[UserRecord]:
        who = self._who(principal)
        users = [decode(UserRecord, i.value, i.key) for i in self.store.scan_prefix("usr/")]
        if project is not None:
            ProjectName.parse(project)
            users = [u for u in users if u.project == project]
        return [u for u in users if who.can(u.project, "admin")]

    def create_token(self: Catalog, name: str, *, project: str, role: str,
                     principal: Principal | None = None) -> tuple[TokenRecord, str]:
        """Return the record and the token string (shown once; only its hash is stored)."""
        who = self._who(principal)
        check_segment(name, "token name")
        pname = ProjectName.parse(project)
        role_ = check_role(role)
        project_item = self.store.get(keys.project(pname))
        if project_item is None:
            raise NamespaceNotFound(f"project {pname} does not exist")
        who.require(pname.project, "admin", f"create tokens for {pname}")
        token_id, secret, token = new_token()
        record = TokenRecord(token_id=token_id, name=name, project=pname.project, role=role_,
                             secret_hash=hash_secret(secret), created_by=self._actor(None, who))
        self.store.transact([Put(keys.token(token_id), record.encode(), ABSENT),
                             Check(keys.project(pname), project_item.revision),
                             *self._log_ops(pname.project, "token create", self._actor(None, who),
                                            detail={"token": name, "token_id": token_id, "role": role_})])
        return record, token

    def revoke_token(self: Catalog, token_id: str, *, principal: Principal | None = None) -> TokenRecord:
        who = self._who(principal)
        if not isinstance(token_id, str) or len(token_id) != 16 or not token_id.isalnum():
            raise InvalidInput(f"invalid token id {token_id!r}")
        item = self.store.get(keys.token(token_id))
        if item is None:
            raise InvalidInput(f"no token with id {token_id}")
        record = decode(TokenRecord, item.value, item.key)
        who.require(record.project, "admin", f"revoke tokens of {record.project}")
        revoked = record.model_copy(update={"revoked": True})
        self.store.transact([Put(item.key, revoked.encode(), item.revision),
                             *self._log_ops(record.project, "token revoke", self._actor(None, who),
                                            detail={"token": record.name, "token_id": token_id})])
        return revoked

    def list_tokens(self: Catalog, *, principal: Principal | None = None) -> list[TokenRecord]:
        who = self._who(principal)
        tokens = [decode(TokenRecord, i.value, i.key) for i in self.store.scan_prefix("tok/")]
        return [t for t in tokens if who.can(t.project, "admin")]

    def authenticate_password(self: Catalog, username: str, password: str) -> Principal:
        """Constant-time check of a user's password; Unauthenticated on any mismatch."""
        key = username if isinstance(username, str) else ""
        self._throttle.check(key)
        record = None
        try:
            check_segment(username, "user name")
            item = self.store.get(keys.user(username))
            record = decode(UserRecord, item.value, item.key) if item else None
        except InvalidInput:
            record = None
        ok = verify_secret(password if isinstance(password, str) else "", record.password_hash if record else None)
        if not ok or record is None:
            self._throttle.failed(key)
            raise Unauthenticated("invalid credentials")
        self._throttle.succeeded(key)
        return Principal(name=record.name, kind="user", project=record.project, role=record.role)

    def authenticate_token(self: Catalog, token: str) -> Principal:
        token_id, secret = split_token(token)
        self._throttle.check(f"token:{token_id}")
        item = self.store.get(keys.token(token_id))
        record = decode(TokenRecord, item.value, item.key) if item else None
        ok = verify_secret(secret, record.secret_hash if record else None)
        if not ok or record is None or record.revoked:
            self._throttle.failed(f"token:{token_id}")
            raise Unauthenticated("invalid credentials")
        return Principal(name=record.name, kind="token", project=record.project, role=record.role)


__all__ = ["AccessMixin", "LOCAL_ADMIN"]

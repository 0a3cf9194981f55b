"""Users and service tokens: who may do what, stored in the registry; authentication.

Repeated failures are throttled by the one entry point that takes credentials from the network
(``auth.service.Throttle``, configured by ``LAKE_FLIGHT_AUTH_MAX_FAILURES``); a second throttle
here would sit in series with it and cap every setting at its own limit."""

from __future__ import annotations

from lake_platform.catalog.context import CatalogContext, Log
from lake_platform.catalog.principals import (
    DUMMY_TOKEN_HASH,
    LOCAL_ADMIN,
    Principal,
    Role,
    TokenRecord,
    UserRecord,
    check_password,
    check_role,
    hash_secret,
    hash_token_secret,
    new_token,
    split_token,
    verify_secret,
)
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    NamespaceNotFound,
    TokenNotFound,
    Unauthenticated,
    UserNotFound,
)
from lake_platform.naming import ProjectName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import decode, new_id
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Put


class Access:
    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx

    def add_user(
        self, name: str, *, project: str, role: str, password: str, by: Provenance = UNSTATED
    ) -> UserRecord:
        who = self.ctx.who(by.principal)
        check_segment(name, "user name")
        pname = ProjectName.parse(project)
        role_ = check_role(role)
        check_password(password)
        project_item = self._project(pname, who)
        who.require(pname.project, "admin", f"add users to {pname}")
        record = UserRecord(
            name=name,
            project=pname.project,
            role=role_,
            password_hash=hash_secret(password),
            created_by=self.ctx.actor(None, who),
            user_id=new_id(),
        )
        ops = [
            Put(keys.user(name), record.encode(), ABSENT),
            Check(keys.project(pname), project_item.revision),
        ]
        try:
            self.ctx.commit(
                ops,
                log=Log(
                    pname.project, "user add", self.ctx.actor(None, who), detail={"user": name, "role": role_}
                ),
            )
        except ConditionFailed as exc:
            if exc.key == keys.user(name):
                from lake_platform.errors import NamespaceAlreadyExists

                raise NamespaceAlreadyExists(f"user {name} already exists") from None
            raise NamespaceNotFound(f"project {pname} was dropped concurrently") from None
        return record

    def remove_user(self, name: str, *, by: Provenance = UNSTATED) -> None:
        who = self.ctx.who(by.principal)
        check_segment(name, "user name")
        record, item = self._user(name, who)
        who.require(record.project, "admin", f"remove users from {record.project}")
        self.ctx.commit(
            [Delete(item.key, item.revision)],
            log=Log(record.project, "user remove", self.ctx.actor(None, who), detail={"user": name}),
        )

    def set_user_role(self, name: str, role: str, *, by: Provenance = UNSTATED) -> tuple[UserRecord, Role]:
        """Change a user's role in place (project and password kept); returns the record and the
        role it had. One logged commit; none when the role is the same. A Bearer the user was
        issued under the old role is refused once a snapshot refresh begun after the change is
        in place, like a removed user's (``auth.service``): a new login carries the new role.
        Service tokens are principals of their own and keep theirs."""
        who = self.ctx.who(by.principal)
        check_segment(name, "user name")
        role_ = check_role(role)
        record, item = self._user(name, who)
        who.require(record.project, "admin", f"change roles in {record.project}")
        if record.role == role_:
            return record, record.role
        updated = record.model_copy(update={"role": role_})
        try:
            self.ctx.commit(
                [Put(item.key, updated.encode(), item.revision)],
                log=Log(
                    record.project,
                    "user set-role",
                    self.ctx.actor(by.actor, who),
                    detail={"user": name, "from": record.role, "to": role_},
                ),
            )
        except ConditionFailed:
            raise ConcurrentModification(f"user {name} changed meanwhile; the role was not changed") from None
        return updated, record.role

    def _project(self, pname: ProjectName, who: Principal) -> Item:
        """The project's item; NamespaceNotFound when it is missing or another tenant's (the
        same answer, so an admin of one project cannot probe for others)."""
        item = self.ctx.store.get(keys.project(pname)) if who.can(pname.project, "read") else None
        if item is None:
            raise NamespaceNotFound(f"project {pname} does not exist")
        return item

    def _user(self, name: str, who: Principal) -> tuple[UserRecord, Item]:
        """The user's record; UserNotFound when there is none, or when it is in a project the
        caller cannot see (another tenant learns neither that it exists nor where)."""
        item = self.ctx.store.get(keys.user(name))
        record = decode(UserRecord, item.value, item.key) if item is not None else None
        if item is None or record is None or not who.can(record.project, "read"):
            raise UserNotFound(f"no user named {name}")
        return record, item

    def list_users(self, project: str | None = None, *, by: Provenance = UNSTATED) -> list[UserRecord]:
        who = self.ctx.who(by.principal)
        users = [decode(UserRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.users())]
        if project is not None:
            ProjectName.parse(project)
            users = [u for u in users if u.project == project]
        return [u for u in users if who.can(u.project, "admin")]

    def create_token(
        self, name: str, *, project: str, role: str, by: Provenance = UNSTATED
    ) -> tuple[TokenRecord, str]:
        """Return the record and the token string (shown once; only its hash is stored)."""
        who = self.ctx.who(by.principal)
        check_segment(name, "token name")
        pname = ProjectName.parse(project)
        role_ = check_role(role)
        project_item = self._project(pname, who)
        who.require(pname.project, "admin", f"create tokens for {pname}")
        token_id, secret, token = new_token()
        record = TokenRecord(
            token_id=token_id,
            name=name,
            project=pname.project,
            role=role_,
            secret_hash=hash_token_secret(secret),
            created_by=self.ctx.actor(None, who),
        )
        self.ctx.commit(
            [
                Put(keys.token(token_id), record.encode(), ABSENT),
                Check(keys.project(pname), project_item.revision),
            ],
            log=Log(
                pname.project,
                "token create",
                self.ctx.actor(None, who),
                detail={"token": name, "token_id": token_id, "role": role_},
            ),
        )
        return record, token

    def revoke_token(self, token_id: str, *, by: Provenance = UNSTATED) -> TokenRecord:
        who = self.ctx.who(by.principal)
        if not isinstance(token_id, str) or len(token_id) != 16 or not token_id.isalnum():
            raise InvalidInput(f"invalid token id {token_id!r}")
        item = self.ctx.store.get(keys.token(token_id))
        record = decode(TokenRecord, item.value, item.key) if item is not None else None
        if item is None or record is None or not who.can(record.project, "read"):
            # Another tenant learns neither that the token exists nor where, as with users.
            raise TokenNotFound(f"no token with id {token_id}")
        who.require(record.project, "admin", f"revoke tokens of {record.project}")
        revoked = record.model_copy(update={"revoked": True})
        self.ctx.commit(
            [Put(item.key, revoked.encode(), item.revision)],
            log=Log(
                record.project,
                "token revoke",
                self.ctx.actor(None, who),
                detail={"token": record.name, "token_id": token_id},
            ),
        )
        return revoked

    def list_tokens(self, *, by: Provenance = UNSTATED) -> list[TokenRecord]:
        who = self.ctx.who(by.principal)
        tokens = [decode(TokenRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.tokens())]
        return [t for t in tokens if who.can(t.project, "admin")]

    def authenticate_password(self, username: str, password: str) -> Principal:
        """Constant-time check of a user's password; Unauthenticated on any mismatch."""
        record = None
        try:
            check_segment(username, "user name")
            item = self.ctx.store.get(keys.user(username))
            record = decode(UserRecord, item.value, item.key) if item else None
        except InvalidInput:
            record = None
        ok = verify_secret(
            password if isinstance(password, str) else "", record.password_hash if record else None
        )
        if not ok or record is None:
            raise Unauthenticated("invalid credentials")
        return Principal(
            name=record.name, kind="user", project=record.project, role=record.role, user_id=record.user_id
        )

    def authenticate_token(self, token: str) -> Principal:
        token_id, secret = split_token(token)
        item = self.ctx.store.get(keys.token(token_id))
        record = decode(TokenRecord, item.value, item.key) if item else None
        ok = verify_secret(secret, record.secret_hash if record else None, dummy=DUMMY_TOKEN_HASH)
        if not ok or record is None or record.revoked:
            raise Unauthenticated("invalid credentials")
        return Principal(name=record.name, kind="token", project=record.project, role=record.role)


__all__ = ["Access", "LOCAL_ADMIN"]

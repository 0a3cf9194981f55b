"""``set_user_role`` (issue 49's ``lake user set-role``): the role changes in place (project and
password kept), logged; a login afterwards carries the new role; an unknown user or role, or a
caller who is not the project's admin, is a typed error and nothing changes."""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import (
    ErrorCode,
    InvalidInput,
    LakeError,
    PermissionDenied,
    TokenNotFound,
    UserNotFound,
)
from lake_platform.registry import keys
from lake_platform_tests.catalog.conftest import Lake, state

PASSWORD = "dana-password-1"


@pytest.fixture
def storage() -> dict[str, Any]:
    """Registry-only calls: the local warehouse is enough (no S3 run of the same)."""
    return {"root": None, "settings": {}}


@pytest.fixture
def dana(lake: Lake) -> Lake:
    lake.catalog.access.add_user("dana", project="p", role="reader", password=PASSWORD)
    return lake


def user_item(lake: Lake) -> tuple[bytes, int]:
    item = lake.catalog.store.get(keys.user("dana"))
    assert item is not None
    return item.value, item.revision


def test_the_role_changes_in_place_and_is_logged(dana: Lake) -> None:
    c = dana.catalog
    before = c.access.authenticate_password("dana", PASSWORD)
    assert before.role == "reader"
    record, previous = c.access.set_user_role("dana", "writer")
    assert (record.role, record.project, previous) == ("writer", "p", "reader")
    principal = c.access.authenticate_password("dana", PASSWORD)  # same password, new role
    assert (principal.role, principal.project) == ("writer", "p")
    assert principal.can("p", "write") and not before.can("p", "write")
    entry = c.reads.log("p")[-1]
    assert entry.operation == "user set-role"
    assert entry.detail == {"user": "dana", "from": "reader", "to": "writer"}
    assert [u.role for u in c.access.list_users("p")] == ["writer"]


def test_the_same_role_is_no_change(dana: Lake) -> None:
    before, log = user_item(dana), dana.catalog.reads.log("p")
    record, previous = dana.catalog.access.set_user_role("dana", "reader")
    assert record.role == previous == "reader"
    assert user_item(dana) == before and dana.catalog.reads.log("p") == log


@pytest.mark.parametrize(
    ("name", "role", "by", "error"),
    [
        ("nobody", "writer", None, UserNotFound),
        ("dana", "root", None, InvalidInput),
        ("Dana!", "writer", None, InvalidInput),
        ("dana", "admin", Principal("pat", "user", "p", "writer"), PermissionDenied),
        # Another tenant's admin is answered as if there were no such user: before, it was
        # PermissionDenied naming dana's project.
        ("dana", "admin", Principal("quinn", "user", "q", "admin"), UserNotFound),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    dana: Lake, name: str, role: str, by: Principal | None, error: type[LakeError]
) -> None:
    before, users = state(dana), user_item(dana)
    with pytest.raises(error):
        dana.catalog.access.set_user_role(name, role, by=Provenance(principal=by))
    assert state(dana) == before and user_item(dana) == users


def test_another_tenants_user_looks_missing_to_remove_and_set_role(dana: Lake) -> None:
    quinn = Provenance(principal=Principal("quinn", "user", "q", "admin"))
    before = state(dana)
    for call in (
        lambda who: dana.catalog.access.remove_user(who, by=quinn),
        lambda who: dana.catalog.access.set_user_role(who, "admin", by=quinn),
    ):
        answers = []
        for who in ("dana", "nobody"):
            with pytest.raises(UserNotFound) as err:
                call(who)
            answers.append(str(err.value).replace(who, "X"))
        assert answers[0] == answers[1]
    assert state(dana) == before


def test_revoking_an_unknown_token_is_not_found_and_another_tenants_looks_the_same(dana: Lake) -> None:
    """An id no token has was InvalidInput (as a malformed one is); another tenant's admin was
    told PermissionDenied naming the token's project. Both now are TokenNotFound (NotFound on
    the wire), alike, and nothing changes; a malformed id stays InvalidInput."""
    record, _ = dana.catalog.access.create_token("etl", project="p", role="reader")
    quinn = Provenance(principal=Principal("quinn", "user", "q", "admin"))
    before = state(dana)
    answers = []
    for token_id, by in ((record.token_id, quinn), ("0123456789abcdef", None)):
        with pytest.raises(TokenNotFound) as err:
            dana.catalog.access.revoke_token(token_id, by=Provenance(principal=by.principal if by else None))
        assert err.value.code == ErrorCode.NAMESPACE_NOT_FOUND
        answers.append(str(err.value).replace(token_id, "X"))
    assert answers[0] == answers[1] == "no token with id X"
    with pytest.raises(InvalidInput):
        dana.catalog.access.revoke_token("not-an-id")
    assert state(dana) == before
    assert not [t for t in dana.catalog.access.list_tokens() if t.revoked]


def test_a_user_added_again_is_another_user_record(dana: Lake) -> None:
    """Each add_user draws a new random ``user_id``; a login carries it, so a Bearer issued
    before a remove and re-add under the same name, project and role is not the new user's."""
    c = dana.catalog
    first = c.access.authenticate_password("dana", PASSWORD)
    c.access.remove_user("dana")
    again = c.access.add_user("dana", project="p", role="reader", password=PASSWORD)
    second = c.access.authenticate_password("dana", PASSWORD)
    assert first.user_id and second.user_id == again.user_id != first.user_id
    assert c.access.set_user_role("dana", "writer")[0].user_id == again.user_id  # kept in place

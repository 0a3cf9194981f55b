"""``lake user set-role NAME ROLE``: the role changes in place (the password keeps working, now
with the new role), logged; an unknown user or role is a typed error and changes nothing."""

from __future__ import annotations

import json

from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform.settings import load_settings
from lake_platform_tests.cli.conftest import run

PASSWORD = "dana-password-1"


def add_dana(lake: CliRunner) -> None:
    result = lake.invoke(
        cli,
        ["--json", "user", "add", "dana", "--project", "p", "--role", "reader", "--password-stdin"],
        input=PASSWORD + "\n",
    )
    assert result.exit_code == 0, result.output


def test_set_role_changes_the_role_in_place(lake: CliRunner) -> None:
    add_dana(lake)
    changed = run(lake, "user", "set-role", "dana", "writer")
    assert changed == {"name": "dana", "project": "p", "role": "writer", "previous_role": "reader"}
    assert [(u["name"], u["role"]) for u in run(lake, "user", "list")] == [("dana", "writer")]  # type: ignore[index]
    with Catalog(load_settings()) as catalog:
        assert catalog.access.authenticate_password("dana", PASSWORD).role == "writer"
        entry = catalog.reads.log("p")[-1]
    assert entry.operation == "user set-role" and entry.detail["to"] == "writer"
    text = lake.invoke(cli, ["user", "set-role", "dana", "writer"]).output
    assert text.strip() == "user dana is already writer on p"


def test_an_unknown_user_or_role_is_a_typed_error(lake: CliRunner) -> None:
    add_dana(lake)
    # An unknown user is NotFound (exit 1), as an unknown token; a bad role is bad input (exit 2).
    for command, args, name, code, message in (
        ("set-role", ["nobody", "writer"], "UserNotFound", 1, "no user named nobody"),
        ("remove", ["nobody"], "UserNotFound", 1, "no user named nobody"),
        ("set-role", ["dana", "root"], "InvalidInput", 13, "invalid role 'root': use one of reader, writer"),
    ):
        result = lake.invoke(cli, ["--json", "user", command, *args])
        error = json.loads(result.output)["error"]
        assert (error["error"], error["code"]) == (name, code) and message in error["message"]
        assert result.exit_code == (2 if code == 13 else 1)
    assert [u["role"] for u in run(lake, "user", "list")] == ["reader"]  # type: ignore[index]


def test_the_help_names_the_roles() -> None:
    out = CliRunner().invoke(cli, ["user", "set-role", "--help"]).output
    assert "NAME ROLE" in out and "reader, writer or admin" in " ".join(out.split())


def test_listing_the_users_of_a_project_that_does_not_exist_is_an_error(lake: CliRunner) -> None:
    """A mistyped --project was "no users" (exit 0), as if the project had none."""
    result = lake.invoke(cli, ["user", "list", "--project", "nope"])
    assert (
        result.exit_code == 1
        and result.output == "error [1 NAMESPACE_NOT_FOUND]: project nope does not exist\n"
    )
    assert run(lake, "user", "list", "--project", "p") == []


def test_revoking_a_token_id_nobody_has_is_not_found(lake: CliRunner) -> None:
    """It was INVALID_INPUT (exit 2), as if the id were malformed."""
    created = run(lake, "token", "create", "etl", "--project", "p", "--role", "reader")
    result = lake.invoke(cli, ["--json", "token", "revoke", "0123456789abcdef"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["error"] == {
        "code": 1,
        "error": "TokenNotFound",
        "message": "no token with id 0123456789abcdef",
    }
    result = lake.invoke(cli, ["token", "revoke", "0123456789abcdef"])
    assert (result.exit_code, result.stderr) == (
        1,
        "error [1 NAMESPACE_NOT_FOUND]: no token with id 0123456789abcdef\n",
    )
    assert [t["revoked"] for t in run(lake, "token", "list")] == [False]  # type: ignore[index]
    assert run(lake, "token", "revoke", created["token_id"]) == {  # type: ignore[index]
        "token_id": created["token_id"],  # type: ignore[index]
        "revoked": True,
    }


def test_user_list_json_gives_its_time_in_epoch_milliseconds(lake: CliRunner) -> None:
    """The README's rule for --json (times are ``*_ms``): `user list` gave only a text time,
    ``created``, which stays (fields are never removed)."""
    add_dana(lake)
    (user,) = run(lake, "user", "list")  # type: ignore[misc]
    assert isinstance(user["created_at_ms"], int) and user["created_at_ms"] > 0
    assert user["created"].endswith("Z")
    assert "created_at_ms" not in lake.invoke(cli, ["user", "list"]).output

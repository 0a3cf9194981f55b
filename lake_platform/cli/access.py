"""Who may connect: users (name, password, one role in one project) and service tokens."""

from __future__ import annotations

import sys

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table, timestamp


@click.group()
def user() -> None:
    """Users: a name, a password and one role in one project."""


@user.command("add")
@click.argument("name")
@click.option("--project", required=True, help="The one project it may act in.")
@click.option(
    "--role", required=True, type=click.Choice(["reader", "writer", "admin"]), help="What it may do there."
)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@pass_state
@handles_errors
def user_add(state: State, name: str, project: str, role: str, password_stdin: bool) -> None:
    """Add a user; without --password-stdin a password is generated and printed once."""
    import secrets

    generated = not password_stdin
    password = secrets.token_urlsafe(18) if generated else sys.stdin.readline().rstrip("\r\n")
    with state.catalog() as catalog:
        record = catalog.access.add_user(name, project=project, role=role, password=password)
    data = {"name": record.name, "project": record.project, "role": record.role}
    if generated:
        data["password"] = password
    state.emit(
        data,
        lambda d: (
            f"added user {d['name']} ({d['role']} on {d['project']})"
            + (f"\npassword (shown once): {d['password']}" if "password" in d else "")
        ),
    )


@user.command("list")
@click.option("--project", help="Only this project's users.")
@pass_state
@handles_errors
def user_list(state: State, project: str | None) -> None:
    """List users (of one project: --project)."""
    with state.catalog() as catalog:
        if project is not None:
            catalog.containers.list_warehouses(project)  # NamespaceNotFound: a typo is not "no users"
        users = [
            {
                "name": u.name,
                "project": u.project,
                "role": u.role,
                "created": timestamp(u.created_at_ms),
                "created_at_ms": u.created_at_ms,
            }
            for u in catalog.access.list_users(project)
        ]
    state.emit(users, lambda us: text_table(["name", "project", "role", "created"], us) if us else "no users")


@user.command("set-role")
@click.argument("name")
@click.argument("role")
@pass_state
@handles_errors
def user_set_role(state: State, name: str, role: str) -> None:
    """Change user NAME's role in its project to ROLE (reader, writer or admin); the password
    is kept and the change logged. Sessions opened under the old role end at the servers' next
    catalog refresh; a new login has the new role."""
    with state.catalog() as catalog:
        record, previous = catalog.access.set_user_role(name, role)
    state.emit(
        {"name": record.name, "project": record.project, "role": record.role, "previous_role": previous},
        lambda d: (
            f"user {d['name']} is already {d['role']} on {d['project']}"
            if d["role"] == d["previous_role"]
            else f"user {d['name']} on {d['project']}: {d['previous_role']} -> {d['role']}"
        ),
    )


@user.command("remove")
@click.argument("name")
@pass_state
@handles_errors
def user_remove(state: State, name: str) -> None:
    """Remove a user."""
    with state.catalog() as catalog:
        catalog.access.remove_user(name)
    state.emit({"removed": name}, lambda d: f"removed user {d['removed']}")


@click.group()
def token() -> None:
    """Service tokens (Bearer credentials for machines)."""


@token.command("create")
@click.argument("name")
@click.option("--project", required=True, help="The one project it may act in.")
@click.option(
    "--role", required=True, type=click.Choice(["reader", "writer", "admin"]), help="What it may do there."
)
@pass_state
@handles_errors
def token_create(state: State, name: str, project: str, role: str) -> None:
    """Create a token; it is printed once and only its hash is kept."""
    with state.catalog() as catalog:
        record, secret = catalog.access.create_token(name, project=project, role=role)
    state.emit(
        {"token_id": record.token_id, "name": name, "project": project, "role": role, "token": secret},
        lambda d: f"created token {d['name']} (id {d['token_id']})\ntoken (shown once): {d['token']}",
    )


@token.command("revoke")
@click.argument("token_id")
@pass_state
@handles_errors
def token_revoke(state: State, token_id: str) -> None:
    """Revoke a token by its id."""
    with state.catalog() as catalog:
        record = catalog.access.revoke_token(token_id)
    state.emit({"token_id": record.token_id, "revoked": True}, lambda d: f"revoked token {d['token_id']}")


@token.command("list")
@pass_state
@handles_errors
def token_list(state: State) -> None:
    """List tokens (never their secrets)."""
    with state.catalog() as catalog:
        tokens = [
            {
                "token_id": t.token_id,
                "name": t.name,
                "project": t.project,
                "role": t.role,
                "revoked": t.revoked,
            }
            for t in catalog.access.list_tokens()
        ]
    cols = ["token_id", "name", "project", "role", "revoked"]
    state.emit(tokens, lambda ts: text_table(cols, ts) if ts else "no tokens")


COMMANDS: tuple[click.Command, ...] = (user, token)

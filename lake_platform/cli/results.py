"""``lake results``: the results area where Flight SQL and REST QueryTable spool heavy results."""

from __future__ import annotations

from typing import Any

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table


@click.group()
def results() -> None:
    """Spooled query results (LAKE_RESULTS_ROOT)."""


@results.command("expire")
@pass_state
@handles_errors
def expire(state: State) -> None:
    """Delete spooled results whose expiry (LAKE_RESULTS_TTL_SECONDS after they started) passed
    more than 5 minutes ago, and job folders abandoned before they recorded one. Live results
    are kept. The servers and the Dagster asset do the same on their own."""
    import time

    from lake_platform.engine.results import ResultsArea
    from lake_platform.maintenance.results import reclaim_expired

    settings = state.settings
    outcome = reclaim_expired(ResultsArea.of(settings), time.time(), lifetime=settings.results_ttl_seconds)
    state.emit(outcome.to_dict(), _human)


def _human(data: dict[str, Any]) -> str:
    head = f"deleted {len(data['deleted'])} expired results under {data['root']}, kept {data['kept']}"
    if not data["deleted"]:
        return head
    return head + "\n" + text_table(["project", "job", "expired_at"], data["deleted"])


COMMANDS: tuple[click.Command, ...] = (results,)

"""Provenance: who asks for a catalog operation and under which names its change is logged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lake_platform.catalog.principals import Principal


@dataclass(frozen=True)
class Provenance:
    """Every field is optional; the catalog fills what is missing (``CatalogContext.who`` and
    ``actor``).

    ``principal``: who asks (permissions are checked against it; default: the catalog's own, the
    local admin for the CLI). ``actor``: the name the commit log records (default: the settings'
    actor for a local principal, else the principal's name). ``run_id``: the run (a Dagster
    run, an ingest) the change belongs to, recorded with it. ``commit_id``: makes a write
    idempotent: a commit id that already landed is answered from its marker, not written twice.
    """

    principal: Principal | None = None
    actor: str | None = None
    run_id: str | None = None
    commit_id: str | None = None


#: No provenance given: the catalog's own principal and actor, a fresh commit id.
UNSTATED = Provenance()


def new_commit_id() -> str:
    """A fresh commit id, as the catalog draws one for a write given none."""
    # Imported here: the CLI's command modules import Provenance, and the records load pydantic,
    # which `lake --help` never needs.
    from lake_platform.registry.records import new_id

    return new_id()

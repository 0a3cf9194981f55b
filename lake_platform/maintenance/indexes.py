"""Policy-driven scalar indexes: build what the table's effective policy names, refresh what lags.

The effective policy's ``indexes`` (column → kind) says which indexes a table should have. For
each, the index named ``<column>_idx`` is built when missing or of another kind (a rebuild), and
every index of the table (policy-named or made ad hoc with ``lake index create``) that lags the
data, i.e. has fragments committed after its last build, is refreshed in one commit. Columns the
table does not have, or whose type the kind cannot index, are reported, not errors: a policy set
on a namespace names columns of some of its tables. Indexes the policy does not name are never
dropped here (``lake index drop``).

Each build and the refresh is a catalog commit under the table's lease (``catalog/indexes``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.provenance import Provenance
from lake_platform.engine.indexes import index_name, unsuitable

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.engine.indexes import IndexInfo


@dataclass
class IndexPlan:
    table: str
    #: (column, kind) to build or rebuild.
    build: list[tuple[str, str]] = field(default_factory=list)
    #: Existing indexes behind the data, not rebuilt anyway.
    refresh: list[str] = field(default_factory=list)
    #: Policy columns the table lacks, with the reason.
    skipped: dict[str, str] = field(default_factory=dict)
    indexes: list[IndexInfo] = field(default_factory=list)
    source: str | None = None

    @property
    def current(self) -> bool:
        return not self.build and not self.refresh


@dataclass
class IndexOutcome:
    table: str
    status: str  # committed | nothing-to-do
    version: int
    built: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    commit_ids: list[str] = field(default_factory=list)
    policy_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(catalog: Catalog, name: str) -> IndexPlan:
    """What index maintenance would do to ``name`` now (reads only)."""
    effective = catalog.policies.effective_policy(name)
    schema = catalog.schemas.table_schema(name)
    existing = catalog.indexes.list_indexes(name)
    by_name = {i.name: i for i in existing}
    result = IndexPlan(name, indexes=existing, source=effective.source)
    for column, kind in effective.policy.indexes.items():
        if column not in schema.names:
            result.skipped[column] = "no such column"
            continue
        unsuitable_kind = unsuitable(kind, schema.field(column).type)
        if unsuitable_kind is not None:
            result.skipped[column] = unsuitable_kind
            continue
        have = by_name.get(index_name(column))
        if have is None or have.kind != kind:
            result.build.append((column, kind))
    rebuilt = {index_name(c) for c, _ in result.build}
    result.refresh = [i.name for i in existing if i.lagging and i.name not in rebuilt]
    return result


def build_indexes(
    catalog: Catalog, name: str, *, actor: str | None = None, run_id: str | None = None
) -> IndexOutcome:
    """Bring ``name``'s indexes up to its policy and its data: one commit per build or rebuild,
    then one refresh commit for whatever else lags."""
    todo = plan(catalog, name)
    version = catalog.reads.open_table(name).version
    outcome = IndexOutcome(name, "nothing-to-do", version, skipped=todo.skipped, policy_source=todo.source)
    for column, kind in todo.build:
        result = catalog.indexes.create_index(
            name, column, kind, replace=True, by=Provenance(actor=actor, run_id=run_id)
        )
        outcome.built.append(index_name(column))
        outcome.version = result.version
        outcome.commit_ids.append(result.commit_id or "")
    if todo.refresh:
        result = catalog.indexes.refresh_indexes(
            name, todo.refresh, by=Provenance(actor=actor, run_id=run_id)
        )
        if result.status == "committed":
            outcome.refreshed = list(todo.refresh)
            outcome.version = result.version
            outcome.commit_ids.append(result.commit_id or "")
    if outcome.built or outcome.refreshed:
        outcome.status = "committed"
    return outcome


def lag_report(catalog: Catalog, name: str) -> dict[str, Any]:
    """What the index check reports: indexes behind the data and policy indexes not built."""
    todo = plan(catalog, name)
    return {
        "table": name,
        "lagging": {
            i.name: {"fragments_unindexed": i.fragments_unindexed, "rows_unindexed": i.rows_unindexed}
            for i in todo.indexes
            if i.lagging
        },
        "missing": {column: kind for column, kind in todo.build},
        "skipped": todo.skipped,
        "indexes": [i.to_dict() for i in todo.indexes],
        "policy_source": todo.source or "(platform defaults)",
    }

"""The commit log names who acted: every governance change has its entry, and every commit a
governance user can cause, through the catalog or a pylance client on its Lance Namespace,
names the acting identity (a signed-in user, or the local principal's actor setting)."""

from __future__ import annotations

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.policies import parse_assignments
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform_tests.catalog.conftest import Lake, rows

T = "p.w.ns.t"


def test_every_governance_change_is_logged(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.containers.set_protected(T)
    c.containers.set_protected(T, False)
    c.policies.set_policy("p.w.ns", {"retain_versions": 2})
    c.trash.drop_table(T)
    c.trash.undrop_table(T)
    c.access.add_user("cy", project="p", role="reader", password="long enough pw")
    ops = [(e.target, e.operation) for e in c.reads.log("p")]
    for expected in [
        ("p", "create project"),
        ("p.w", "create warehouse"),
        ("p.w.ns", "create namespace"),
        (T, "create"),
        (T, "protect"),
        (T, "unprotect"),
        ("p.w.ns", "policy set"),
        (T, "drop"),
        (T, "undrop"),
        ("p", "user add"),
    ]:
        assert expected in ops
    assert all(e.actor for e in c.reads.log("p"))


def _every_kind_of_commit(c: Catalog, who: Principal | None, *, with_project: bool) -> None:
    """One of each commit kind a governance user can cause, all acting as ``who``."""
    if with_project:
        c.containers.create_project("q", by=Provenance(principal=who))
        c.containers.drop_project("q", by=Provenance(principal=who))
    c.containers.create_warehouse("p.w3", by=Provenance(principal=who))
    c.policies.set_policy("p.w3", {"retain_versions": 2}, by=Provenance(principal=who))
    c.containers.set_protected("p.w3", by=Provenance(principal=who))
    c.containers.set_protected("p.w3", False, by=Provenance(principal=who))
    c.containers.drop_warehouse("p.w3", by=Provenance(principal=who))
    c.containers.create_namespace("p.w.gov", by=Provenance(principal=who))
    c.tables.create_table("p.w.gov.t", rows([1]), by=Provenance(principal=who))
    c.containers.set_protected("p.w.gov.t", by=Provenance(principal=who))
    c.containers.set_protected("p.w.gov.t", False, by=Provenance(principal=who))
    c.policies.set_policy(
        "p.w.gov.t", parse_assignments(["trash_grace=1d", "retain_versions=3"]), by=Provenance(principal=who)
    )
    c.policies.unset_policy("p.w.gov.t", ["trash_grace"], by=Provenance(principal=who))
    c.policies.delete_policy("p.w.gov.t", by=Provenance(principal=who))
    c.trash.drop_table("p.w.gov.t", by=Provenance(principal=who))
    c.trash.undrop_table("p.w.gov.t", by=Provenance(principal=who))
    c.cascade.drop_namespace("p.w.gov", cascade=True, by=Provenance(principal=who))
    c.trash.undrop_namespace("p.w.gov", by=Provenance(principal=who))
    c.cascade.drop_namespace("p.w.gov", cascade=True, by=Provenance(principal=who))
    deadline = max(r.expires_at_ms for r in c.trash.list_trash("p.w.gov", by=Provenance(principal=who)))
    assert c.trash.expire_trash(now_ms=deadline, by=Provenance(principal=who))
    c.trash.expire_trash(
        now_ms=deadline, by=Provenance(principal=who)
    )  # the namespace record, once its tables are gone
    c.access.add_user(
        "cy", project="p", role="reader", password="long enough pw", by=Provenance(principal=who)
    )
    c.access.remove_user("cy", by=Provenance(principal=who))
    record, _ = c.access.create_token("bot", project="p", role="reader", by=Provenance(principal=who))
    c.access.revoke_token(record.token_id, by=Provenance(principal=who))


@pytest.mark.parametrize("identity", ["local principal with an actor setting", "signed-in user"])
def test_every_commit_names_the_acting_identity(lake: Lake, identity: str) -> None:
    if identity == "signed-in user":
        catalog, who, expected = lake.catalog, Principal("olga", "user", "p", "admin"), "olga"
    else:
        catalog = Catalog(lake.settings.model_copy(update={"actor": "alice"}))
        who, expected = None, "alice"
    before = {e.commit_id for e in lake.catalog.reads.log()}
    try:
        _every_kind_of_commit(catalog, who, with_project=who is None)
    finally:
        if catalog is not lake.catalog:
            catalog.close()
    new = [e for e in lake.catalog.reads.log() if e.commit_id not in before]
    operations = {e.operation for e in new}
    assert {
        "create warehouse",
        "protect",
        "unprotect",
        "policy set",
        "policy unset",
        "policy delete",
        "drop warehouse",
        "create namespace",
        "create",
        "drop",
        "undrop",
        "drop namespace cascade",
        "drop namespace",
        "undrop namespace",
        "undrop namespace cascade",
        "purge",
        "purge namespace",
        "user add",
        "user remove",
        "token create",
        "token revoke",
    } <= operations
    assert {(e.operation, e.actor) for e in new if e.actor != expected} == set()
    assert {r.dropped_by for r in lake.catalog.trash.list_trash()} <= {expected}


def test_pylance_commits_name_the_acting_identity(lake: Lake) -> None:
    """Commits a pylance client makes through the catalog's namespace carry the same actor."""
    import lance

    from lake_platform.catalog.pylance_namespace import LakeNamespace
    from lake_platform_tests.catalog.conftest import EVENTS, events, storage_options_of

    alice = Catalog(lake.settings.model_copy(update={"actor": "alice"}))
    try:
        lance.write_dataset(
            events([1]),
            namespace_client=LakeNamespace(alice),
            table_id=EVENTS,
            mode="create",
            storage_options=storage_options_of(lake),
        )
    finally:
        alice.close()
    olga = Principal("olga", "user", "p", "writer")
    lance.write_dataset(
        events([2]),
        namespace_client=LakeNamespace(lake.catalog, olga),
        table_id=EVENTS,
        mode="append",
        storage_options=storage_options_of(lake),
    )
    assert [e.actor for e in lake.catalog.reads.history(".".join(EVENTS)) if e.to_version] == [
        "alice",
        "olga",
    ]

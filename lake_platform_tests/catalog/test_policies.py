"""Policies belong to the object they were set on: they die with its drop, come back with its
undrop, and never govern a later object of the same name. ``unset`` and ``delete`` are commits."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.policies import KEYS, Policy, PolicyRecord, parse_assignments
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    InvalidInput,
    InvalidPolicyValue,
    NamespaceNotFound,
    PermissionDenied,
    PolicyNotFound,
)
from lake_platform.registry import keys
from lake_platform.registry.store import ABSENT, Put
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state
from lake_platform_tests.catalog.registry_calls import RegistryCalls

T = "p.w.ns.t"
WRITER = Principal("will", "user", "p", "writer")


def files(lake: Lake, location: str) -> list[Any]:
    return list(engine.list_files(location, lake.settings.storage_options(location)))


def test_a_dropped_tables_policy_does_not_govern_its_replacement(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.policies.set_policy(T, parse_assignments(["trash_grace=0s"]))
    c.trash.drop_table(T)  # destroyed at once: that is what this incarnation's policy said
    c.tables.create_table(T, rows([2]))
    assert c.policies.effective_policy(T).source is None
    location = c.reads.open_table(T).record.location
    c.trash.drop_table(T)  # the default grace applies: the data must survive in the trash
    assert files(lake, location) and [r.target for r in c.trash.list_trash(T)] == [T]
    c.trash.undrop_table(T)
    assert ids_of(c.reads.open_table(T)) == [2]


def test_undrop_brings_the_tables_policy_back_even_under_another_name(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.policies.set_policy(T, {"retain_versions": 3})
    c.trash.drop_table(T)
    c.tables.create_table(T, rows([2]))
    c.policies.set_policy(T, {"retain_versions": 4})
    c.trash.drop_table(T)
    first, second = [r.table.incarnation for r in c.trash.list_trash(T) if r.table]  # type: ignore[union-attr]
    c.trash.undrop_table(T, incarnation=first)
    assert (c.policies.effective_policy(T).source, c.policies.effective_policy(T).policy.retain_versions) == (
        T,
        3,
    )
    c.trash.undrop_table(T, as_name="p.w.ns.t2", incarnation=second)
    assert c.policies.effective_policy("p.w.ns.t2").policy.retain_versions == 4
    assert c.policies.effective_policy(T).policy.retain_versions == 3


def test_container_policies_die_with_the_container(lake: Lake) -> None:
    c = lake.catalog
    c.containers.create_warehouse("p.w2")
    c.containers.create_namespace("p.w2.ns")
    for scope in ("p.w2", "p.w2.ns"):
        c.policies.set_policy(scope, parse_assignments(["trash_grace=0s"]))
    c.cascade.drop_namespace("p.w2.ns")
    c.containers.drop_warehouse("p.w2")
    c.containers.create_warehouse("p.w2")
    c.containers.create_namespace("p.w2.ns")
    assert c.policies.effective_policy("p.w2.ns").source is None
    c.containers.create_project("q")
    c.policies.set_policy("q", {"retain_versions": 2})
    c.containers.drop_project("q")
    c.containers.create_project("q")
    assert c.policies.effective_policy("q").source is None


def test_cascade_keeps_subtree_policies_for_undrop_only(lake: Lake) -> None:
    c = lake.catalog
    c.containers.create_namespace("p.w.ns.sub")
    c.tables.create_table("p.w.ns.sub.t", rows([1]))
    c.policies.set_policy("p.w.ns", {"retain_versions": 5})
    c.policies.set_policy("p.w.ns.sub", {"retain_versions": 6})
    c.policies.set_policy("p.w.ns.sub.t", {"retain_versions": 7})
    c.cascade.drop_namespace("p.w.ns", cascade=True)
    c.containers.create_namespace("p.w.ns")
    c.containers.create_namespace("p.w.ns.sub")
    assert c.policies.effective_policy("p.w.ns.sub").source is None  # a new namespace inherits nothing
    c.cascade.drop_namespace("p.w.ns.sub")
    c.cascade.drop_namespace("p.w.ns")
    c.trash.undrop_namespace("p.w.ns")
    assert [
        c.policies.effective_policy(s).policy.retain_versions
        for s in ("p.w.ns", "p.w.ns.sub", "p.w.ns.sub.t")
    ] == [5, 6, 7]


def test_unset_resets_fields_and_delete_removes_the_record(lake: Lake) -> None:
    c = lake.catalog
    c.policies.set_policy("p.w", {"retain_versions": 2})
    c.policies.set_policy(
        "p.w.ns", parse_assignments(["retain_versions=3", "retention=1d", "trash_grace=1h"])
    )
    record = c.policies.unset_policy("p.w.ns", ["retention", "trash_grace"])
    assert (
        record.policy.retain_versions,
        record.policy.retention_seconds,
        record.policy.trash_grace_seconds,
    ) == (3, 7 * 86400, 7 * 86400)
    assert c.policies.effective_policy("p.w.ns").source == "p.w.ns"  # the record still wins, whole
    c.policies.delete_policy("p.w.ns")
    eff = c.policies.effective_policy("p.w.ns")
    assert (eff.source, eff.policy.retain_versions) == ("p.w", 2)
    ops = [(e.operation, e.detail) for e in c.reads.history("p.w.ns")]
    assert ("policy unset", {"fields": ["retention", "trash_grace"]}) in ops and ("policy delete", {}) in ops


def test_delete_removes_a_record_whose_object_is_gone(lake: Lake) -> None:
    """A record left behind by an older release (before policies died with their table)."""
    c = lake.catalog
    stale = PolicyRecord(scope="p.w.ns.gone", policy=Policy(trash_grace_seconds=0))
    c.store.transact([Put(keys.policy("p.w.ns.gone"), stale.encode(), ABSENT)])
    c.policies.delete_policy("p.w.ns.gone")
    assert c.store.get(keys.policy("p.w.ns.gone")) is None
    assert c.reads.history("p.w.ns.gone")[-1].operation == "policy delete"
    with pytest.raises(PolicyNotFound):
        c.policies.delete_policy("p.w.ns.gone")


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.policies.unset_policy("p.w", ["nope"]), InvalidInput),
        (lambda c: c.policies.unset_policy("p.w", []), InvalidInput),
        (lambda c: c.policies.unset_policy("p.w.ns", ["retention"]), PolicyNotFound),
        (lambda c: c.policies.delete_policy("p.w.ns"), PolicyNotFound),
        (lambda c: c.policies.delete_policy("P.w"), InvalidInput),
        (lambda c: c.policies.unset_policy("p.w.zz", ["retention"]), NamespaceNotFound),
        (
            lambda c: c.policies.unset_policy("p.w", ["retention"], by=Provenance(principal=WRITER)),
            PermissionDenied,
        ),
        (lambda c: c.policies.delete_policy("p.w", by=Provenance(principal=WRITER)), PermissionDenied),
    ],
)
def test_bad_unset_and_delete_change_nothing(lake: Lake, call: Any, error: type[Exception]) -> None:
    lake.catalog.policies.set_policy("p.w", {"retain_versions": 2})
    before = state(lake), list(lake.catalog.store.scan_prefix("pol/"))
    with pytest.raises(error):
        call(lake.catalog)
    assert (state(lake), list(lake.catalog.store.scan_prefix("pol/"))) == before


def test_maintenance_intervals_resolve_whole_from_the_most_specific_record(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.policies.set_policy("p", parse_assignments(["cleanup_interval=2h"]))
    c.policies.set_policy("p.w.ns", parse_assignments(["orphan_scan_interval=3h"]))
    eff = c.policies.effective_policy(T)
    # The namespace's record wins whole: its cleanup interval is the default, not the project's.
    assert (eff.source, eff.policy.orphan_scan_interval, eff.policy.cleanup_interval) == (
        "p.w.ns",
        timedelta(hours=3),
        timedelta(days=1),
    )
    c.policies.set_policy(T, parse_assignments(["cleanup_interval=90m"]))
    eff = c.policies.effective_policy(T)
    assert (eff.source, eff.policy.cleanup_interval, eff.policy.orphan_scan_interval) == (
        T,
        timedelta(minutes=90),
        timedelta(days=7),
    )
    assert eff.to_dict()["cleanup_interval_seconds"] == 5400
    assert c.policies.effective_policy("p.w").policy.cleanup_interval == timedelta(hours=2)


@pytest.mark.parametrize(
    "pair, key",
    [
        ("cleanup_interval=30s", "cleanup_interval"),
        ("orphan_scan_interval=59m", "orphan_scan_interval"),
    ],
)
def test_a_maintenance_interval_below_its_floor_is_refused_and_changes_nothing(
    lake: Lake, pair: str, key: str
) -> None:
    before = state(lake), list(lake.catalog.store.scan_prefix("pol/"))
    with pytest.raises(InvalidPolicyValue) as raised:
        lake.catalog.policies.set_policy("p.w", parse_assignments([pair]))
    assert raised.value.key == key and "at least" in str(raised.value)
    with pytest.raises(InvalidPolicyValue):
        lake.catalog.policies.set_policy("p.w", {KEYS[key]: float("inf")})
    assert (state(lake), list(lake.catalog.store.scan_prefix("pol/"))) == before


@pytest.mark.parametrize(
    "values, named",
    [
        ({"trash_grace": "0s"}, "trash_grace"),  # a `lake policy set` key, not a Policy field
        ({"retain_versions": 3, "nope": 1}, "nope"),
        ([("retain_versions", 3)], "mapping"),
    ],
)
def test_set_policy_refuses_what_is_not_a_policy_field_and_writes_nothing(
    lake: Lake, values: Any, named: str
) -> None:
    """Before, unknown keys were dropped silently: a record of platform defaults was written at
    the table (winning whole over its namespace's record) and logged; a list failed TypeError."""
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.policies.set_policy("p.w.ns", {"retain_versions": 2})
    before = state(lake)
    with pytest.raises(InvalidInput, match=named):
        c.policies.set_policy(T, values)
    assert state(lake) == before
    assert c.policies.effective_policy(T).source == "p.w.ns"


@pytest.mark.parametrize(
    "pairs, values",
    [
        # Durations past what a timedelta holds were OverflowError, a digit Python reads as one
        # but int() does not ValueError: neither typed, from `lake policy set` too.
        (["retention=99999999999d"], None),
        (["trash_grace=99999999999999w"], None),
        (["orphan_min_age=999999999999d"], None),
        (["retention=²d"], None),
        (["target_rows_per_fragment=100000000000000000000000"], None),
        # Set through the Python API, these landed: an infinite duration made the record
        # unreadable ("Internal"), so every drop and maintenance run under it failed, and a
        # finite one past a timedelta's range failed each use of it with OverflowError.
        (None, {"retention_seconds": float("inf")}),
        (None, {"trash_grace_seconds": float("inf")}),
        (None, {"orphan_min_age_seconds": float("inf")}),
        (None, {"trash_grace_seconds": 1e300}),
        (None, {"retention_seconds": 1e15}),
        (None, {"target_rows_per_fragment": 2**80}),
    ],
)
def test_out_of_range_values_are_typed_errors_and_change_nothing(
    lake: Lake, pairs: list[str] | None, values: dict[str, Any] | None
) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.policies.set_policy("p.w.ns", {"retain_versions": 2})
    before = state(lake)
    with pytest.raises(InvalidInput):  # InvalidPolicyValue is one
        c.policies.set_policy(T, parse_assignments(pairs) if pairs is not None else values or {})
    assert state(lake) == before
    effective = c.policies.effective_policy(T)
    assert effective.source == "p.w.ns" and effective.policy.trash_grace == timedelta(days=7)


def test_the_longest_durations_allowed_are_usable() -> None:
    longest = parse_assignments([f"{k}=365000d" for k in ("retention", "trash_grace", "orphan_min_age")])
    policy = Policy(**longest)
    assert policy.retention == policy.trash_grace == policy.orphan_min_age == timedelta(days=365_000)
    now = datetime.now(timezone.utc)
    assert now - policy.retention < now < now + policy.retention  # neither end overflows


def test_a_containers_drop_reads_no_other_containers_policies(lake: Lake) -> None:
    # Dropping namespace ns3 swept pol/p.w.ns3: the policy records of ns30, ns3x and every
    # table in them too, read and dropped.
    c = lake.catalog
    for ns in ("p.w.ns3", "p.w.ns30", "p.w.ns3x"):
        c.containers.create_namespace(ns)
        c.policies.set_policy(ns, parse_assignments(["retain_versions=3"]))
    calls = RegistryCalls(c.store)
    with Catalog(lake.settings, calls) as counted:
        counted.cascade.drop_namespace("p.w.ns3")
    policy_reads = [k for m, k in calls.reads() if m == "scan_prefix" and k[0].startswith("pol/")]
    assert policy_reads == [[keys.policy("p.w.ns3.")]]
    assert c.policies.effective_policy("p.w.ns30").source == "p.w.ns30"

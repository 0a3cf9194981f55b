"""Maintenance policies: attached at project, warehouse, namespace or table; winner takes all.

The effective policy of a table is the most specific policy record that exists on the path
table → namespaces (deepest first) → warehouse → project; that one record supplies every field
(unset fields take the defaults, not a less specific record's values). The answer always says
which record won.

A policy record belongs to the object it was set on, not to its name: a drop deletes it in the
same registry transaction that removes the object (a trash record keeps a copy, so an undrop
brings it back), so a later object of the same name never inherits it. Changes are refused
while the object (or a table's namespace) is being dropped, so a drop's copy is the last word.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from lake_platform.catalog.context import CatalogContext, Log
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.engine.indexes import normalize_kind
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    InvalidPolicyValue,
    NamespaceNotFound,
    PolicyNotFound,
    TableNotFound,
)
from lake_platform.naming import TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import (
    NamespaceRecord,
    ProjectRecord,
    Record,
    WarehouseRecord,
    decode,
    now_ms,
)
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

MIN_ORPHAN_AGE = timedelta(hours=1)
#: The shortest maintenance intervals a policy may ask for: a cleanup takes the table's lease,
#: an orphan scan lists its whole folder.
MIN_CLEANUP_INTERVAL = timedelta(minutes=1)
MIN_ORPHAN_SCAN_INTERVAL = timedelta(hours=1)
#: The longest duration a policy may hold (1,000 years: "keep" in practice). Much longer ones
#: broke where they are used (a datetime ends at year 1); a stored record up to this bound,
#: which worked before the bound existed, stays readable.
MAX_DURATION = timedelta(days=365_000)
_MAX_SECONDS = MAX_DURATION.total_seconds()
#: Lance addresses a fragment's rows with 32 bits; a larger compaction target overflowed in it.
MAX_ROWS_PER_FRAGMENT = 2**32


class Policy(Record):
    """Every field has the platform default; a record stores only a full policy."""

    retain_versions: int = Field(10, ge=1, le=100_000)
    retention_seconds: float = Field(7 * 86400, ge=0, le=_MAX_SECONDS)
    compact_enabled: bool = True
    compact_min_fragments: int = Field(16, ge=2, le=1_000_000)
    target_rows_per_fragment: int = Field(1_048_576, ge=1, le=MAX_ROWS_PER_FRAGMENT)
    trash_grace_seconds: float = Field(7 * 86400, ge=0, le=_MAX_SECONDS)
    orphan_min_age_seconds: float = Field(7 * 86400, le=_MAX_SECONDS)
    #: Scalar indexes the index maintenance keeps built and current: column → kind (BTREE,
    #: BITMAP, ZONEMAP, BLOOMFILTER, INVERTED, NGRAM, LABEL_LIST). ``lake policy set`` takes
    #: ``indexes=id:btree,k:bitmap`` (``indexes=`` for none).
    indexes: dict[str, str] = Field(default_factory=dict)
    #: The Flight replicas' snapshot cache: ``hot`` keeps a read snapshot in memory from its
    #: first query, ``auto`` once it is read again and again, ``off`` never.
    cache: Literal["auto", "hot", "off"] = "auto"
    #: What a write may do to the table's schema (catalog/evolution.py): nothing, add nullable
    #: columns, or also widen a column's type. Never narrow, parse or drop.
    schema_evolution: Literal["strict", "add_columns", "widen"] = "strict"
    #: How long after its last version cleanup (or its creation) a table is cleaned up again,
    #: and likewise for its orphan scan: the interval sensors (defs/maintenance_intervals.py)
    #: request a run only for tables whose interval has elapsed.
    cleanup_interval_seconds: float = Field(86400, le=_MAX_SECONDS)
    orphan_scan_interval_seconds: float = Field(7 * 86400, le=_MAX_SECONDS)

    @field_validator("indexes", mode="before")
    @classmethod
    def _index_specs(cls, value: Any) -> dict[str, str]:
        if isinstance(value, str):
            pairs = [p.strip() for p in value.split(",") if p.strip()]
            value = {}
            for pair in pairs:
                column, sep, kind = pair.partition(":")
                if not sep or not column.strip():
                    raise ValueError(f"{pair!r} is not column:kind (e.g. id:btree)")
                if column.strip() in value:
                    raise ValueError(f"column {column.strip()!r} is named twice")
                value[column.strip()] = kind
        if not isinstance(value, dict):
            raise ValueError("give column:kind pairs, e.g. id:btree,k:bitmap")
        specs = {}
        for column, kind in value.items():
            if not isinstance(column, str) or not column or column != column.strip() or "," in column:
                raise ValueError(f"invalid column name {column!r}")
            specs[column] = normalize_kind(kind)
        return specs

    @field_validator("orphan_min_age_seconds")
    @classmethod
    def _orphan_floor(cls, value: float) -> float:
        if value < MIN_ORPHAN_AGE.total_seconds():
            raise ValueError("orphan_min_age must be at least 1h")
        return value

    @field_validator("cleanup_interval_seconds")
    @classmethod
    def _cleanup_floor(cls, value: float) -> float:
        if not (math.isfinite(value) and value >= MIN_CLEANUP_INTERVAL.total_seconds()):
            raise ValueError("cleanup_interval must be at least 1m")
        return value

    @field_validator("orphan_scan_interval_seconds")
    @classmethod
    def _orphan_scan_floor(cls, value: float) -> float:
        if not (math.isfinite(value) and value >= MIN_ORPHAN_SCAN_INTERVAL.total_seconds()):
            raise ValueError("orphan_scan_interval must be at least 1h")
        return value

    @property
    def cleanup_interval(self) -> timedelta:
        return timedelta(seconds=self.cleanup_interval_seconds)

    @property
    def orphan_scan_interval(self) -> timedelta:
        return timedelta(seconds=self.orphan_scan_interval_seconds)

    @property
    def retention(self) -> timedelta:
        return timedelta(seconds=self.retention_seconds)

    @property
    def trash_grace(self) -> timedelta:
        return timedelta(seconds=self.trash_grace_seconds)

    @property
    def orphan_min_age(self) -> timedelta:
        return timedelta(seconds=self.orphan_min_age_seconds)


class PolicyRecord(Record):
    scope: str
    policy: Policy
    set_at_ms: int = Field(default_factory=now_ms)
    set_by: str = ""


@dataclass(frozen=True)
class EffectivePolicy:
    policy: Policy
    #: The dotted scope of the record that won, or None when the platform defaults apply.
    source: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source or "(platform defaults)",
            **self.policy.model_dump(exclude={"record_version"}),
        }


#: ``lake policy set`` keys → Policy fields; durations accept 90m / 12h / 7d.
KEYS = {
    "retain_versions": "retain_versions",
    "retention": "retention_seconds",
    "compact_enabled": "compact_enabled",
    "compact_min_fragments": "compact_min_fragments",
    "target_rows_per_fragment": "target_rows_per_fragment",
    "trash_grace": "trash_grace_seconds",
    "orphan_min_age": "orphan_min_age_seconds",
    "indexes": "indexes",
    "cache": "cache",
    "schema_evolution": "schema_evolution",
    "cleanup_interval": "cleanup_interval_seconds",
    "orphan_scan_interval": "orphan_scan_interval_seconds",
}
_DURATIONS = {"retention", "trash_grace", "orphan_min_age", "cleanup_interval", "orphan_scan_interval"}


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """``["retain_versions=5", "retention=3d"]`` → Policy field values; InvalidInput on anything else."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in KEYS:
            raise InvalidInput(
                f"invalid policy setting {pair!r}: use key=value with key one of {', '.join(KEYS)}"
            )
        values[KEYS[key]] = parse_duration(raw).total_seconds() if key in _DURATIONS else raw
    return values


def build_policy(values: dict[str, Any]) -> Policy:
    """A full policy from field values; InvalidPolicyValue naming the first key out of range."""
    try:
        return Policy(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else "policy"
        name = next((k for k, v in KEYS.items() if v == field), field)
        raise InvalidPolicyValue(
            f"invalid policy value for {name}: {first['msg'].removeprefix('Value error, ')}", name
        ) from None


def parse_duration(text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower() if isinstance(text, str) else ""
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if len(text) < 2 or text[-1] not in units or not (text[:-1].isascii() and text[:-1].isdigit()):
        raise InvalidInput(f"invalid duration {text!r}: use a whole number and a unit, e.g. 90m, 12h, 7d, 0s")
    seconds = int(text[:-1]) * units[text[-1]]
    if seconds > _MAX_SECONDS:
        raise InvalidInput(f"duration {text!r} is too long: at most {MAX_DURATION.days}d")
    return timedelta(seconds=seconds)


def policy_fields(names: Sequence[str]) -> list[str]:
    """``lake policy unset`` keys, checked and de-duplicated in order; InvalidInput on anything else."""
    if isinstance(names, str) or not names:
        raise InvalidInput(f"name at least one policy key to unset: {', '.join(KEYS)}")
    unknown = [n for n in names if n not in KEYS]
    if unknown:
        raise InvalidInput(f"unknown policy key {unknown[0]!r}: use one of {', '.join(KEYS)}")
    return list(dict.fromkeys(names))


def _check_fields(values: object) -> None:
    """InvalidInput unless ``values`` maps Policy field names (the record would ignore others,
    and a record of defaults would be written in their place)."""
    if not isinstance(values, Mapping):
        raise InvalidInput(f"policy values must be a mapping of field to value, not {type(values).__name__}")
    unknown = [k for k in values if k not in KEYS.values()]
    if unknown:
        raise InvalidInput(
            f"unknown policy field {unknown[0]!r}: use one of {', '.join(KEYS.values())} "
            "(parse_assignments reads `lake policy set` keys)"
        )


def _scope_shape(scope: str) -> None:
    """Validate a dotted scope's shape without any I/O."""
    parts = scope.split(".") if isinstance(scope, str) else []
    if not parts:
        raise InvalidInput("a policy scope is a dotted name: project, warehouse, namespace or table")
    for part in parts:
        check_segment(part, "scope")


_CONTAINERS: dict[str, type[Record]] = {
    "project": ProjectRecord,
    "warehouse": WarehouseRecord,
    "namespace": NamespaceRecord,
}


class Policies:
    """Policy records on the registry."""

    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx

    def set_policy(
        self,
        scope: str,
        values: dict[str, Any],
        *,
        by: Provenance = UNSTATED,
    ) -> PolicyRecord:
        """Merge ``values`` (Policy field names: ``parse_assignments`` turns ``lake policy set``
        keys into them) into the policy record at ``scope`` (created with defaults if absent)."""
        who = self.ctx.who(by.principal)
        owner = self._policy_owner(scope, who)
        who.require(scope.split(".")[0], "admin", f"set policies on {scope}")
        if not values:
            raise InvalidInput("give at least one key=value")
        _check_fields(values)
        item = self.ctx.store.get(keys.policy(scope))
        current = decode(PolicyRecord, item.value, item.key).policy if item else Policy()
        merged = build_policy({**current.model_dump(exclude={"record_version"}), **values})
        name = self.ctx.actor(by.actor, who)
        record = PolicyRecord(scope=scope, policy=merged, set_by=name)
        self._commit_policy(
            scope,
            [Put(keys.policy(scope), record.encode(), item.revision if item else ABSENT), *owner],
            Log(scope, "policy set", name, detail=dict(values)),
        )
        return record

    def unset_policy(
        self,
        scope: str,
        fields: Sequence[str],
        *,
        by: Provenance = UNSTATED,
    ) -> PolicyRecord:
        """Reset ``fields`` (``lake policy set`` keys) of the record at ``scope`` to the platform
        defaults. The record stays and still wins whole; ``delete_policy`` removes it."""
        who = self.ctx.who(by.principal)
        names = policy_fields(fields)
        owner = self._policy_owner(scope, who)
        who.require(scope.split(".")[0], "admin", f"unset policies on {scope}")
        item = self._policy_record(scope)
        current = decode(PolicyRecord, item.value, item.key).policy
        defaults = Policy()
        reset = current.model_copy(update={KEYS[n]: getattr(defaults, KEYS[n]) for n in names})
        name = self.ctx.actor(by.actor, who)
        record = PolicyRecord(scope=scope, policy=reset, set_by=name)
        self._commit_policy(
            scope,
            [Put(item.key, record.encode(), item.revision), *owner],
            Log(scope, "policy unset", name, detail={"fields": names}),
        )
        return record

    def delete_policy(self, scope: str, *, by: Provenance = UNSTATED) -> None:
        """Remove the record at ``scope``: the next less specific record (or the defaults) applies.

        The object need not exist any more, so records left behind by older releases can be removed."""
        who = self.ctx.who(by.principal)
        _scope_shape(scope)
        who.require(scope.split(".")[0], "admin", f"delete policies on {scope}")
        owner = self._policy_owner(scope, who, missing_ok=True)
        item = self._policy_record(scope)
        self._commit_policy(
            scope,
            [Delete(item.key, item.revision), *owner],
            Log(scope, "policy delete", self.ctx.actor(by.actor, who)),
        )

    def effective_policy(self, scope: str) -> EffectivePolicy:
        """The most specific policy record on the path from ``scope`` up to its project."""
        self.ctx.scope(scope, who=None)  # validates shape and existence
        parts = scope.split(".")
        for depth in range(len(parts), 0, -1):
            candidate = ".".join(parts[:depth])
            item = self.ctx.store.get(keys.policy(candidate))
            if item is not None:
                return EffectivePolicy(decode(PolicyRecord, item.value, item.key).policy, candidate)
        return EffectivePolicy(Policy(), None)

    # -- the parts drops and undrops use ---------------------------------------------------------

    def detach(self, scope: str) -> tuple[list[Op], dict[str, Any]]:
        """Ops that take the record at ``scope`` away with its object (or, when there is none,
        make sure none lands meanwhile), and the copy a trash record keeps for an undrop."""
        item = self.ctx.store.get(keys.policy(scope))
        if item is None:
            return [Check(keys.policy(scope), ABSENT)], {}
        record = decode(PolicyRecord, item.value, item.key)
        return [Delete(item.key, item.revision)], {scope: record.model_dump(mode="json")}

    def sweep(self, scope: str) -> list[Op]:
        """Delete every record at or under ``scope``: run when the container itself goes, after
        everything in it has gone (anything left there belonged to nothing that still exists)."""
        # Its own record, then those under it (``scope.``): never a sibling's sharing its first
        # letters (``ns30`` for ``ns3``).
        own = self.ctx.store.get(keys.policy(scope))
        found = [*([own] if own is not None else []), *self.ctx.store.scan_prefix(keys.policy(scope + "."))]
        # Deepest first, so the container's own record lands in the last batch, with its removal.
        return [Delete(i.key, i.revision) for i in reversed(found)]

    def restore(self, kept: dict[str, Any], source: str, target: str) -> list[Op]:
        """Ops that put a trash record's copy of ``source``'s policy back, at ``target``."""
        if source not in kept:
            return []
        record = PolicyRecord.model_validate(kept[source]).model_copy(update={"scope": target})
        item = self.ctx.store.get(keys.policy(target))
        return [Put(keys.policy(target), record.encode(), item.revision if item else ABSENT)]

    # -- internals ------------------------------------------------------------------------------

    def _policy_owner(self, scope: str, who: Principal, *, missing_ok: bool = False) -> list[Op]:
        """The object at ``scope`` must exist (unless ``missing_ok``) and not be being dropped;
        returns the conditions that keep it so until the policy change lands (a drop marks it
        first, then copies its policy)."""
        try:
            kind, key = self.ctx.scope(scope, who=who)
        except (TableNotFound, NamespaceNotFound):
            if missing_ok:
                return []
            raise
        item = self.ctx.store.get(key)
        if item is None:
            if missing_ok:
                return []
            raise NamespaceNotFound(f"{kind} {scope} does not exist")
        ops: list[Op] = [Check(key, item.revision)]
        if kind == "table":
            parent = self.ctx.require_parent(TableName.parse(scope), who=who)
            ops.append(Check(parent.key, parent.revision))
        elif getattr(decode(_CONTAINERS[kind], item.value, item.key), "state", "active") != "active":
            raise NamespaceNotFound(f"{kind} {scope} is being dropped")
        return ops

    def _policy_record(self, scope: str) -> Item:
        item = self.ctx.store.get(keys.policy(scope))
        if item is None:
            raise PolicyNotFound(f"no policy record at {scope}")
        return item

    def _commit_policy(self, scope: str, ops: list[Op], entry: Log) -> None:
        try:
            self.ctx.commit(ops, log=entry)
        except ConditionFailed:
            raise ConcurrentModification(
                f"{scope} or its policy changed meanwhile; nothing was changed"
            ) from None

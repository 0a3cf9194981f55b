"""Maintenance policies: attached at project, warehouse, namespace or table; winner takes all.

The effective policy of a table is the most specific policy record that exists on the path
table → namespaces (deepest first) → warehouse → project; that one record supplies every field
(unset fields take the defaults, not a less specific record's values). The answer always says
which record won.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import Field, ValidationError, field_validator

from lake_platform.errors import InvalidInput
from lake_platform.registry.records import Record, now_ms

MIN_ORPHAN_AGE = timedelta(hours=1)


class Policy(Record):
    """Every field has the platform default; a record stores only a full policy."""

    retain_versions: int = Field(10, ge=1, le=100_000)
    retention_seconds: float = Field(7 * 86400, ge=0)
    compact_enabled: bool = True
    compact_min_fragments: int = Field(16, ge=2, le=1_000_000)
    target_rows_per_fragment: int = Field(1_048_576, ge=1)
    trash_grace_seconds: float = Field(7 * 86400, ge=0)
    orphan_min_age_seconds: float = Field(7 * 86400)

    @field_validator("orphan_min_age_seconds")
    @classmethod
    def _orphan_floor(cls, value: float) -> float:
        if value < MIN_ORPHAN_AGE.total_seconds():
            raise ValueError("orphan_min_age must be at least 1h")
        return value

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
        return {"source": self.source or "(platform defaults)", **self.policy.model_dump(exclude={"record_version"})}


#: ``lake policy set`` keys → Policy fields; durations accept 90m / 12h / 7d.
KEYS = {
    "retain_versions": "retain_versions",
    "retention": "retention_seconds",
    "compact_enabled": "compact_enabled",
    "compact_min_fragments": "compact_min_fragments",
    "target_rows_per_fragment": "target_rows_per_fragment",
    "trash_grace": "trash_grace_seconds",
    "orphan_min_age": "orphan_min_age_seconds",
}
_DURATIONS = {"retention", "trash_grace", "orphan_min_age"}


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """``["retain_versions=5", "retention=3d"]`` → Policy field values; InvalidInput on anything else."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in KEYS:
            raise InvalidInput(f"invalid policy setting {pair!r}: use key=value with key one of {', '.join(KEYS)}")
        values[KEYS[key]] = parse_duration(raw).total_seconds() if key in _DURATIONS else raw
    return values


def build_policy(values: dict[str, Any]) -> Policy:
    try:
        return Policy(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else "policy"
        name = next((k for k, v in KEYS.items() if v == field), field)
        raise InvalidInput(f"invalid policy value for {name}: {first['msg'].removeprefix('Value error, ')}") from None


def parse_duration(text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower() if isinstance(text, str) else ""
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise InvalidInput(f"invalid duration {text!r}: use a whole number and a unit, e.g. 90m, 12h, 7d, 0s")
    return timedelta(seconds=int(text[:-1]) * units[text[-1]])


class PolicyMixin:
    """Policy records on the registry (mixin of Catalog)."""

    def set_policy(self, scope: str, values: dict[str, Any], *, principal: Any = None) -> PolicyRecord:
        """Merge ``values`` into the policy record at ``scope`` (created with defaults if absent)."""
        from lake_platform.registry import keys
        from lake_platform.registry.records import decode
        from lake_platform.registry.store import ABSENT, Check, Put

        who = self._who(principal)  # type: ignore[attr-defined]
        kind, key = self._scope(scope)  # type: ignore[attr-defined]
        project = scope.split(".")[0]
        who.require(project, "admin", f"set policies on {scope}")
        if not values:
            raise InvalidInput("give at least one key=value")
        item = self.store.get(keys.policy(scope))  # type: ignore[attr-defined]
        current = decode(PolicyRecord, item.value, item.key).policy if item else Policy()
        merged = build_policy({**current.model_dump(exclude={"record_version"}), **values})
        record = PolicyRecord(scope=scope, policy=merged, set_by=who.name)
        owner = self.store.get(key)  # type: ignore[attr-defined]
        if owner is None:
            raise InvalidInput(f"{kind} {scope} does not exist")
        ops = [Put(keys.policy(scope), record.encode(), item.revision if item else ABSENT),
               Check(key, owner.revision),
               *self._log_ops(scope, "policy set", who.name, detail={k: v for k, v in values.items()})]  # type: ignore[attr-defined]
        self.store.transact(ops)  # type: ignore[attr-defined]
        return record

    def effective_policy(self, scope: str) -> EffectivePolicy:
        """The most specific policy record on the path from ``scope`` up to its project."""
        from lake_platform.registry import keys
        from lake_platform.registry.records import decode

        self._scope(scope)  # type: ignore[attr-defined]  # validates shape and existence
        parts = scope.split(".")
        for depth in range(len(parts), 0, -1):
            candidate = ".".join(parts[:depth])
            item = self.store.get(keys.policy(candidate))  # type: ignore[attr-defined]
            if item is not None:
                return EffectivePolicy(decode(PolicyRecord, item.value, item.key).policy, candidate)
        return EffectivePolicy(Policy(), None)

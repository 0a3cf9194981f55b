"""The pass table: one row per check, and what it adds up to per operation."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from lake_platform.conformance.registry import Outcome


@dataclass(frozen=True)
class Result:
    operation_id: str
    aspect: str
    outcome: Outcome
    detail: str = ""


@dataclass
class Report:
    url: str
    namespace: list[str]
    results: list[Result] = field(default_factory=list)
    cleaned_up: bool = False
    leftovers: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counted = Counter(r.outcome for r in self.results)
        return {outcome.value: counted.get(outcome, 0) for outcome in Outcome}

    def operations(self) -> dict[str, Outcome]:
        """Each operation's outcome: fail if any check failed, else not supported if any check
        met Unsupported, else pass if any passed, else skipped."""
        by_op: dict[str, list[Outcome]] = {}
        for r in self.results:
            by_op.setdefault(r.operation_id, []).append(r.outcome)
        out = {}
        for op, outcomes in by_op.items():
            for outcome in (Outcome.FAIL, Outcome.UNSUPPORTED, Outcome.PASS):
                if outcome in outcomes:
                    out[op] = outcome
                    break
            else:
                out[op] = Outcome.SKIPPED
        return out

    @property
    def ok(self) -> bool:
        """No check failed and the kit left nothing behind."""
        return self.cleaned_up and not any(r.outcome is Outcome.FAIL for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        ops = Counter(self.operations().values())
        return {
            "url": self.url,
            "namespace": self.namespace,
            "checks": [asdict(r) | {"outcome": r.outcome.value} for r in self.results],
            "summary": self.counts(),
            "operations": {outcome.value: ops.get(outcome, 0) for outcome in Outcome},
            "cleaned_up": self.cleaned_up,
            "leftovers": self.leftovers,
        }


def summary_line(data: dict[str, Any]) -> str:
    ops, checks = data["operations"], data["summary"]
    tidy = "cleaned up" if data["cleaned_up"] else "left behind: " + ", ".join(data["leftovers"])
    return (
        f"operations: {ops['pass']} pass, {ops['fail']} fail, {ops['not supported']} not supported,"
        f" {ops['skipped']} skipped; checks: {checks['pass']} pass, {checks['fail']} fail,"
        f" {checks['not supported']} not supported, {checks['skipped']} skipped; {tidy}"
    )

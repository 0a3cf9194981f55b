"""What a reclaim run did, the same shape for the per-table reclaim (``orphans``) and the
warehouse folder reclaim (``orphan_folders``); each names its own subject."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class ReclaimOutcome:
    older_than_seconds: float
    deleted: list[dict[str, Any]] = field(default_factory=list)
    bytes_deleted: int = 0
    #: Candidates re-verification refused (changed, gone, younger, now known, in flight), with the reason.
    kept: list[dict[str, Any]] = field(default_factory=list)
    commit_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # The subject (the subclass's keyword-only field) leads the report, as it always has.
        data = asdict(self)
        subject = next(f.name for f in fields(self) if f.kw_only)
        return {subject: data.pop(subject), **data}

"""What catalog operations return: plain, typed, JSON-friendly."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal


@dataclass(frozen=True)
class CommitResult:
    commit_id: str
    table: str
    operation: str
    from_version: int | None
    to_version: int | None
    rows_added: int = 0
    bytes_added: int = 0
    #: True when the commit id had already landed (a retry): nothing was written this time.
    replayed: bool = False

    @classmethod
    def nothing(cls, commit_id: str, table: str, operation: str, version: int) -> CommitResult:
        """A write that had nothing to commit (no rows to append or to delete): no version is
        made, so the answer is the current one, from and to."""
        return cls(commit_id, table, operation, version, version)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class MaintenanceResult:
    table: str
    operation: str
    status: Literal["committed", "nothing-to-do", "skipped-stale"]
    version: int
    commit_id: str | None = None
    detail: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class TableInfo:
    name: str
    incarnation: str
    location: str
    engine: str
    current_version: int
    created_at_ms: int
    protected: bool
    rows: int | None = None
    fragments: int | None = None
    data_bytes: int | None = None
    schema: list[dict[str, object]] = field(default_factory=list)
    #: Scalar indexes of the current version and their coverage: Lance facts, so only with stats.
    indexes: list[dict[str, object]] | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class PlannedCompaction:
    table: str
    incarnation: str
    read_version: int
    tasks: tuple[str, ...]

"""One table's part of an atomic multi-table commit (``transaction``), from its recording to its
landing: what the transaction's steps (``transaction_ops``, ``transaction_unacquired``,
``staged_transaction``) pass between them. The part is a line of the table: main's, or a
branch's (``staged_transaction`` only: a client's staged manifest on the branch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lake_platform.registry import keys

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.evolution import SchemaChange
    from lake_platform.catalog.lease import Lease
    from lake_platform.catalog.namespace import BoundTableNamespace
    from lake_platform.catalog.pending import PendingCommit
    from lake_platform.naming import TableName
    from lake_platform.registry.records import TableRecord, VersionRecord
    from lake_platform.registry.store import Item


@dataclass
class TableWrite:
    """One table's part of a transaction, from its recording to its landing."""

    name: TableName
    mode: str
    data: pa.RecordBatchReader
    detail: dict[str, object]
    commit_id: str = ""
    record: TableRecord | None = None
    change: SchemaChange | None = None
    pending: PendingCommit | None = None
    ns: BoundTableNamespace | None = None
    lease: Lease | None = None
    staged: list[str] = field(default_factory=list)
    #: The table's record as the plan read it.
    table_item: Item | None = None
    #: An append's rows, read ahead when the transaction tries its leases unacquired.
    rows: list[pa.RecordBatch] | None = None
    #: Its current version's record, when staged under an unacquired lease (no settle).
    base: VersionRecord | None = None
    #: The branch whose line this write moves (its record, head and lease); None: main's.
    branch: str | None = None

    @property
    def line(self) -> str:
        """The line's name in the transaction: the table's, ``@<branch>`` added for a branch's."""
        return str(self.name) if self.branch is None else f"{self.name}@{self.branch}"

    @property
    def order(self) -> tuple[str, str]:
        """Where its lease is taken: by table name, main before its branches (as a publish)."""
        return str(self.name), self.branch or ""

    @property
    def head_key(self) -> str:
        """The registry key of the line's head: the table record, or the branch record."""
        return keys.table(self.name) if self.branch is None else keys.branch(self.name, self.branch)

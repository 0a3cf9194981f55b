"""The base of the suite's registry wrappers (counting, refusing, racing stores): ``inner``'s
limits and weights passed on, so the code under test packs its registry writes as it does on
the wrapped backend (``max_transact_ops``, ``max_transact_bytes``, ``op_bytes``,
``check_record``: DynamoDB's 99 items and 4 MB), and every call forwarded unless overridden."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from lake_platform.registry.store import Item, MetaStore, Op


class WrappedStore(MetaStore):
    def __init__(self, inner: MetaStore) -> None:
        self.inner, self.url, self.backend = inner, inner.url, inner.backend
        self.max_transact_ops = inner.max_transact_ops
        self.max_transact_bytes = inner.max_transact_bytes

    def get(self, key: str) -> Item | None:
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        return self.inner.get_many(keys)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        return self.inner.scan_prefix(prefix, start_after=start_after, limit=limit)

    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        return self.inner.scan_range(start, stop, start_after=start_after, limit=limit)

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        return self.inner.transact(ops)

    def op_bytes(self, op: Op) -> int:
        return self.inner.op_bytes(op)

    def check_record(self, key: str, value: bytes) -> None:
        self.inner.check_record(key, value)

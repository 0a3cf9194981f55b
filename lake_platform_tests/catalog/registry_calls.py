"""A registry that lists what is asked of it: tests count an operation's registry reads and
writes through ``Catalog(settings, RegistryCalls(store))`` (or a gate over it) instead of
patching the store's methods."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from lake_platform.registry.store import Item, MetaStore, Op
from lake_platform_tests.registry.wrapping import WrappedStore

READS = ("get", "get_many", "scan_prefix", "scan_range")


class RegistryCalls(WrappedStore):
    """Passes every call on to ``inner`` and lists it in ``calls``, in order, as (method, keys):
    ``get``, ``get_many`` (its keys), ``scan_prefix`` (the prefix), ``scan_range`` (its start and
    stop), ``transact`` (its ops' keys)
    and ``compare_and_swap`` (the key). Closing it leaves ``inner`` open (its owner closes it)."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, list[str]]] = []
        #: How many items the scans handed out (a listing page should read about one page).
        self.items_scanned = 0

    def get(self, key: str) -> Item | None:
        self.calls.append(("get", [key]))
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.calls.append(("get_many", list(keys)))
        return self.inner.get_many(keys)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.calls.append(("scan_prefix", [prefix]))
        return self._counted(self.inner.scan_prefix(prefix, start_after=start_after, limit=limit))

    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.calls.append(("scan_range", [start, stop]))
        return self._counted(self.inner.scan_range(start, stop, start_after=start_after, limit=limit))

    def _counted(self, items: Iterator[Item]) -> Iterator[Item]:
        for item in items:
            self.items_scanned += 1
            yield item

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        self.calls.append(("transact", [op.key for op in ops]))
        return self.inner.transact(ops)

    def compare_and_swap(self, key: str, expected: int, value: bytes) -> Item:
        self.calls.append(("compare_and_swap", [key]))
        return self.inner.compare_and_swap(key, expected, value)

    def reads(self) -> list[tuple[str, list[str]]]:
        return [call for call in self.calls if call[0] in READS]

    def keys_read(self) -> list[str]:
        return [key for _, keys in self.reads() for key in keys]

    def swapped(self, prefix: str = "") -> list[str]:
        """The keys compare-and-swapped on their own (a lease's acquire, renewal or release),
        those starting with ``prefix``."""
        swaps = [keys[0] for method, keys in self.calls if method == "compare_and_swap"]
        return [key for key in swaps if key.startswith(prefix)]

"""The registry's change feed: every write to a catalog record is announced in the same transaction.

A replica's catalog snapshot is refreshed by change, not by scan (``query/snapshot_refresh``): it
asks the feed which keys changed since its last position and reads just those again.

Layout. The feed has ``shards`` shards (chosen once per registry, kept in ``chg/meta``); each
shard is a ring of ``RING`` slots ``chg/r/<shard>/<slot>``. Sequence numbers of a shard start at 1
and change ``n`` lives in slot ``(n - 1) % RING``, written there for the ``(n - 1) // RING + 1``-th
time: the slot's *revision* says which change it holds. Claiming change ``n`` is therefore one
conditional put (the slot at revision ``(n - 1) // RING``), added by :meth:`ChangeWriter.write` to
the caller's own batch: the change and the records it names commit together or not at all, so a
crash between the commit and anything after it neither misses a change nor announces one that did
not happen. Writers of the same shard that race for one number are told apart by that condition
(the loser looks up the shard's head and takes the next number); writers of different shards never
meet, and a batch's shard is a hash of the smallest key it changes, so commits of different tables
spread over the shards instead of queuing on one item.

Retention is the ring: a slot is overwritten ``RING`` changes later. A reader more than a ring
behind on a shard sees a slot of a later lap and loads cold (current heads, page by page).

Numbers never skip (a writer only tries the number after one it saw taken), so a reader stops at
the first slot that does not hold the number it expects: whatever it has not read yet is there on
its next refresh, and it is never more than one read per shard to learn that nothing changed.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lake_platform.errors import ConcurrentModification, ConditionFailed, Internal
from lake_platform.registry import keys
from lake_platform.registry.store import Check, Item, MetaStore, Op, Put

#: Key prefixes a catalog snapshot holds; a batch writing under one of them is announced. A
#: transaction record (``txn/``) too: the commit point of a multi-table commit over several
#: registry writes, which readers see before its heads move (``query.snapshot_transactions``).
WATCHED = ("prj/", "whs/", "nsp/", "tbl/", "ver/", "trs/", "pol/", "usr/", "tok/", "brn/", "txn/")
#: Shards a registry's feed gets when its first change is written (``chg/meta`` keeps the count).
DEFAULT_SHARDS = 16
#: Slots per shard: the changes a shard retains. Fixed: a slot's revision encodes the number.
RING = 256
#: Tries of one batch when other writers keep taking the shard's next number first.
MAX_ATTEMPTS = 64
_META = "chg/meta"
#: A backend's atomic batch (the caller's ops and the change record).
Apply = Callable[[Sequence[Op]], list[Item | None]]


def watched(key: str) -> bool:
    return key.startswith(WATCHED)


def changed_keys(ops: Iterable[Op]) -> list[str]:
    """The watched keys ``ops`` write or delete, sorted."""
    return sorted(op.key for op in ops if not isinstance(op, Check) and watched(op.key))


def shard_of(key: str, shards: int) -> int:
    return zlib.crc32(key.encode()) % shards


def slot_of(seq: int) -> int:
    return (seq - 1) % RING


def lap_of(seq: int) -> int:
    """The revision the slot of change ``seq`` has once ``seq`` is written there."""
    return (seq - 1) // RING + 1


def seq_of(slot: int, revision: int) -> int:
    return (revision - 1) * RING + slot + 1


def _slot_number(key: str) -> int:
    return int(key.rsplit("/", 1)[1])


@dataclass(frozen=True)
class Change:
    shard: int
    seq: int
    keys: tuple[str, ...]


class FeedBehind(Exception):
    """A reader is further behind on a shard than the ring retains: it must load cold."""


# -- the registry-wide shard count ---------------------------------------------------------------


def read_shards(store: MetaStore) -> int | None:
    """The registry's shard count, or None while no change was ever written (an old registry)."""
    item = store.get(_META)
    return None if item is None else _decode_meta(item)


def _decode_meta(item: Item) -> int:
    try:
        shards = int(json.loads(item.value)["shards"])
    except (ValueError, KeyError, TypeError) as exc:
        raise Internal(f"registry record {_META!r} is unreadable") from exc
    if shards < 1:
        raise Internal(f"registry record {_META!r} names {shards} shards")
    return shards


# -- writing -------------------------------------------------------------------------------------


class ChangeWriter:
    """Adds one change record to every batch that writes a watched key (a store's ``transact``)."""

    def __init__(self, store: MetaStore, shards: int = DEFAULT_SHARDS) -> None:
        self._store = store
        self._wanted = shards
        self._shards: int | None = None
        #: shard -> the last number this process saw taken there (a guess: others write too)
        self._heads: dict[int, int] = {}
        self._lock = threading.Lock()

    def write(self, ops: Sequence[Op], apply: Apply) -> list[Item | None]:
        """``apply(ops + [the change record])``; the caller's results. A failed condition of the
        caller's own ops is raised as it is; one on the change record is another writer having
        taken the number, and the batch is tried again with the next free one."""
        changed = changed_keys(ops)
        if not changed:
            return apply(ops)
        shards = self.shards()
        shard = shard_of(changed[0], shards)
        value = json.dumps({"k": changed}, separators=(",", ":")).encode()
        for _ in range(MAX_ATTEMPTS):
            seq = self._head(shard) + 1
            record = Put(keys.change_record(shard, slot_of(seq)), value, lap_of(seq) - 1)
            try:
                results = apply([*ops, record])
            except ConditionFailed as exc:
                if exc.key != record.key:
                    raise
                self._learn(shard, seq)
                continue
            with self._lock:
                self._heads[shard] = max(self._heads.get(shard, 0), seq)
            return results[: len(ops)]
        raise ConcurrentModification(f"the registry's change feed shard {shard} stayed busy; retry")

    def shards(self) -> int:
        """The registry's shard count, settled once per process (the first writer chooses)."""
        if self._shards is None:
            found = read_shards(self._store)
            if found is None:
                meta = json.dumps({"shards": self._wanted}).encode()
                try:
                    self._store.put_if_absent(_META, meta)
                    found = self._wanted
                except ConditionFailed:
                    found = read_shards(self._store)
            assert found is not None
            self._shards = found
        return self._shards

    def _head(self, shard: int) -> int:
        with self._lock:
            known = self._heads.get(shard)
        if known is None:
            known = shard_head(self._store, shard)
            with self._lock:
                self._heads[shard] = max(self._heads.get(shard, 0), known)
        return known

    def _learn(self, shard: int, taken: int) -> None:
        """Another writer took number ``taken``: the shard's head, read forward from it (one or
        two reads; the whole ring only when the shard no longer holds ``taken``)."""
        try:
            after = _shard_since(self._store, shard, taken, RING)
            head = after[-1].seq if after else taken
        except FeedBehind:
            head = shard_head(self._store, shard)
        with self._lock:
            self._heads[shard] = head


def shard_head(store: MetaStore, shard: int) -> int:
    """The last number taken in ``shard`` (0: none), from one scan of its ring."""
    head = 0
    for item in store.scan_prefix(keys.change_records(shard)):
        head = max(head, seq_of(_slot_number(item.key), item.revision))
    return head


def feed_heads(store: MetaStore, shards: int) -> dict[int, int]:
    """Every shard's head (one scan per shard's ring): where a cold load starts reading."""
    return {shard: shard_head(store, shard) for shard in range(shards)}


# -- reading -------------------------------------------------------------------------------------


def changes_since(
    store: MetaStore, positions: Mapping[int, int], *, page: int = RING
) -> tuple[list[Change], dict[int, int]]:
    """The changes after ``positions`` (shard -> last number read), in each shard's order, and
    the positions after them. One small read per shard when nothing changed; FeedBehind when a
    shard moved on by more than the ring holds since."""
    found: list[Change] = []
    after: dict[int, int] = {}
    for shard, last in positions.items():
        changes = _shard_since(store, shard, last, page)
        found += changes
        after[shard] = changes[-1].seq if changes else last
    return found, after


def _shard_since(store: MetaStore, shard: int, last: int, page: int) -> list[Change]:
    out: list[Change] = []
    expect = last + 1
    # The first read also takes the last change read before: should the shard no longer hold it
    # (the registry was reset, or the ring moved on past it), only a cold load is right.
    check = last if last > 0 else None
    # Then two slots (the usual answers: the next is not written yet, or it is and the one after
    # it is not), later reads more.
    want = 2
    while True:
        first = slot_of(check if check is not None else expect)
        start = keys.change_record(shard, first - 1) if first > 0 else None
        asked = want + (check is not None)
        items = list(store.scan_prefix(keys.change_records(shard), start_after=start, limit=asked))
        if check is not None:
            head = items[0] if items else None
            if head is None or _slot_number(head.key) != slot_of(check) or head.revision != lap_of(check):
                raise FeedBehind(f"shard {shard} no longer holds change {check}")
            items, check = items[1:], None
            if slot_of(expect) == 0:
                continue  # that was the ring's last slot: go on from its first
        for item in items:
            if _slot_number(item.key) != slot_of(expect) or item.revision < lap_of(expect):
                return out  # not written yet: the shard's end for now
            if item.revision > lap_of(expect):
                raise FeedBehind(f"shard {shard} moved more than {RING} changes past {last}")
            out.append(Change(shard, expect, tuple(_decode_keys(item))))
            expect += 1
            if slot_of(expect) == 0:
                break  # the ring's last slot: go on from its first
        else:
            if len(items) < want:
                return out
        want = min(want * 8, page)


def _decode_keys(item: Item) -> list[str]:
    try:
        found = json.loads(item.value)["k"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Internal(f"registry change record {item.key!r} is unreadable") from exc
    if not isinstance(found, list) or not all(isinstance(k, str) for k in found):
        raise Internal(f"registry change record {item.key!r} is unreadable")
    return found


__all__ = [
    "DEFAULT_SHARDS",
    "RING",
    "WATCHED",
    "Change",
    "ChangeWriter",
    "FeedBehind",
    "changed_keys",
    "changes_since",
    "feed_heads",
    "read_shards",
    "shard_head",
    "watched",
]

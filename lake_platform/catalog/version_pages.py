"""One page of a table line's versions (ListTableVersions, through REST and the in-process
namespaces), read from the registry a page at a time, never the whole history.

A page holds the registered versions up to the line's head (and a writer's versions held back
above it, ``BoundTableNamespace``), after ``page_token``: the last version the previous page
answered, in the order asked. Version keys (``ver/<incarnation>/<20 digits>``) sort ascending and
the store scans forward only, so:

- ascending (the order without ``descending``): one scan after the token's key, a page and one
  more record (is there a next page?);
- newest first (``descending``, which the Lance Namespace spec guarantees then): the numbers below
  the token (below the head + 1 on the first page) are read in windows going down, each window
  one forward scan of ``[lo, hi)`` limited to ``hi - lo`` records (numbers are unique, so it reads
  nothing above ``hi``). The first window is as wide as what the page still needs; a window that
  comes back short (cleanup left a gap) makes the next one twice as wide, and none goes below the
  oldest registered version (one record read, only once a window came back short).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lake_platform.errors import InvalidInput
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord, decode
from lake_platform.registry.store import MetaStore

#: A page token this server hands out: a version number (ASCII digits, under 2^63). Not
#: ``str.isdigit``, which takes "²" (int() then raises) and any length.
_TOKEN = re.compile(r"[0-9]{1,18}")


def page_after(token: object) -> int | None:
    """The version a ``page_token`` continues from (None: the first page); InvalidInput naming
    ``page_token`` for anything this server never hands out."""
    if token is None or token == "":
        return None
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise InvalidInput(f"page_token {token!r:.40} is not one this server handed out")
    return int(token)


def version_page(
    store: MetaStore,
    incarnation: str,
    head: int,
    held: Sequence[VersionRecord] = (),
    *,
    limit: int | None,
    after: int | None,
    descending: bool,
) -> tuple[list[VersionRecord], str | None]:
    """The page (at most ``limit`` versions, all without one) after ``after`` in the order asked,
    and the next page's token (None on the last page). ``held`` are above ``head``, ascending."""
    want = None if limit is None else limit + 1
    if descending:
        found = _below(store, incarnation, head, held, after, want)
    else:
        found = _above(store, incarnation, head, held, after, want)
    if limit is not None and len(found) > limit:
        return found[:limit], str(found[limit - 1].version)
    return found, None


def _scan(
    store: MetaStore, incarnation: str, lo: int, hi: int | None, limit: int | None
) -> list[VersionRecord]:
    """Version records numbered ``lo`` up to below ``hi`` (None: no bound), at most ``limit``:
    the scan is left at the first record at or above ``hi``."""
    start = keys.version(incarnation, lo - 1) if lo > 0 else None
    found = []
    for item in store.scan_prefix(keys.versions(incarnation), start_after=start, limit=limit):
        record = decode(VersionRecord, item.value, item.key)
        if hi is not None and record.version >= hi:
            break
        found.append(record)
    return found


def _above(
    store: MetaStore,
    incarnation: str,
    head: int,
    held: Sequence[VersionRecord],
    after: int | None,
    want: int | None,
) -> list[VersionRecord]:
    lo = 0 if after is None else after + 1
    found = _scan(store, incarnation, lo, head + 1, want) if lo <= head else []
    if want is None or len(found) < want:
        found += [h for h in held if h.version >= lo]
    return found if want is None else found[:want]


def _below(
    store: MetaStore,
    incarnation: str,
    head: int,
    held: Sequence[VersionRecord],
    after: int | None,
    want: int | None,
) -> list[VersionRecord]:
    hi = head + 1 if after is None else min(after, head + 1)  # exclusive
    found = [h for h in reversed(held) if after is None or h.version < after]
    if want is None:  # the whole line was asked for
        return found + _scan(store, incarnation, 0, hi, None)[::-1]
    need, width, floor = want - len(found), want - len(found), None
    while need > 0 and hi > (floor or 0):
        lo = max(hi - width, floor or 0)
        window = _scan(store, incarnation, lo, hi, min(hi - lo, need))
        if len(window) == need and hi - lo > need:
            # At least ``need`` versions below ``hi`` and only the oldest of them read: the
            # newest lie in a narrower window.
            width = max(need, (hi - lo) // 2)
            continue
        found += reversed(window)
        need, hi, width = need - len(window), lo, 2 * (hi - lo)
        if floor is None and need > 0:
            oldest = _scan(store, incarnation, 0, None, 1)
            floor = oldest[0].version if oldest else hi
    return found[:want]

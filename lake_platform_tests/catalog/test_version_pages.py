"""ListTableVersions through the in-process namespace reads a page of version records, not the
table's whole history, in either order (REST's handler: rest/handlers/test_versions)."""

from __future__ import annotations

import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import ListTableVersionsRequest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.registry import keys
from lake_platform.registry.store import Delete
from lake_platform_tests.catalog.conftest import Lake
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.registry.catalog_records import write_catalog

ID = ["p", "w", "ns00000", "t0000"]
INCARNATION = "p-w-ns00000-t0000"  # write_catalog's


def pages(
    ns: LakeNamespace, calls: RegistryCalls, *, limit: int, descending: bool
) -> tuple[list[list[int]], int]:
    """Every page, following the tokens (at most 100), and the most items one page scanned."""
    found: list[list[int]] = []
    most, token = 0, None
    for _ in range(100):
        calls.items_scanned = 0
        asked = ListTableVersionsRequest(id=ID, limit=limit, page_token=token, descending=descending)
        page = ns.list_table_versions(asked)
        most = max(most, calls.items_scanned)
        found.append([v.version for v in page.versions])
        token = page.page_token
        if not token:
            break
    return found, most


def test_a_page_of_versions_reads_about_one_page(lake: Lake) -> None:
    # Each page read all 300 version records and cut the page after; the page_token was ignored
    # (the same first page again) and none was answered.
    write_catalog(lake.catalog.store, "p", namespaces=1, per_namespace=1, versions=300)
    calls = RegistryCalls(lake.catalog.store)
    ns = LakeNamespace(Catalog(lake.settings, calls))
    for descending in (False, True):
        found, most = pages(ns, calls, limit=25, descending=descending)
        assert [v for page in found for v in page] == sorted(range(1, 301), reverse=descending)
        assert [len(page) for page in found] == [25] * 12
        assert most <= 27, descending  # the page, one more (is there a next?) and the head's
    calls.items_scanned = 0
    whole = ns.list_table_versions(ListTableVersionsRequest(id=ID, descending=True))
    assert [v.version for v in whole.versions] == list(range(300, 0, -1)) and whole.page_token is None
    for token in ("x", "\u00b2", "9" * 40):  # never handed out: the spec's InvalidInput, no version read
        calls.items_scanned = 0
        with pytest.raises(ns_errors.InvalidInputError, match="page_token"):
            ns.list_table_versions(ListTableVersionsRequest(id=ID, limit=2, page_token=token))
        assert calls.items_scanned == 0


def test_newest_first_pages_cross_the_gaps_cleanup_leaves(lake: Lake) -> None:
    # Versions 11..289 cleaned up but for a tagged 150: a page below 291 reaches down past the
    # gap, newest first, without reading the history.
    write_catalog(lake.catalog.store, "p", namespaces=1, per_namespace=1, versions=300)
    store = lake.catalog.store
    gone = [keys.version(INCARNATION, v) for v in range(11, 290) if v != 150]
    for start in range(0, len(gone), 50):
        store.transact([Delete(key, 1) for key in gone[start : start + 50]])
    calls = RegistryCalls(store)
    ns = LakeNamespace(Catalog(lake.settings, calls))
    found, most = pages(ns, calls, limit=5, descending=True)
    assert found == [
        [300, 299, 298, 297, 296],
        [295, 294, 293, 292, 291],
        [290, 150, 10, 9, 8],
        [7, 6, 5, 4, 3],
        [2, 1],
    ]
    # Windows widen across the gap and narrow again at the dense end, each scan at most a page
    # and one more: a few small scans, not the history.
    assert most <= 8 * 5
    found, _ = pages(ns, calls, limit=5, descending=False)
    assert found == [
        [1, 2, 3, 4, 5],
        [6, 7, 8, 9, 10],
        [150, 290, 291, 292, 293],
        [294, 295, 296, 297, 298],
        [299, 300],
    ]

"""docs/architecture.md's module map names every module of the package, each at the start of its
own line: a module added without its line there is a map that no longer says what the code is."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lake_platform"


def test_every_module_is_in_the_module_map() -> None:
    mapped = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))
    # Package markers: the map says which are empty and lists the others.
    markers = [m for m in modules if m.endswith("/__init__.py") and m != "__init__.py"]
    missing = [
        m
        for m in modules
        if m not in markers and not re.search(rf"^(lake_platform/)?{re.escape(m)}\s", mapped, re.MULTILINE)
    ]
    assert missing == []

"""Shared helpers for the maintenance and Dagster tests: a fresh lake with project ``p``,
warehouse ``p.w`` and namespace ``p.w.ns``, and small tables."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings, load_settings


def make_settings(home: Path, **overrides: Any) -> LakeSettings:
    return load_settings(home=home, **overrides)


def make_lake(home: Path, **overrides: Any) -> Catalog:
    catalog = Catalog(make_settings(home, **overrides))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    return catalog


def rows(start: int, count: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "name": pa.array([f"n{i}" for i in range(start, start + count)], pa.string()),
        }
    )


def age_tree(root: str | Path, seconds: float) -> None:
    """Make every file under ``root`` look ``seconds`` old."""
    when = time.time() - seconds
    for dirpath, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(dirpath, name), (when, when))


def files_under(root: str | Path) -> set[str]:
    root = Path(root)
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

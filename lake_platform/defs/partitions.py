"""The one partitions definition every table-scoped asset shares: one partition per registered
table, keyed by its dotted name. Sharing it is what makes the run queue's limit on the
``dagster/partition`` tag serialize all runs that touch one table."""

from __future__ import annotations

import warnings

import dagster as dg

TABLES = "lake_tables"

tables = dg.DynamicPartitionsDefinition(name=TABLES)


def allow_per_table_checks() -> None:
    """Silence Dagster 1.13's warning that asset checks partitioned by table are "preview": they
    are what shows a check per table. Only that warning, by its category and text; called at the
    top of each module that declares such checks (its filter must be in place when they are)."""
    warnings.filterwarnings(
        "ignore", message="Specifying a partitions_def on an AssetCheckSpec", category=dg.PreviewWarning
    )

"""The one partitions definition every table-scoped asset shares: one partition per registered
table, keyed by its dotted name. Sharing it is what makes the run queue's limit on the
``dagster/partition`` tag serialize all runs that touch one table."""

from __future__ import annotations

import dagster as dg

TABLES = "lake_tables"

tables = dg.DynamicPartitionsDefinition(name=TABLES)

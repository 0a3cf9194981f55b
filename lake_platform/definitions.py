"""The Dagster code location (``workspace.yaml`` points here).

Assets, sensors and schedules for ingest and maintenance live under ``lake_platform/defs/`` once
the orchestration work lands; until then the location loads and is empty.
"""

from __future__ import annotations

import dagster as dg

defs = dg.Definitions()

"""Maintenance jobs above the catalog: inbox ingest, compaction fan-out, orphan scan and reclaim.

Dagster assets (``lake_platform/defs``) are thin and call these; the CLI can call them too.
"""

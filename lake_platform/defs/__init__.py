"""Dagster definitions, one module per concern; ``lake_platform/defs/definitions.py`` merges them.

Assets are thin: they call ``lake_platform.maintenance`` and the catalog, which do the work.
"""

"""lake_platform: a Lance lakehouse with one registry as the authority for every table."""

__version__ = "0.1.0"

"""``python -m lake_platform.cli`` (how `lake up` starts the Flight SQL endpoint)."""

from lake_platform.cli import main

main()

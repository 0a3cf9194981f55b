"""``lake up``: the platform on the embedded default, started and stopped as one (launcher),
with its demo lake (demo) and children that die with it (processes)."""

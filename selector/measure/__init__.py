"""Layer 5: selection by measurement: the objective (over resolutions of the rules), its pins and layouts,
and `select()` (select.py), which chooses between the rules and the objective; claims and explain."""

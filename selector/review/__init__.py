"""Layer 7: review over many selections: the declared matrix, its resolution, diffs, plots, sweeps, the
pytest plugin."""

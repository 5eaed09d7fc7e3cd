"""Layer 8: the commands that are not a review tool's own (`kselect select`, `kselect diff`)."""

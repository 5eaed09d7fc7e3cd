"""Layer 2: what a selection is: its records (warnings, failures, claim checks), measured figures, and the
Selection per KV-cache layer group."""

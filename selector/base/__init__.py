"""Layer 0: what every layer uses: typed errors, atomic files, text helpers, the one-paragraph exit-2 CLI
plumbing and the Hydra-app wrapper. Imports nothing else of the selector."""

"""Layer 4: faithful resolution: vLLM's rules as data (rulebook, matcher), the candidates per group and
`resolve_rules(cfg, book, evidence)`, which never calls the objective."""

"""kselect's selector: Hydra configs -> validated models -> rules -> a Selection per KV-cache group.

Knows only configs and pydantic models; never imports torch (except `platform=auto` detection). Sub-packages
by layer, each importing only its own and those below it (tests/test_layers.py): base, config, outputs,
evidence, rules, measure, export, review, commands; api.py is the public entry over them all.
"""

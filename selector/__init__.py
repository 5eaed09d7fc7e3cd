"""kselect's selector: Hydra configs -> validated models -> rules -> a Selection per KV-cache group.

Knows only configs and pydantic models; never imports torch (except `platform=auto` detection). Sub-packages
by layer, each importing only its own and those below it (tests/test_layers.py): base, config, outputs,
evidence, rules, measure, export, review; api.py is the public entry over them all. The commands over them are
kselect/commands/.
"""

if __name__ != "kselect.selector":  # one module, one name (pyproject.toml maps the folder to kselect.selector)
    raise ImportError("import kselect.selector, not selector: the folder is a subpackage of kselect (pip install -e .)")

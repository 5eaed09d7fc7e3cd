"""Rule ids are one Hydra key segment: one command-line override disables a rule."""

from __future__ import annotations

import copy

import pytest

from kselect.selector.api import compose, compose_raw, validate
from kselect.selector.base.errors import KSelectError
from kselect.selector.api import resolve

ENV = ["rules=post_pr52987", "platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "model.multimodal=true"]
GATE = "fa-kv_dtype_version_gate"


def _rejecting_rules(sel) -> set[str]:
    return {r.rule for g in sel.groups for rs in g.rejected.values() for r in rs if r.rule}


def test_one_override_disables_a_rule():
    on = compose(ENV)
    off = compose([*ENV, f"rules.{GATE}.enabled=false"])
    assert GATE in on.active_rules() and GATE not in off.active_rules()
    assert GATE in _rejecting_rules(resolve(on))
    assert GATE not in _rejecting_rules(resolve(off))


@pytest.mark.parametrize("base", [["rules=post_pr52987", "overlay=[pr48666,pr52987,pr53175]"], ["rules=vllm_0_33_0"]])
def test_every_shipped_rule_can_be_toggled_from_the_command_line(base):
    ids = list(compose(["platform=cpu", *base]).rules)
    cfg = compose(["platform=cpu", *base, *(f"rules.{rid}.enabled=false" for rid in ids)])
    assert cfg.active_rules() == {}


def test_a_dotted_rule_id_is_refused_with_the_fix():
    d = copy.deepcopy(compose_raw(["platform=cpu"]))
    d["rules"]["fa.dotted"] = d["rules"].pop(GATE)
    with pytest.raises(KSelectError, match=r"rule id\(s\) \['fa.dotted'\] cannot be addressed"):
        validate(d)

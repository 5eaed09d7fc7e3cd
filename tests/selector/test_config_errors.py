"""Invalid configs: every message names the key, the bad value and the allowed values."""

from __future__ import annotations

import copy

import pytest

from kselect.selector.api import compose_raw, validate
from kselect.selector.base.errors import KSelectError

BASE = compose_raw(["platform=sm90", "model=gemma4_31b"])


def bad(path: str, value):
    d = copy.deepcopy(BASE)
    node = d
    *parents, last = path.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    with pytest.raises(KSelectError) as e:
        validate(d)
    return str(e.value)


def test_unknown_key():
    msg = bad("kv_cache.blocksize", 16)
    assert "kv_cache.blocksize: unknown key" in msg


def test_literal_lists_allowed_values():
    msg = bad("kv_cache.dtype", "fp9")
    assert "kv_cache.dtype" in msg and "'fp9'" in msg and "'fp8_e4m3'" in msg


def test_wrong_type():
    assert "model.num_hidden_layers" in bad("model.num_hidden_layers", "many")


def test_impossible_combinations():
    assert "spec_decode.num_speculative_tokens must be >= 1" in bad("spec_decode", {"method": "mtp", "num_speculative_tokens": 0})
    assert "model.layer_types has 2 entries" in bad("model.layer_types", ["full_attention", "full_attention"])
    assert "platform.compute_capability is required" in bad("platform.compute_capability", None)


def test_rule_without_its_effect():
    msg = bad("rules.y", {"stage": "priority", "reason": "x"})
    assert "needs the effect field 'priority'" in msg


def test_rule_with_two_effects():
    rule = {"stage": "quant_query", "reason": "x", "quant_query": False, "descale": "none"}
    msg = bad("rules.x", rule)
    assert "rules.x" in msg and "takes no ['descale']" in msg


def test_rule_unknown_fact_names_the_key():
    d = copy.deepcopy(BASE)
    d["rules"]["x"] = {"stage": "reject", "reason": "r", "when": {"platform.cc": 9}}
    cfg = validate(d)
    from kselect.selector.api import resolve

    with pytest.raises(KSelectError) as e:
        resolve(cfg)
    assert "rules.x.when.platform.cc" in str(e.value) and "platform.cc_major" in str(e.value)


def test_priority_names_unknown_backend():
    d = copy.deepcopy(BASE)
    d["rules"]["priority-cuda"]["priority"] = ["FLASH_ATTN", "NOPE"]
    with pytest.raises(KSelectError, match="rules.priority-cuda.priority names unknown backend 'NOPE'"):
        validate(d)


def test_capability_bad_device():
    msg = bad("capabilities.FLASH_ATTN.devices", ["cuda", "tpu"])
    assert "capabilities.FLASH_ATTN.devices" in msg and "'tpu'" in msg

"""Property-based fuzzing: malformed overrides and rule/capability files always end in a
KSelectError that names a key (exit status 2 in the CLI), never a raw exception; valid input
always yields a selection or a no-valid-backend error with reasons."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kselect.selector.api import compose, compose_raw, validate
from kselect.selector.errors import ConfigError, KSelectError, SelectionError
from kselect.selector.resolve import resolve

KEYS = ["platform", "model", "kv_cache", "spec_decode", "overlay", "kv_cache.dtype", "kv_cache.block_size",
        "kv_cache.scales", "model.dtype", "model.multimodal", "attention.backend", "attention.flash_attn_version",
        "platform.packages.fa4", "platform.compute_capability", "spec_decode.num_speculative_tokens", "output",
        "model.head_dim", "nonsense", "+attention.backend_per_kind.full_attention", "rules.priority.cuda.priority"]
VALUES = ["sm90", "sm80", "cpu", "gemma4_31b", "gemma4_e2b", "fp8", "auto", "mtp", "none", "[pr48666]",
          "[pr48666,pr52987]", "[pr53175]", "16", "64", "0", "-3", "true", "false", "null", "FLASH_ATTN",
          "TRITON_ATTN", "3", "4", "7", "[9,0]", "calibrated", "json", "x", "[", "{a: 1}", "bfloat16", "float32"]
override = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(VALUES))


def outcome(fn):
    try:
        return fn()
    except SelectionError as e:
        assert str(e).strip(), "a selection error must explain itself"
        return e
    except KSelectError as e:
        msg = str(e)
        assert msg.startswith("invalid config:"), msg
        assert any(k.split(".")[0].lstrip("+") in msg for k in KEYS + ["rules", "capabilities", "<root>"]), msg
        return e


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(override, max_size=4))
def test_overrides_never_crash(overrides):
    outcome(lambda: resolve(compose(["platform=sm90"] + overrides)))


BASE = compose_raw(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"])
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 600), st.text(max_size=6),
                 st.lists(st.integers(0, 600), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
FIELDS = ["stage", "when", "reason", "order", "enabled", "set", "flash_attn_version", "priority",
          "kernel_block_sizes", "preferred_block_size_min", "quant_query", "descale", "copy_target_kv_scales"]
WHEN = st.dictionaries(
    st.sampled_from(["platform.cc_major", "kv.dtype", "group.head_size", "any", "not", "bogus.fact", "fa.version"]),
    st.one_of(JUNK, st.dictionaries(st.sampled_from(["gt", "in", "eq", "zz", "multiple_of"]), JUNK, max_size=2)),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    rule_id=st.sampled_from(["priority-cuda", "fa-version-config", "fa-fp8_kv_combination", "new.rule"]),
    field=st.sampled_from(FIELDS),
    value=st.one_of(JUNK, WHEN),
)
def test_rule_files_never_crash(rule_id, field, value):
    d = copy.deepcopy(BASE)
    d["rules"].setdefault(rule_id, {"stage": "reject", "reason": "fuzz"})[field] = value
    outcome(lambda: resolve(validate(d)))


@settings(max_examples=100, deadline=None)
@given(
    backend=st.sampled_from(["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "NEW"]),
    field=st.sampled_from(["devices", "dtypes", "kv_cache_dtypes", "head_sizes", "kernel_block_sizes",
                           "min_compute_capability", "mm_prefix", "package", "extra"]),
    value=JUNK,
)
def test_capability_files_never_crash(backend, field, value):
    d = copy.deepcopy(BASE)
    d["capabilities"].setdefault(backend, {"devices": ["cuda"], "dtypes": ["bfloat16"], "kv_cache_dtypes": ["auto"]})[field] = value
    outcome(lambda: resolve(validate(d)))


def test_config_error_names_key():
    e = ConfigError("rules.x.when.y", 1, ["a", "b"], what="fact")
    assert str(e) == "invalid config: rules.x.when.y: bad fact 1; allowed: a, b"

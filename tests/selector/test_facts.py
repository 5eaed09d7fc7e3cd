"""The facts a rule reads are one frozen record: every name of the vocabulary (vocab.FACTS) reads its field,
a candidate or a group is a new value (the record it came from is unchanged), and a rule naming any other
fact is refused when the rules load."""

from __future__ import annotations

import dataclasses

import pytest

from kselect.selector.api import compose
from kselect.selector.base.errors import ConfigError
from kselect.selector.config.vocab import FACTS
from kselect.selector.rules.facts import base_facts
from kselect.selector.rules.groups import target_groups
from kselect.selector.rules.matcher import compile_when


@pytest.fixture(scope="module")
def cfg():
    return compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "kv_cache.block_size=32"])


def test_every_fact_name_reads_its_field(cfg):
    window = next(g for g in target_groups(cfg) if g.kind == "sliding_window")
    facts = base_facts(cfg).for_group(window).for_candidate("FLASHINFER")
    read = {name: facts.get(name) for name in FACTS}
    assert read["platform.cc_major"] == 9 and read["platform.packages.fa3"] is True
    assert read["model.name"] == "gemma4_31b" and read["model.mixed_head_sizes"] is True
    assert read["kv.dtype"] == "fp8" and read["kv.quantized"] is True and read["kv.block_size"] == 32
    assert read["group.kind"] == "sliding_window" and read["group.head_size"] == window.head_size
    assert read["group.sliding_window"] is True and read["candidate.backend"] == "FLASHINFER"
    assert read["fa.version"] is None and read["kb.context"] is None  # not asked yet


def test_facts_are_values(cfg):
    model = base_facts(cfg)
    group = model.for_group(target_groups(cfg)[0])
    candidate = group.for_candidate("TRITON_ATTN")
    assert model.group.kind is None and group.candidate.backend is None  # the records made from stay as they were
    assert candidate.group == group.group and candidate.candidate.backend == "TRITON_ATTN"
    assert hash(candidate) == hash(group.for_candidate("TRITON_ATTN")) and candidate == group.for_candidate("TRITON_ATTN")
    with pytest.raises(dataclasses.FrozenInstanceError):
        candidate.kv = model.kv  # type: ignore[misc]
    blocks = candidate.for_kernel_blocks("FLASH_ATTN", "model")
    assert (blocks.kb.context, blocks.kb.head_size, blocks.candidate.backend) == ("model", model.model.head_size, "FLASH_ATTN")


def test_a_rule_naming_an_unknown_fact_is_refused_at_load():
    with pytest.raises(ConfigError, match="group.heads"):
        compile_when({"group.heads": 8}, "rules.r1.when")
    assert compile_when({"group.head_size": {"ge": 256}}, "rules.r1.when")  # a known one compiles

"""The forward's prefetch hints (gemma4/forward.py, gemma4/fused.py PREFETCH): which weights each hint names and where
in the step it stands, on CPU through a recording ops; on the GPU (marked), a decode graph that prefetches gives the
logits of one that does not, and really launched the prefetches."""

import pytest
import torch

from g4_helpers import simple_selection
from kselect.gemma4 import model as model_mod
from kselect.gemma4.engine import Engine, EngineConfig
from kselect.gemma4.forward import GATE_UP_HEAD_BYTES
from kselect.gemma4.ops import TorchOps


class Recording(TorchOps):
    """The plain ops, logging each region and each hint by the parameter names of the weights involved."""

    def __init__(self, names, on=True):
        self.names, self.log, self.on = names, [], on

    def prefetches(self):
        return self.on

    def prefetch(self, *weights, limit=None):
        self.log.append(("prefetch", tuple(self.names[w.data_ptr()] for w in weights), limit))

    def qkv(self, a, *args):
        self.log.append(("qkv", a.layer))
        return super().qkv(a, *args)

    def linear(self, x, w, scale=None, softcap=None):
        self.log.append(("linear", self.names.get(w.data_ptr(), "?")))
        return super().linear(x, w, scale, softcap)

    def mlp_hidden(self, m, z):
        self.log.append(("mlp",))
        return super().mlp_hidden(m, z)


@pytest.mark.parametrize("name", ["all", "edge"])  # layer 0 an MoE layer; dense layers with per-layer inputs
def test_each_hint_names_the_weights_the_next_kernels_read(models, monkeypatch, name):
    """Per layer: o_proj while attention runs (after the q/k/v region, before the o projection); the head of gate/up
    before the o projection and its add-norm, which precede them; after the MLP and its add-norm, the per-layer-input gate and projection and the next layer's
    q/k/v (q alone for a KV-shared layer), nothing of a next layer after the last. Logits equal the plain ops'."""
    model, _ = models[name]
    names = {p.data_ptr(): n for n, p in model.named_parameters()}
    rec = Recording(names)
    eng = Engine(model, simple_selection(model.args), EngineConfig(max_seqs=2, max_seq_len=32))
    want = eng.extend([0], [[5, 6, 7]])[0]
    monkeypatch.setattr(model_mod, "ops_for", lambda mode: rec)
    eng2 = Engine(model, simple_selection(model.args), EngineConfig(max_seqs=2, max_seq_len=32))
    got = eng2.extend([0], [[5, 6, 7]])[0]
    assert torch.equal(got, want)

    hints = [e for e in rec.log if e[0] == "prefetch"]
    n = model.args.num_hidden_layers
    assert len(hints) == 3 * n
    for i, lay in enumerate(model.layers):
        o_hint, gu_hint, after_mlp = hints[3 * i: 3 * i + 3]
        assert o_hint == ("prefetch", (f"layers.{i}.self_attn.o_proj.weight",), None)
        assert gu_hint == ("prefetch", (f"layers.{i}.mlp.gate_proj.weight", f"layers.{i}.mlp.up_proj.weight"),
                           GATE_UP_HEAD_BYTES)
        want_next = ()
        if lay.ple_dim:
            want_next += (f"layers.{i}.per_layer_input_gate.weight", f"layers.{i}.per_layer_projection.weight")
        if i + 1 < n:
            nxt = model.layers[i + 1].self_attn
            want_next += tuple(f"layers.{i + 1}.self_attn.{p}_proj.weight"
                               for p in ("q",) + (() if nxt.kv_shared else ("k",) + (("v",) if nxt.v_proj else ())))
        assert after_mlp == ("prefetch", want_next, None)
    # where each hint stands among the regions of layer 0
    first = rec.log[:rec.log.index(("qkv", 1))]
    assert first.index(hints[0]) == first.index(("qkv", 0)) + 1
    assert first.index(hints[0]) < first.index(hints[1]) < first.index(("linear", "layers.0.self_attn.o_proj.weight"))
    assert first.index(hints[1]) < first.index(("mlp",)) < first.index(hints[2])
    if not model.layers[0].moe:  # a dense MLP: after down_proj (and its add-norm); MoE: after the expert block
        assert first.index(("linear", "layers.0.mlp.down_proj.weight")) < first.index(hints[2])
    assert any(m.self_attn.kv_shared for m in model.layers)  # the config has KV-shared layers: q alone was named


def test_ops_that_do_not_prefetch_get_no_hint(models, monkeypatch):
    """Where the ops take no hints this step (`prefetches()` False: the plain ops, or the fused ops outside a graph
    capture), the forward builds none and calls no `prefetch`: building them cost ~13 us of host time a layer."""
    model, _ = models["all"]
    rec = Recording({p.data_ptr(): n for n, p in model.named_parameters()}, on=False)
    monkeypatch.setattr(model_mod, "ops_for", lambda mode: rec)
    Engine(model, simple_selection(model.args), EngineConfig(max_seqs=2, max_seq_len=32)).extend([0], [[5, 6, 7]])
    assert ("qkv", 0) in rec.log and not [e for e in rec.log if e[0] == "prefetch"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_prefetching_graph_decode_equals_the_plain_graph_and_launches_prefetches(monkeypatch):
    """Greedy decode on CUDA graphs with the Triton ops: prefetching on and off give the same logits bit for bit
    (a prefetch writes nothing), and the prefetch kernel was launched during the capture (side stream, SM90+)."""
    from kselect.gemma4 import fused
    from kselect.gemma4.build import build_model
    from kselect.kernels import l2_prefetch
    from kselect.selector.api import compose, resolve

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("cp.async.bulk.prefetch needs SM90")
    cfg = compose(["attention.backend=TRITON_ATTN"])
    sel = resolve(cfg)
    model, _, _ = build_model(cfg, seed=0)
    model.set_compute("triton")
    launched = []
    real = l2_prefetch.prefetch_l2
    monkeypatch.setattr(l2_prefetch, "prefetch_l2", lambda ranges: (launched.append(len(ranges)), real(ranges)))
    prompts = [[2] + list(range(10, 10 + n)) for n in (5, 17)]
    out = {}
    for on in (False, True):
        with fused.prefetching(on):
            eng = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=96, cuda_graphs=True))
            if not eng.use_graphs:
                pytest.skip("the selected backends do not support CUDA graphs")
            out[on] = eng.generate(prompts, 12, return_logits=True)
            if not on:
                assert not launched
    assert out[True].tokens == out[False].tokens and out[True].cuda_graphs
    assert all(torch.equal(a, b) for a, b in zip(out[True].logits, out[False].logits))
    assert launched and sum(launched) >= model.args.num_hidden_layers

"""gemma4/fused.py (concatenated projections + the kernels/ Triton ops) against the unfused modules
and HF, on CPU: the Triton kernels run in the interpreter (fp32) on the CPU test models. On a CUDA machine
the module skips (compiled Triton cannot read CPU tensors); there the fused path is checked by
kselect/measurement/gemma4/fusion.py (greedy tokens equal to the unfused modules', bench/results/h200/prefill_gemv/F) and
the kernels by their GPU-marked tests."""

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("CPU-interpreter tests of the fused forward (see the module docstring)", allow_module_level=True)
os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from g4_helpers import HF_RTOL, hf_logits, simple_selection  # noqa: E402
from kselect.gemma4 import fused  # noqa: E402
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error  # noqa: E402
from kselect.kernels import rms_norm  # noqa: E402

if type(rms_norm._add_rms_norm_kernel).__name__ != "InterpretedFunction":
    pytest.skip("no GPU, and kernels were imported before TRITON_INTERPRET=1 was set", allow_module_level=True)


@pytest.fixture(autouse=True)
def wide_gemv_programs():
    """The interpreter runs a launch program by program, so the GEMV's real configs (two rows of W a program, tuned
    for a GPU's many SMs) cost tens of seconds a test here. The forward's wiring and numerics do not depend on them
    (a row's sums are the same at any block_n): here each GEMV program owns up to 64 rows, 256 for N >= 512 (q/k/v,
    gate/up, the LM head), so each projection of 256 rows or more still runs on two programs or more (the tails'
    "last program"), and a forward costs about 30% less. The configs themselves: tests/kernels/test_gemv.py."""
    from kselect.kernels import gemv

    with gemv.configured(wide_rows):
        yield


def wide_rows(n, k):
    return dict(block_n=min(256 if n >= 512 else 64, 1 << (n - 1).bit_length()))


def run(model, mode, prompts, cont):
    old = model.compute
    model.set_compute(mode)
    try:
        eng = Engine(model, simple_selection(model.args), EngineConfig(max_seqs=4, max_seq_len=64))
        seqs = list(range(len(prompts)))
        out = [torch.cat(eng.extend(seqs, prompts, all_logits=True))]
        for step in range(len(cont[0])):
            out.append(eng.decode(seqs, [c[step] for c in cont]))
        return torch.cat(out)
    finally:
        model.set_compute(old)


def test_fused_equals_unfused_and_hf(models):
    """The "all" config has every feature (PLE, KV sharing, K=V, MoE); short prompts, past the window
    of 8, keep the interpreter fast."""
    model, hf = models["all"]
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 512, (n,), generator=g).tolist() for n in (10, 9)]
    cont = [torch.randint(3, 512, (2,), generator=g).tolist() for _ in prompts]
    want = run(model, "unfused", prompts, cont)
    got = run(model, "triton", prompts, cont)
    assert max_rel_error(got, want) < 1e-5  # fp32: the same maths up to reduction order
    ref = torch.cat([hf_logits(hf, p) for p in prompts])
    n = ref.shape[0]
    assert max_rel_error(got[:n], ref) < HF_RTOL
    # the decode steps against HF's full forward over each sequence
    for step in range(2):
        rows = got[n + step * len(prompts): n + (step + 1) * len(prompts)]
        for s, p in enumerate(prompts):
            full = hf_logits(hf, p + cont[s][:step + 1])[-1:]
            assert max_rel_error(rows[s:s + 1], full) < HF_RTOL


def test_one_row_steps_run_the_gemv_and_equal_unfused(models, monkeypatch):
    """A batch-1 decode step's projections go to kernels/gemv.py (more rows stay on cuBLAS): same logits
    as the unfused modules and as the cuBLAS baseline mode, and the GEMV really ran, with the per-layer-input scale
    and the logit softcap in its epilogue; with fold_norms on (off by default), every add-norm of a one-row step ran
    in the next GEMV's prologue."""
    model, _ = models["all"]
    g = torch.Generator().manual_seed(4)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (2,), generator=g).tolist()]
    ops, rows, glu, epi, gathers, ropes = fused.ops_for("triton"), [], [], [], [], []
    real, real_glu, real_emb, real_rope = ops._gemv, ops._gemv_gelu_mul, ops.embedding, ops.rope_tables
    real_norm, norms, pending = ops._add_rms_norm, [], []
    monkeypatch.setattr(ops, "_add_rms_norm", lambda y, *a, **kw: norms.append(tuple(y.shape)) or real_norm(y, *a, **kw))
    monkeypatch.setattr(ops, "embedding", lambda ids, w, s: gathers.append(w.shape[1]) or real_emb(ids, w, s))
    monkeypatch.setattr(ops, "rope_tables", lambda p, inv, dt: ropes.append(p.shape[0]) or real_rope(p, inv, dt))
    monkeypatch.setattr(ops, "_gemv", lambda x, w, **kw: rows.append(x.shape[0]) or epi.append(kw)
                        or pending.append(isinstance(x, ops._pending)) or real(x, w, **kw))
    monkeypatch.setattr(ops, "_gemv_gelu_mul", lambda x, w, mul: glu.append(mul is None)
                        or pending.append(isinstance(x, ops._pending)) or real_glu(x, w, mul))
    with fused.fold_norms(True):
        got = run(model, "triton", prompts, cont)
    assert rows and set(rows) == {1}  # decode only: the 9-row prefill stayed on cuBLAS
    # one-row add-norm kernels: only the per-layer inputs' ([1, L, P]) and the last layer's (the final norm)
    assert {s for s in norms if s[0] == 1} == {(1, model.args.hidden_size), (1, len(model.layers), model.ple_dim)}
    n_ple = sum(bool(layer.ple_dim) for layer in model.layers)
    assert norms.count((1, model.args.hidden_size)) == 2 and pending.count(True) == 2 * (2 * len(model.layers) - 1 + n_ple)
    n_layers = len(model.layers)
    assert len(rows) >= 2 * 2 * n_layers  # two steps, at least q/k/v and o per layer (and down)
    # GELU*up in the GEMV's epilogue: gate/up of every dense MLP, the per-layer input gate of every PLE layer
    ple = sum(bool(layer.ple_dim) for layer in model.layers)  # (MoE layers keep their dense MLP too)
    assert glu.count(True) == 2 * n_layers and glu.count(False) == 2 * ple and ple
    caps = [kw["softcap"] for kw in epi if kw.get("softcap") is not None]
    scales = [kw["scale"] for kw in epi if kw.get("scale") is not None]
    assert caps == [model.args.final_logit_softcapping] * 2  # the LM head of each decode step
    assert scales == [model.args.hidden_size**-0.5] * 2  # the per-layer-input projection of each step
    # the token and per-layer-input gathers, and both rope tables, one kernel each a step (prefill and two decodes)
    ple_width = model.embed_tokens_per_layer.weight.shape[1]
    assert gathers == [model.args.hidden_size, ple_width] * 3 and ropes == [9, 1, 1]
    assert max_rel_error(got, run(model, "unfused", prompts, cont)) < 1e-5
    assert max_rel_error(got, run(model, "triton_cublas", prompts, cont)) < 1e-5
    assert torch.equal(got, run(model, "triton", prompts, cont))  # the fold rounds where the norm kernel rounds


def test_tail_norms_end_one_row_projections_in_their_add_norm(models, monkeypatch):
    """With tail_norms on (off by default), a one-row step's add-norm after o_proj, down_proj and the per-layer
    projection runs in that GEMV's last program: no add-norm kernel of one row is left but the per-layer inputs' and
    the MoE layers' (their expert block is not a projection); the logits are those of the norm kernels."""
    model, _ = models["all"]
    g = torch.Generator().manual_seed(4)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (2,), generator=g).tolist()]
    ops, tails, norms = fused.ops_for("triton"), [], []
    real, real_norm = ops._gemv, ops._add_rms_norm
    monkeypatch.setattr(ops, "_gemv", lambda x, w, **kw: tails.append(kw.get("tail") is not None) or real(x, w, **kw))
    monkeypatch.setattr(ops, "_add_rms_norm", lambda y, *a, **kw: norms.append(tuple(y.shape)) or real_norm(y, *a, **kw))
    with fused.tail_norms(True):
        got = run(model, "triton", prompts, cont)
    n_moe = sum(bool(layer.moe) for layer in model.layers)
    n_ple = sum(bool(layer.ple_dim) for layer in model.layers)
    per_step = len(model.layers) + (len(model.layers) - n_moe) + n_ple  # o_proj; down_proj (dense); the PLE projection
    assert tails.count(True) == 2 * per_step
    assert norms.count((1, model.args.hidden_size)) == 2 * n_moe  # the MoE layers' add-norm after the expert block
    assert torch.equal(got, run(model, "triton", prompts, cont))  # the tail rounds where the norm kernel rounds
    assert max_rel_error(got, run(model, "unfused", prompts, cont)) < 1e-5


@pytest.mark.parametrize("name", ["edge", "all"])
def test_ple_block_runs_each_one_row_per_layer_input_block_as_one_kernel(models, monkeypatch, name):
    """With ple_block on (off by default), a one-row step's per-layer-input block runs on kernels/ple_block.py: with
    the dense MLP's add-norm before it folded in (pending from mlp_add_norm), the MoE layers' computed before it by the
    norm kernel; no GEMV of the block and no add-norm after it is left. Logits equal the unfused modules' up to fp32
    order. "edge": dense PLE layers; "all": MoE ones. (Its bits every run: the GPU tests of tests/kernels/test_ple_block.py;
    the interpreter runs programs one by one.)"""
    model, _ = models[name]
    g = torch.Generator().manual_seed(4)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (2,), generator=g).tolist()]
    ops, blocks, norms, glu = fused.ops_for("triton"), [], [], []
    real_block, real_norm, real_glu = ops._ple.ple_block, ops._add_rms_norm, ops._gemv_gelu_mul
    monkeypatch.setattr(ops, "_ple", type("M", (), dict(fits=staticmethod(ops._ple.fits), ple_block=staticmethod(
        lambda *a, **kw: blocks.append(kw["pre"] is not None) or real_block(*a, **kw))))())
    monkeypatch.setattr(ops, "_add_rms_norm", lambda y, *a, **kw: norms.append(tuple(y.shape)) or real_norm(y, *a, **kw))
    monkeypatch.setattr(ops, "_gemv_gelu_mul", lambda x, w, mul: glu.append(mul is None) or real_glu(x, w, mul))
    from kselect.kernels import ple_block

    with fused.ple_block(True), ple_block.configured(8, 64, 4):  # few programs: the interpreter runs them one by one
        got = run(model, "triton", prompts, cont)
    ple = [layer for layer in model.layers if layer.ple_dim]
    dense_ple = sum(not layer.moe for layer in ple)
    assert ple and dense_ple == (0 if name == "all" else len(ple))
    assert blocks.count(True) == 2 * dense_ple and blocks.count(False) == 2 * (len(ple) - dense_ple)
    assert glu.count(False) == 0  # no per-layer-input gate GEMV left at one row
    one_row = norms.count((1, model.args.hidden_size))
    # per layer and step, the plain path has three one-row add-norms; the block takes two from a dense PLE layer and
    # one from an MoE PLE layer
    layers = len(model.layers)
    assert one_row == 2 * (3 * layers - 2 * dense_ple - (len(ple) - dense_ple))  # two steps
    assert max_rel_error(got, run(model, "unfused", prompts, cont)) < 1e-5


@pytest.mark.parametrize("name", ["edge", "all"])
def test_norm_fold_projects_one_row_add_norms_without_their_kernel(models, monkeypatch, name):
    """With norm_fold on (off by default), a one-row step's add-norms with a next norm (before gate/up, and each layer's
    end before the next q/k/v) are folded into the projection that reads them (kernels/gemv_fold.py): 2L - 1 folded
    projections a step (the first layer's q/k/v reads the input norm; the last layer's end is the final norm, computed
    by the norm kernel), none of those add-norms left as a kernel. fp32 logits equal the unfused modules' up to
    reduction order."""
    from kselect.kernels import gemv_fold

    model, _ = models[name]
    g = torch.Generator().manual_seed(4)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (2,), generator=g).tolist()]
    ops, calls, norms = fused.ops_for("triton"), [], []
    real_norm = ops._add_rms_norm
    monkeypatch.setattr(ops, "_fold", type("M", (), dict(FoldedNorm=gemv_fold.FoldedNorm, gemv_fold=staticmethod(
        lambda f, w, paired=False: calls.append(paired) or gemv_fold.gemv_fold(f, w, paired)),
        folded_weight=staticmethod(gemv_fold.folded_weight)))())
    monkeypatch.setattr(ops, "_add_rms_norm", lambda y, *a, **kw: norms.append((tuple(y.shape), kw.get("out") is not None))
                        or real_norm(y, *a, **kw))
    with fused.norm_fold(True), gemv_fold.configured(64, 512, 4):  # wide programs for the interpreter (64 rows)
        got = run(model, "triton", prompts, cont)
    layers = len(model.layers)
    assert calls.count(True) == 2 * layers and calls.count(False) == 2 * (layers - 1)
    one_row = [out for shape, out in norms if shape == (1, model.args.hidden_size)]
    assert one_row.count(True) == 2  # the final norm of each step, through `ready`
    assert max_rel_error(got, run(model, "unfused", prompts, cont)) < 1e-5


def test_gemv_tma_takes_one_row_projections_with_the_gemv_bits(models, monkeypatch):
    """With gemv_tma on (off by default) every one-row projection of a decode step runs on kernels/gemv_tma.py (W
    through TMA): its plain, scaled and softcapped GEMVs and both GELU*up forms. The logits are the bits of
    kernels/gemv.py at the same K chunk (gemv_tma's 256 columns), and the prefill stays on cuBLAS."""
    from kselect.kernels import gemv as gemv_k

    model, _ = models["all"]
    g = torch.Generator().manual_seed(5)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (1,), generator=g).tolist()]
    ops, tma, plain = fused.ops_for("triton"), [], []
    real, real_glu = ops._tma.gemv_tma, ops._tma.gemv_tma_gelu_mul
    real_plain, real_plain_glu = ops._gemv_plain, ops._gemv_gelu_mul_plain
    monkeypatch.setattr(ops._tma, "gemv_tma", lambda x, w, **kw: tma.append(kw) or real(x, w, **kw))
    monkeypatch.setattr(ops._tma, "gemv_tma_gelu_mul", lambda x, w, mul: tma.append("glu") or real_glu(x, w, mul))
    monkeypatch.setattr(ops, "_gemv_plain", lambda x, w, **kw: plain.append(x.shape) or real_plain(x, w, **kw))
    monkeypatch.setattr(ops, "_gemv_gelu_mul_plain", lambda x, w, mul: plain.append(x.shape) or real_plain_glu(x, w, mul))
    with gemv_k.configured(lambda n, k: dict(wide_rows(n, k), block_k=256, first_k=256)):
        want = run(model, "triton", prompts, cont)
    n_plain = len(plain)
    with fused.gemv_tma(True), ops._tma.configured(wide_rows):
        got = run(model, "triton", prompts, cont)
    assert len(plain) == n_plain and len(tma) == n_plain  # every one-row projection, none left on the GEMV
    assert tma.count("glu") and any(kw.get("softcap") for kw in tma if kw != "glu")
    assert torch.equal(got, want)  # and "triton" equals the unfused modules (the tests above)


def test_few_row_steps_run_the_skinny_gemm_and_equal_unfused(models, monkeypatch):
    """Steps of 2 to 16 rows (a small decode batch, a short prefill) put their projections on kernels/skinny_gemm.py
    with the epilogues in it; one row stays on the GEMV, more than 16 on cuBLAS. Same logits as the unfused
    modules and the cuBLAS mode."""
    model, _ = models["all"]
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(3, 512, (n,), generator=g).tolist() for n in (5, 7, 6)]
    cont = [torch.randint(3, 512, (1,), generator=g).tolist() for _ in prompts]
    ops, rows, glu, epi = fused.ops_for("triton"), [], [], []
    real, real_glu = ops._skinny, ops._skinny_gelu_mul
    monkeypatch.setattr(ops, "_skinny", lambda x, w, **kw: rows.append(x.shape[0]) or epi.append(kw) or real(x, w, **kw))
    monkeypatch.setattr(ops, "_skinny_gelu_mul", lambda x, w, mul: glu.append(x.shape[0]) or real_glu(x, w, mul))
    monkeypatch.setattr(ops, "_gemv", lambda x, w, **kw: pytest.fail("a 3-row step ran the one-row GEMV"))
    from kselect.kernels import skinny_gemm

    # every shape (by default: those a card measured faster); wide programs, as `wide_gemv_programs` gives the GEMV
    with fused.projection_rows((1, 1), (2, 16), "all"), skinny_gemm.configured(wide_rows):
        got = run(model, "triton", prompts, cont)
    assert set(rows) == {3} and set(glu) == {3}  # the decode step; the 18-row prefill stayed on cuBLAS
    assert [kw["softcap"] for kw in epi if kw.get("softcap")] == [model.args.final_logit_softcapping]
    assert max_rel_error(got, run(model, "unfused", prompts, cont)) < 1e-5


def test_few_row_projections_go_to_the_skinny_gemm_where_the_card_measured_it_faster(monkeypatch):
    """kernels/skinny_configs.json names, per card, the shapes where the skinny GEMM beat cuBLAS at 16 rows: those
    shapes go to it (gate/up by its whole [2I, K] weight), every other shape, and every shape on a card with no
    record, to cuBLAS; one row stays on the GEMV, more than 16 rows on cuBLAS."""
    from kselect.kernels import skinny_gemm

    table = skinny_gemm._card_table("NVIDIA H200")
    assert (20480, 2560) in table and (3072, 2560) not in table  # E4B gate/up measured faster, q/k/v not
    x = lambda m: torch.zeros(m, 2560, dtype=torch.bfloat16)  # noqa: E731
    w = lambda n: torch.zeros(n, 2560, dtype=torch.bfloat16)  # noqa: E731
    route = lambda m, n: fused._kernel_for(x(m), w(n), skinny_gemm.measured_faster)  # noqa: E731
    h100 = skinny_gemm._card_table("NVIDIA H100 80GB HBM3")
    assert (2560, 10240) in h100 and (2560, 10240) not in table  # down
    # the H100's step table (configs measured in the decode step, bench/results/h100/sk_tuned/) wins over its
    # microbenchmark's entries for down and the per-layer projection, and adds q/k/v, o and the per-layer-input gate,
    # which its microbenchmark left on cuBLAS; split-K stays for the gate alone (256 rows of W)
    assert {s: h100[s]["split_k"] for s in ((3072, 2560), (2560, 2048), (2560, 10240), (256, 2560), (2560, 256))} == {
        (3072, 2560): 1, (2560, 2048): 1, (2560, 10240): 1, (256, 2560): 16, (2560, 256): 1}
    assert h100[(20480, 2560)].get("split_k", 1) == 1 and skinny_gemm.config(2560, 10240, "NVIDIA H100 80GB HBM3") == {
        "block_n": 32, "block_k": 256, "num_warps": 4, "num_stages": 6, "split_k": 1, "swap": False}
    monkeypatch.setattr(skinny_gemm, "card_of", lambda t: "NVIDIA H100 80GB HBM3")
    assert route(16, 3072) == "skinny" and route(16, 256) == "skinny" and route(16, 2560) == "cublas"  # 2560 x 2560: none
    for card, want in (("NVIDIA H200", "skinny"), ("a card with no record", "cublas"), ("cpu", "cublas")):
        monkeypatch.setattr(skinny_gemm, "card_of", lambda t, card=card: card)
        assert route(16, 20480) == want
        assert route(16, 3072) == "cublas"
        assert route(1, 20480) == "gemv" and route(17, 20480) == "cublas"
    with fused.projection_rows((1, 1), (2, 16), "all"):
        assert route(16, 3072) == "skinny"
    with fused.projection_rows((1, 1), None):
        assert route(16, 20480) == "cublas"


def test_serial_mode_launches_plainly_with_the_same_logits(models, monkeypatch):
    """"triton_serial" (PDL's baseline) runs the same kernels launched plainly; "triton" asks kernels/pdl.py for PDL
    over a one-token step of a model with small layers (fused.pdl_step), and the bits are the same."""
    from kselect.kernels import pdl

    model, _ = models["all"]
    g = torch.Generator().manual_seed(5)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (1,), generator=g).tolist()]
    seen = []
    for mode in ("triton", "triton_serial"):
        ops = fused.ops_for(mode)
        real = ops._gemv
        monkeypatch.setattr(ops, "_gemv", lambda x, w, real=real, mode=mode, **kw: seen.append((mode, pdl.active())) or real(x, w, **kw))
    got = run(model, "triton_serial", prompts, cont)
    assert torch.equal(got, run(model, "triton", prompts, cont))
    assert {m: on for m, on in seen} == {"triton_serial": False, "triton": True} and not pdl.active()


def test_quant_query_groups_get_q_quantized_by_the_qkv_kernel(models, monkeypatch):
    """An FP8 cache with quant-query: the fused q/k/v kernel hands the backend q already in FP8 (no
    separate quantize kernel), with the logits of the backend quantizing q itself."""
    from kselect.backends.reference import TorchReferenceBackend
    from kselect.kernels.quant_query import quantize_query_triton

    model, _ = models["all"]  # KV-shared (q only), K=V and MoE layers
    sel = simple_selection(model.args, kv_cache_dtype="fp8_e4m3")
    sel = sel.model_copy(update={"groups": tuple(g.model_copy(update={"quant_query": True, "descale": "q_k_v"})
                                                 for g in sel.groups)})
    seen, calls, real = [], [], TorchReferenceBackend.forward
    monkeypatch.setattr(TorchReferenceBackend, "forward", lambda self, q, *a: seen.append(q.dtype) or real(self, q, *a))
    # the backend's own quantize as the one Triton kernel it is on CUDA (on CPU too: the same fp32 -> fp8
    # conversion as the q/k/v kernel's, which Triton's interpreter emulates with a few slips)
    monkeypatch.setattr("kselect.backends.common.quantize_query",
                        lambda q, s, dt: calls.append(1) or quantize_query_triton(q, s, dt))
    g = torch.Generator().manual_seed(5)
    prompt, nxt = torch.randint(3, 512, (5,), generator=g).tolist(), int(torch.randint(3, 512, (1,), generator=g))

    def logits():  # a prefill and one decode step: q quantized in both
        seen.clear(), calls.clear()
        eng = Engine(model, sel, EngineConfig(max_seqs=1, max_seq_len=16))
        return torch.cat([torch.cat(eng.extend([0], [prompt], all_logits=True)), eng.decode([0], [nxt])])

    model.set_compute("triton")
    try:
        got = logits()
        assert not calls and set(seen) == {torch.float8_e4m3fn}
        monkeypatch.setattr(TorchReferenceBackend, "query_scale", lambda *a: None)  # the backend quantizes
        want = logits()
        assert calls and set(seen) == {model.dtype}
    finally:
        model.set_compute("auto")
    assert torch.equal(got, want)


def test_concatenated_weights_are_views(models):
    model, _ = models["all"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fused.prepare(model)
    fused.prepare(model)  # idempotent: no second copy
    a = model.layers[0].self_attn
    assert a.q_proj.weight.data_ptr() == a.qkv_weight.data_ptr()
    assert a.k_proj.weight.data_ptr() == a.qkv_weight[a.q_proj.weight.shape[0]:].data_ptr()
    m = model.layers[0].mlp
    assert m.up_proj.weight.data_ptr() == m.gate_up_weight[m.gate_proj.weight.shape[0]:].data_ptr()
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_unknown_compute_mode(models):
    with pytest.raises(ValueError, match="compute mode 'fast'"):
        models["edge"][0].set_compute("fast")


def test_cpu_auto_is_unfused(models):
    from kselect.gemma4.model import StepContext

    model, _ = models["edge"]
    ctx = StepContext(positions=torch.zeros(1, dtype=torch.long), groups={})
    assert model.compute_mode(ctx) == ("triton" if model.device.type == "cuda" else "unfused")
    ctx.kv_amax = {}
    assert model.compute_mode(ctx) == "unfused"  # calibration records amax in the modules


def test_pdl_only_for_one_token_steps_of_models_with_small_layers(models, monkeypatch):
    """fused.pdl_step: PDL where it measured faster (one-token steps, layers of at most PDL_MAX_LAYER_BYTES);
    a prefill or a model with big layers launches plainly. The mean layer's bytes follow the weights (`.to()`)."""
    from g4_helpers import make_args

    from kselect.gemma4.checkpoint import build_random

    model, _ = models["all"]
    mean = sum(p.numel() * p.element_size() for p in model.layers.parameters()) / len(model.layers)
    assert fused.layer_bytes(model) == mean
    monkeypatch.setattr(fused, "PDL_MAX_LAYER_BYTES", mean)
    assert fused.pdl_step(model, 1) and not fused.pdl_step(model, 2)
    with fused.pdl_tokens(16):  # a measurement's wider rule (gemv_variants pdl_b16), restored after
        assert fused.pdl_step(model, 16) and not fused.pdl_step(model, 17)
    assert not fused.pdl_step(model, 2)
    # PDL_TOKENS_BY_CARD: steps of up to 16 tokens on the H100 and the H200 (bench/results/h100/b16_rule/,
    # bench/results/h200/b16_rule/), one elsewhere
    for card in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        monkeypatch.setattr(fused, "card_name", lambda d: card)
        assert fused.pdl_max_tokens(torch.device("cpu")) == 16 and fused.pdl_step(model, 16), card
        with fused.pdl_tokens(1):  # the switch over the card's rule (gemv_variants b16_off)
            assert not fused.pdl_step(model, 2)
    monkeypatch.setattr(fused, "card_name", lambda d: "NVIDIA A100-SXM4-80GB")
    assert fused.pdl_max_tokens(torch.device("cpu")) == 1 and not fused.pdl_step(model, 2)
    monkeypatch.setattr(fused, "PDL_MAX_LAYER_BYTES", mean - 1)
    assert not fused.pdl_step(model, 1)
    other = build_random(make_args("all"), seed=1)
    assert fused.layer_bytes(other) == mean
    other.to(torch.bfloat16)  # the weights move: counted again, at half the bytes
    assert fused.layer_bytes(other) == mean / 2 and fused.pdl_step(other, 1)


@pytest.mark.parametrize("layout", ["n", "t"])
def test_gated_pairs_run_each_dense_mlp_and_per_layer_block_as_one_kernel(models, monkeypatch, layout):
    """With gated_pair on (off by default) a one-row step runs each dense MLP's gate/up and down, and each per-layer
    block's gate and projection, as one kernel (kernels/gated_pair.py) adding into the fp32 row its add-norm reads and
    zeros: no GEMV of those shapes is left, the logits equal the unfused modules' up to the fp32 sum order, and the
    row is zeros after the step. Layout "t" reads the second projection from transposed copies, made once."""
    model, _ = models["all"]
    g = torch.Generator().manual_seed(6)
    prompts, cont = [torch.randint(3, 512, (9,), generator=g).tolist()], [torch.randint(3, 512, (2,), generator=g).tolist()]
    ops, pairs, glu, zeroed = fused.ops_for("triton"), [], [], []
    real_pair, real_glu, real_norm = ops._gated_pair, ops._gemv_gelu_mul, ops._add_rms_norm
    monkeypatch.setattr(ops, "_gated_pair", lambda x, w, wd, acc, mul, **kw: pairs.append((mul is None, kw))
                        or real_pair(x, w, wd, acc, mul, **kw))
    monkeypatch.setattr(ops, "_gemv_gelu_mul", lambda x, w, mul: glu.append(x.shape) or real_glu(x, w, mul))
    monkeypatch.setattr(ops, "_add_rms_norm", lambda y, *a, **kw: zeroed.append(kw.get("zero_y", False))
                        or real_norm(y, *a, **kw))
    with fused.gated_pair(layout):
        got = run(model, "triton", prompts, cont)
    dense = sum(not layer.moe for layer in model.layers)
    n_ple = sum(bool(layer.ple_dim) for layer in model.layers)
    assert [mlp for mlp, _ in pairs].count(True) == 2 * dense and [mlp for mlp, _ in pairs].count(False) == 2 * n_ple
    assert {kw["down_t"] for _, kw in pairs} == {layout == "t"}
    assert zeroed.count(True) == len(pairs)  # each pair's add-norm reads and zeros its row
    assert glu == [(1, model.args.hidden_size)] * 2 * sum(bool(layer.moe) for layer in model.layers)  # MoE: its MLP
    assert all(not acc.any() for acc in ops._accs.values())
    assert max_rel_error(got, run(model, "unfused", prompts, cont)) < 1e-5
    with pytest.raises(ValueError, match="gated_pair mode"):
        fused.gated_pair("x")


def test_qkv_in_attention_gives_the_logits_of_the_qkv_kernel(models, monkeypatch):
    """With qkv_in_attention on and kselect's Triton attention on every group, a one-token step's layers hand the
    attention their raw q/k/v (no q/k/v kernel; KV-shared and K=V layers too: "all" has every feature); a prefill's
    attention runs the kernel first. The logits are the switch off's up to the new key's fp32 summation order. On the
    reference backend (no raw q/k/v taken) the q/k/v kernel runs at every step."""
    model, _ = models["all"]
    sel = simple_selection(model.args, backend="TRITON_ATTN")
    sel = sel.model_copy(update={"groups": tuple(g.model_copy(update={"build": "kselect"}) for g in sel.groups)})
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(3, 512, (9,), generator=g).tolist(), torch.randint(3, 512, (6,), generator=g).tolist()]
    cont = [torch.randint(3, 512, (2,), generator=g).tolist() for _ in prompts]
    from kselect.kernels.attn_qkv import RawQKV

    ops, rows, readies = fused.ops_for("triton"), [], []
    real, real_ready = ops.qkv_kernel, RawQKV.ready
    monkeypatch.setattr(ops, "qkv_kernel", lambda qkv, *a, **kw: rows.append(qkv.shape[0]) or real(qkv, *a, **kw))
    monkeypatch.setattr(RawQKV, "ready", lambda self: readies.append(self.qkv.shape[0]) or real_ready(self))

    def logits(selection):
        model.set_compute("triton")
        try:
            eng = Engine(model, selection, EngineConfig(max_seqs=2, max_seq_len=32))
            out = [torch.cat(eng.extend([0, 1], prompts, all_logits=True))]
            out += [eng.decode([0, 1], [c[i] for c in cont]) for i in range(2)]
            return torch.cat(out)
        finally:
            model.set_compute("auto")

    want = logits(sel)
    assert rows.count(2) == 2 * len(model.layers)  # the switch off: the kernel at every decode step's layer
    rows.clear()
    with fused.qkv_in_attention(True):
        got = logits(sel)
        assert not rows and readies == [15] * len(model.layers)  # the q/k/v kernel at the prefill only
        ref = logits(simple_selection(model.args))
        assert rows.count(2) == 2 * len(model.layers)
    assert max_rel_error(got, want) < 1e-5 and max_rel_error(ref, want) < 1e-5

"""The Hugging Face transformers baseline: the same weights in HF's Gemma-4 (sdpa), its logits checked against our
model, and its prefill and decode timed on torch's own threads."""

from __future__ import annotations

import contextlib
import statistics

import torch

from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from kselect.measurement.e2e.timing import timed_s
from kselect.measurement.e2e_report import WRONG
from kselect.measurement.step_profile import free

# torch's intra-op threads before any engine shrinks them (gemma4/host_threads.py: one on a GPU, process-wide): HF's
# baseline runs on these, as users run HF, not on the engines' serving thread
HF_THREADS = torch.get_num_threads()


@contextlib.contextmanager
def params_on_meta():
    """Build a module with its parameters on the meta device (buffers stay real: RoPE tables etc.)."""
    orig = torch.nn.Module.register_parameter

    def reg(self, name, param):
        orig(self, name, param)
        p = self._parameters.get(name)
        if p is not None and p.device.type != "meta":
            self._parameters[name] = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    torch.nn.Module.register_parameter = reg
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = orig


def hf_model(model):
    """HF Gemma4ForCausalLM (sdpa) sharing `model`'s tensors (meta build + load_state_dict(assign=True))."""
    import copy

    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(model.args.to_hf_text_config())
    with params_on_meta():
        hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=model.dtype)
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    res = hf.load_state_dict(sd, strict=False, assign=True)
    if res.unexpected_keys or res.missing_keys != ["lm_head.weight"]:
        raise RuntimeError(f"HF state dict mismatch: missing {res.missing_keys[:5]}, unexpected {res.unexpected_keys[:5]}")
    hf.lm_head.weight = hf.model.embed_tokens.weight  # tied
    hf = hf.to(model.device).eval()  # moves the (real) buffers; assigned parameters are already there
    meta = [n for n, t in list(hf.named_parameters()) + list(hf.named_buffers()) if t.device.type == "meta"]
    if meta:
        raise RuntimeError(f"HF model still has meta tensors: {meta[:5]}")
    ours = {t.data_ptr() for t in model.state_dict().values()}
    shared = sum(p.data_ptr() in ours for p in hf.parameters())
    if shared != len(list(hf.parameters())):
        raise RuntimeError(f"only {shared} of {len(list(hf.parameters()))} HF parameters share our tensors")
    return hf


@torch.inference_mode()
def hf_logits_check(model, hf, ref_groups, prompts) -> dict:
    from kselect.kernels.tolerances import tolerance

    eng = Engine(model, ref_groups, EngineConfig(max_seqs=len(prompts), max_seq_len=len(prompts[0]), cuda_graphs=False))
    ours = eng.extend(list(range(len(prompts))), prompts).float()
    ids = torch.tensor(prompts, device=model.device)
    theirs = hf(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1).logits[:, -1].float()
    err = max_rel_error(ours, theirs)
    tol = 5 * tolerance(model.dtype)  # two independent implementations, each within the dtype's bar
    del eng
    free()
    return dict(max_rel_err=err, tolerance=tol, verdict="ok" if err <= tol else WRONG,
                argmax_agree=float((ours.argmax(-1) == theirs.argmax(-1)).float().mean()),
                what="last-token logits, our model on TORCH_REFERENCE vs HF sdpa, same weights")


@contextlib.contextmanager
def hf_threads():
    """torch's intra-op threads at HF_THREADS while HF is timed, the engines' count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(HF_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Inference mode around the warm-up calls too: HF's parameters require grad, so a forward outside it keeps
# every layer's activations for a backward (31B at 4,096 tokens ran out of memory so).
@torch.inference_mode()
@hf_threads()
def time_hf(hf, prompts, new: int, reps: int, device) -> dict:
    ids = torch.tensor(prompts, device=device)
    am = torch.ones_like(ids)
    b, n = ids.shape
    gen_kw = dict(attention_mask=am, do_sample=False, pad_token_id=0, eos_token_id=None)

    timed = lambda fn: timed_s(fn, device)  # noqa: E731
    prefill = lambda: hf(input_ids=ids, attention_mask=am, logits_to_keep=1)  # noqa: E731
    prefill()
    hf.generate(ids, max_new_tokens=3, min_new_tokens=3, **gen_kw)  # warm-up
    pre = statistics.median(timed(prefill) for _ in range(reps))
    gen = statistics.median(timed(lambda: hf.generate(ids, max_new_tokens=new, min_new_tokens=new, **gen_kw))
                            for _ in range(max(1, reps - 1)))
    dec = max(gen - pre, 1e-9)
    out = dict(prefill_tok_s=b * n / pre, decode_tok_s=b * (new - 1) / dec, prefill_ms=pre * 1e3,
               decode_ms_per_step=dec / (new - 1) * 1e3, generate_s=gen, new_tokens=new)
    free()
    return out


@torch.inference_mode()
@hf_threads()
def time_hf_prefill(hf, n: int, vocab: int, reps: int, device, seed: int) -> dict:
    """HF's B1 prefill of one n-token prompt (logits of the last token only), as time_hf's prefill."""
    ids = torch.randint(3, vocab, (1, n), generator=torch.Generator().manual_seed(seed)).to(device)
    am = torch.ones_like(ids)
    run = lambda: hf(input_ids=ids, attention_mask=am, logits_to_keep=1)  # noqa: E731
    run()
    p = statistics.median(timed_s(run, device) for _ in range(reps))
    free()
    return dict(prefill_tok_s=n / p, prefill_ms=p * 1e3, reps=reps)

"""A fake GPU for objective tests: conformance verdicts and perf buckets written to a temp dir."""

from __future__ import annotations

import itertools

import yaml

from kselect.selector.evidence.perf_data import PerfEntry, StepEntry

GPU = "fake_gpu"
PATHS = ("FLASH_ATTN_v4", "FLASHINFER", "TRITON_ATTN")
FEATURES = ("causal", "window", "page16", "page32", "page64")


def write_conformance(tmp, unverified=("TRITON_ATTN:bf16:d512",), refuted=(), extra=None):
    claims = {cid: {"status": st, "rel_err": 0.002} for cid, st in (extra or {}).items()}
    for path, dt, head, feat in itertools.product(PATHS, ("bf16", "fp8"), (256, 512), FEATURES):
        cid = f"{path}:{dt}:d{head}:{feat}"
        if any(cid.startswith(u) for u in unverified):
            continue  # never run: unverified
        bad = any(cid.startswith(r) for r in refuted)
        claims[cid] = {"status": "refuted" if bad else "verified", "rel_err": 0.5 if bad else (0.02 if dt == "fp8" else 0.002)}
    (tmp / f"{GPU}.yaml").write_text(yaml.safe_dump({"gpu": GPU, "claim_count": len(claims), "claims": claims}))


ANY_PAGE, PAGES = 1, (16, 32, 64, 128)  # an entry at ANY_PAGE is written at every page in PAGES


def entry(kernel, head, phase, ms, kv="bf16", batch=1, context=None, page=ANY_PAGE):
    """A fake bucket; by default the kernel runs equally fast at every page (page-specific tests set one)."""
    window = 1024 if head == 256 else None
    hkv = 16 if head == 256 else 4
    context = context or (8192 if phase == "decode" else 4096)
    return PerfEntry(kernel=kernel, build=kernel, versions={"torch": "x"}, kv=kv, head=head, window=window, phase=phase,
                     batch=batch, context=context, num_q_heads=32, num_kv_heads=hkv, page=page, ms=ms, graph=True,
                     gpu=GPU, date="2026-11-30")


def step(wall_ms, kernel_ms, model="gemma4_31b", context=4096):
    return StepEntry(model=model, phase="prefill", batch=1, context=context, backends="x", wall_ms=wall_ms,
                     kernel_ms=kernel_ms, attention_ms=0.1 * kernel_ms, gpu=GPU, date="2026-12-01")


def write_perf(tmp, entries, steps=()):
    every = [e.model_copy(update={"page": p}) if e.page == ANY_PAGE else e for e in entries
             for p in (PAGES if e.page == ANY_PAGE else (e.page,))]
    doc = {"gpu": GPU, "entries": {e.bucket: e.model_dump(mode="json") for e in every},
           "steps": {st.key: st.model_dump(mode="json") for st in steps}}
    (tmp / f"{GPU}.yaml").write_text(yaml.safe_dump(doc))

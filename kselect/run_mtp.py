"""`kselect run` with `spec_decode=mtp`: speculative decoding with each drafter next to plain decoding
(gemma4/speculative.py), as one table."""

from __future__ import annotations

from kselect.gemma4.build import build_drafters
from kselect.gemma4.speculative import SpeculativeDecoder


def report_mtp(cfg, selection, engine, prompts: list[list[int]], plain, *, max_new_tokens: int,
               temperature: float = 0.0, top_k: int = 0, seed: int = 0, drafter_checkpoint: str | None = None,
               inits=("random", "copy"), out=print, mm_spans=None) -> list[dict]:
    """The main job's `spec_decode=mtp` part: speculative decoding with each drafter next to `plain`
    (the engine's plain decoding of the same prompts): acceptance, mean accepted length, tokens/s."""
    k = int(cfg.spec_decode.num_speculative_tokens)
    rows = []
    drafters = build_drafters(cfg, engine.model, checkpoint=drafter_checkpoint, seed=seed + 1, inits=inits)
    for label, drafter in drafters:
        sd = SpeculativeDecoder(engine, drafter, selection, num_speculative_tokens=k)
        sd.generate(prompts, 2, temperature=temperature, top_k=top_k, seed=seed, mm_spans=mm_spans)  # warm-up
        res = sd.generate(prompts, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed, mm_spans=mm_spans)
        st = res.stats
        rows.append(dict(drafter=label, draft_kv_scales=sd.scales_mode, k=k, acceptance_rate=st.acceptance_rate,
                         mean_accepted_length=st.mean_accepted_length, decode_tok_s=res.decode_tok_s,
                         plain_decode_tok_s=plain.decode_tok_s, target_passes=res.target_passes,
                         identical=(res.tokens == plain.tokens) if temperature <= 0 else None,
                         acceptance_at=st.to_dict()["acceptance_at"]))
    scales = ", ".join(f"{LAYER_TO_GROUP.get(t, t)}={m}" for t, m in sorted(rows[0]["draft_kv_scales"].items()))
    groups = [g for g in selection.groups if g.draft]
    out(f"\nspeculative decoding (MTP, k={k}, constant draft positions, draft groups on "
        f"{', '.join(sorted({g.backend for g in groups}))}; draft KV scales: {scales}):")
    out(f"  {'drafter':<28} {'acceptance':>10} {'mean len':>8} {'decode tok/s':>12} {'vs plain':>8} "
        f"{'target passes':>13}  greedy == plain")
    out(f"  {'plain decoding':<28} {'-':>10} {'1.00':>8} {plain.decode_tok_s:>12,.0f} {'1.00x':>8} "
        f"{plain.decode_tokens // max(1, len(prompts)):>13}  -")
    for r in rows:
        same = "-" if r["identical"] is None else ("yes" if r["identical"] else "NO")
        out(f"  {r['drafter']:<28} {r['acceptance_rate']:>10.1%} {r['mean_accepted_length']:>8.2f} "
            f"{r['decode_tok_s']:>12,.0f} {r['decode_tok_s'] / plain.decode_tok_s:>7.2f}x {r['target_passes']:>13}  {same}")
    out("  (acceptance = accepted / proposed drafts; mean len = tokens per verification pass and sequence; "
        "random drafter weights accept little, the copy init proposes the last token again)")
    return rows


LAYER_TO_GROUP = {"sliding_attention": "sliding_window", "full_attention": "full_attention"}

"""A preset's measurements after every selection's B1 run: long prompts' prefill (and the chunk sweep), attention
profiles, and the prefill metrics again in interleaved rounds (--prefill-rounds)."""

from __future__ import annotations

import torch

from kselect.measurement.e2e.options import PROFILE_PREFILLS, PROFILE_STEPS
from kselect.measurement.e2e.timing import first_line, measure, profile_attention, time_prefill
from kselect.measurement.e2e_report import measured_as, sel_label
from kselect.measurement.step_profile import free, profile_prefill


def extras(opts, rep, preset, model, todo, args, gen, left, log) -> None:
    """B1 prefill of --prefill-lens prompts per selection, the chunk sweep, attention profiles."""
    longs = {n: torch.randint(3, args.vocab_size, (n,), generator=gen).tolist() for n in opts.prefill_lens}
    for row, groups in todo:
        sname, point = row["selection"], row["point"]
        chunks = [None] + ([c for c in opts.chunk_sweep] if sname in opts.chunk_selections else [])
        for n, prompt in longs.items():
            if point not in ("", f"prefill {n}"):
                continue
            for c in chunks:
                if c is not None and c >= n:
                    continue
                r = dict(preset=preset, selection=sname, kv=row["kv"], prompt_len=n, chunk=c, point=point)
                if left() < 15:
                    rep.data["skipped"].append(f"{preset} {sname} kv={row['kv']} prefill {n} chunk {c}")
                    continue
                measure(rep, "prefills", r, f"{preset} {sname} kv={row['kv']} prefill {n} (chunk {c or 'whole'})", log,
                        lambda: time_prefill(model, groups, prompt, opts.reps, c),  # noqa: B023 (called at once)
                        lambda r: f"{r['prefill_tok_s']:,.0f} tok/s")
        if sname in opts.profile_selections and point in ("", "decode B1") and model.device.type == "cuda":
            if left() < 20:
                rep.data["skipped"].append(f"{preset} {sname} kv={row['kv']} profile")
                continue
            # the profiled steps' mean context is the decode point's (--prompt-len + --new / 2), where explain
            # reads its figures: a B1 decode kernel's time moves with the exact context (FA3's FP8 call: 28 us
            # at 512 tokens, 17 us at 544; bench/results/h200/perf_pages/)
            n = opts.prompt_len + opts.new // 2 - PROFILE_STEPS // 2
            prompt = torch.randint(3, args.vocab_size, (n,), generator=gen).tolist()
            measure(rep, "profiles", dict(preset=preset, selection=sname, kv=row["kv"], point=point),
                    f"{preset} {sname} kv={row['kv']} profile", log,
                    lambda: profile_attention(model, groups, prompt, PROFILE_STEPS),  # noqa: B023 (called at once)
                    lambda p: f"attention {p['attention_ms_per_step']:.3f} ms/step of {p['kernel_ms_per_step']:.2f}")
            # the B1 run's prefill of --prompt-len tokens, where explain reads its prefill figures
            pprompt = torch.randint(3, args.vocab_size, (opts.prompt_len,), generator=gen).tolist()
            measure(rep, "prefill_profiles", dict(preset=preset, selection=sname, kv=row["kv"], point=point),
                    f"{preset} {sname} kv={row['kv']} prefill profile", log,
                    lambda: profile_prefill(model, groups, pprompt, PROFILE_PREFILLS),  # noqa: B023 (called at once)
                    lambda p: f"attention {p['attention_ms']:.3f} ms of {p['kernel_ms']:.2f} ({p['mode']})")


def rounds(opts, rep, preset, model, todo, args, gen, left, log, graphs) -> None:
    """--prefill-rounds: per KV dtype and prefill metric, every selection measured at that metric's point, timed in
    interleaved rounds: the --prompt-len prompt as the B1 runs prefill it, --prefill-lens prompts eager as
    time_prefill does."""
    if not opts.prefill_rounds:
        return
    from kselect.measurement.prefill_rounds import interleaved_prefill  # noqa: PLC0415

    metrics = [("prefill B1 x prompt-len", opts.prompt_len, "decode B1", graphs)]
    # longer prompts eager, unless --prefill-graph-tokens admits them
    metrics += [(f"prefill B1 x {n}", n, f"prefill {n}", graphs if n <= opts.prefill_graph_tokens else False)
                for n in opts.prefill_lens]
    for kv in opts.kv:
        for metric, n, point, g in metrics:
            sels = rep.data["selections"]  # what the table reads at this point: each selection, or its twin
            wanted = {measured_as(sels, preset, x["selection"], kv, point) for x in sels if x["preset"] == preset}
            rows = [(r, gr) for r, gr in todo if (r["selection"], r["kv"], r["point"]) in wanted]
            if len(rows) < 2:
                continue
            if left() < 20 + 2 * len(rows):
                rep.data["skipped"].append(f"{preset} kv={kv} {metric} rounds")
                continue
            prompt = torch.randint(3, args.vocab_size, (n,), generator=gen).tolist()
            what = f"{preset} kv={kv} {metric}: {opts.prefill_rounds} interleaved rounds over {len(rows)} selections"
            try:
                got = interleaved_prefill(model, {i: gr for i, (_, gr) in enumerate(rows)}, prompt, opts.prefill_rounds, g,
                                          prefill_graph_tokens=opts.prefill_graph_tokens)
            except Exception as e:  # noqa: BLE001
                rep.data["errors"].append(f"{what}: {first_line(e)}")
                log(f"{what}: FAILED {first_line(e)}")
                free()
                continue
            for i, (r, _) in enumerate(rows):
                rep.data["prefill_rounds"].append(dict(preset=preset, selection=r["selection"], kv=kv, point=r["point"],
                                                       metric=metric, prompt_len=n, **got[i]))
            log(f"{what}: " + ", ".join(f"{sel_label(r)} {got[i]['prefill_tok_s']:,.0f}" for i, (r, _) in enumerate(rows)))
            free()
            rep.save()

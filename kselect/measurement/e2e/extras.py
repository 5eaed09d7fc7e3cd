"""A preset's measurements after every selection's B1 run: long prompts' prefill (and the chunk sweep), attention
profiles, and the prefill metrics again in interleaved rounds (--prefill-rounds)."""

from __future__ import annotations

import torch

from kselect.measurement.e2e.options import PROFILE_PREFILLS, PROFILE_STEPS
from kselect.measurement.e2e.state import Preset, Run
from kselect.measurement.e2e.timing import first_line, measure, profile_attention, time_prefill
from kselect.measurement.e2e_report import measured_as, sel_label
from kselect.measurement.step_profile import free, profile_prefill


def _tokens(p: Preset, n: int) -> list[int]:
    """n random prompt tokens from the preset's generator."""
    return torch.randint(3, p.model.args.vocab_size, (n,), generator=p.gen).tolist()


def extras(r: Run, p: Preset) -> None:
    """B1 prefill of --prefill-lens prompts per selection, the chunk sweep, attention profiles."""
    longs = {n: _tokens(p, n) for n in r.opts.prefill_lens}
    for row, groups in p.todo:
        _long_prefills(r, p, row, groups, longs)
        if row["selection"] in r.opts.profile_selections and row["point"] in ("", "decode B1") \
                and p.model.device.type == "cuda":
            _profiles(r, p, row, groups)


def _long_prefills(r: Run, p: Preset, row: dict, groups: dict, longs: dict[int, list[int]]) -> None:
    """One selection's B1 prefill of each --prefill-lens prompt it was resolved for, whole and (--chunk-sweep) in
    chunks."""
    sname, point = row["selection"], row["point"]
    chunks = [None] + ([c for c in r.opts.chunk_sweep] if sname in r.opts.chunk_selections else [])
    for n, prompt in longs.items():
        if point not in ("", f"prefill {n}"):
            continue
        for c in chunks:
            if c is not None and c >= n:
                continue
            rec = dict(preset=p.name, selection=sname, kv=row["kv"], prompt_len=n, chunk=c, point=point)
            if r.left() < 15:
                r.rep.data["skipped"].append(f"{p.name} {sname} kv={row['kv']} prefill {n} chunk {c}")
                continue
            measure(r.rep, "prefills", rec, f"{p.name} {sname} kv={row['kv']} prefill {n} (chunk {c or 'whole'})", r.log,
                    lambda: time_prefill(p.model, groups, prompt, r.opts.reps, c),  # noqa: B023 (called at once)
                    lambda x: f"{x['prefill_tok_s']:,.0f} tok/s")


def _profiles(r: Run, p: Preset, row: dict, groups: dict) -> None:
    """One selection's attention profiles: B1 decode steps at the decode point, and the B1 prefill."""
    sname, head = row["selection"], dict(preset=p.name, selection=row["selection"], kv=row["kv"], point=row["point"])
    if r.left() < 20:
        r.rep.data["skipped"].append(f"{p.name} {sname} kv={row['kv']} profile")
        return
    # the profiled steps' mean context is the decode point's (--prompt-len + --new / 2), where explain
    # reads its figures: a B1 decode kernel's time moves with the exact context (FA3's FP8 call: 28 us
    # at 512 tokens, 17 us at 544; bench/results/h200/perf_pages/)
    prompt = _tokens(p, r.opts.prompt_len + r.opts.new // 2 - PROFILE_STEPS // 2)
    measure(r.rep, "profiles", dict(head), f"{p.name} {sname} kv={row['kv']} profile", r.log,
            lambda: profile_attention(p.model, groups, prompt, PROFILE_STEPS),
            lambda x: f"attention {x['attention_ms_per_step']:.3f} ms/step of {x['kernel_ms_per_step']:.2f}")
    # the B1 run's prefill of --prompt-len tokens, where explain reads its prefill figures
    pprompt = _tokens(p, r.opts.prompt_len)
    measure(r.rep, "prefill_profiles", dict(head), f"{p.name} {sname} kv={row['kv']} prefill profile", r.log,
            lambda: profile_prefill(p.model, groups, pprompt, PROFILE_PREFILLS),
            lambda x: f"attention {x['attention_ms']:.3f} ms of {x['kernel_ms']:.2f} ({x['mode']})")


def rounds(r: Run, p: Preset) -> None:
    """--prefill-rounds: per KV dtype and prefill metric, every selection measured at that metric's point, timed in
    interleaved rounds: the --prompt-len prompt as the B1 runs prefill it, --prefill-lens prompts eager as
    time_prefill does."""
    opts = r.opts
    if not opts.prefill_rounds:
        return
    metrics = [("prefill B1 x prompt-len", opts.prompt_len, "decode B1", r.graphs)]
    # longer prompts eager, unless --prefill-graph-tokens admits them
    metrics += [(f"prefill B1 x {n}", n, f"prefill {n}", r.graphs if n <= opts.prefill_graph_tokens else False)
                for n in opts.prefill_lens]
    for kv in opts.kv:
        for metric in metrics:
            _metric_rounds(r, p, kv, metric)


def _metric_rounds(r: Run, p: Preset, kv: str, metric: tuple) -> None:
    """One metric's interleaved rounds over the selections the objective table reads at its point (each selection,
    or its twin); metric: (name, prompt tokens, point, CUDA graphs)."""
    from kselect.measurement.prefill_rounds import interleaved_prefill  # noqa: PLC0415

    name, n, point, graphs = metric
    sels = r.rep.data["selections"]
    wanted = {measured_as(sels, p.name, x["selection"], kv, point) for x in sels if x["preset"] == p.name}
    rows = [(row, gr) for row, gr in p.todo if (row["selection"], row["kv"], row["point"]) in wanted]
    if len(rows) < 2:
        return
    if r.left() < 20 + 2 * len(rows):
        r.rep.data["skipped"].append(f"{p.name} kv={kv} {name} rounds")
        return
    prompt = _tokens(p, n)
    what = f"{p.name} kv={kv} {name}: {r.opts.prefill_rounds} interleaved rounds over {len(rows)} selections"
    try:
        got = interleaved_prefill(p.model, {i: gr for i, (_, gr) in enumerate(rows)}, prompt, r.opts.prefill_rounds,
                                  graphs, prefill_graph_tokens=r.opts.prefill_graph_tokens)
    except Exception as e:  # noqa: BLE001
        r.rep.data["errors"].append(f"{what}: {first_line(e)}")
        r.log(f"{what}: FAILED {first_line(e)}")
        free()
        return
    for i, (row, _) in enumerate(rows):
        r.rep.data["prefill_rounds"].append(dict(preset=p.name, selection=row["selection"], kv=kv, point=row["point"],
                                                 metric=name, prompt_len=n, **got[i]))
    r.log(f"{what}: " + ", ".join(f"{sel_label(row)} {got[i]['prefill_tok_s']:,.0f}" for i, (row, _) in enumerate(rows)))
    free()
    r.rep.save()

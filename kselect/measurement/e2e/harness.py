"""The run loop: per preset, build the model, resolve and check every selection, check HF's logits, then time every
selection (and HF) batch by batch; the report is saved after every measurement, and a WRONG numerics verdict makes the
run exit 1 once everything is measured."""

from __future__ import annotations

import time
import torch

from kselect.gemma4.build import build_model, select
from kselect.gemma4.engine import model_groups, reference_groups
from kselect.measurement.e2e.environment import ceilings, environment
from kselect.measurement.e2e.extras import extras, rounds
from kselect.measurement.e2e.hf import hf_logits_check, hf_model, time_hf, time_hf_prefill
from kselect.measurement.e2e.numerics import numerics_check
from kselect.measurement.e2e.options import Options, point_overrides, run_points, selection_overrides, smoke_sized
from kselect.measurement.e2e.selections import capacity, describe, signature
from kselect.measurement.e2e.state import Preset, Run
from kselect.measurement.e2e.timing import first_line, measure, time_engine
from kselect.measurement.e2e_report import HF, WRONG, Report, fnum, objective_table, sel_label
from kselect.measurement.step_profile import free


def run(opts: Options, command: str) -> int:
    """The harness on typed options; `command` is what the report records as the run's command."""
    opts = smoke_sized(opts)
    t0 = time.perf_counter()
    r = Run(opts, Report(opts.out, environment([], command=command), opts.model_dump(mode="json")), t0,
             False if opts.no_cuda_graphs else None)
    torch.manual_seed(opts.seed)
    for name in opts.presets:
        if r.left() < 30:
            r.skip(f"{name} (all)")
            continue
        p = _build(r, name)
        if p is None:
            continue
        for sname, kv, point in ((n, k, pt) for n in opts.selections for k in opts.kv
                                 for pt in run_points(opts, n, p.batches)):
            if f"{sname}:{kv}" not in opts.skip:
                _selection(r, p, sname, kv, point)
        hf = _hf_checked(r, p)
        for bi, b in enumerate(p.batches):
            _batch(r, p, hf, bi, b)
        del hf, p
        free()
        r.log(f"{name}: done, model freed")
    return _finish(r)


def _build(r: Run, name: str) -> Preset | None:
    """The preset's model (seeded weights), its facts in the report, and its prompts; None where it fails to build."""
    opts, rep = r.opts, r.rep
    t = time.perf_counter()
    try:
        cfg0, _ = select([f"platform={opts.platform}", f"model={name}"])
        model, _, source = build_model(cfg0, opts.seed)
    except Exception as e:  # noqa: BLE001
        rep.data["errors"].append(f"{name}: build failed: {first_line(e)}")
        r.log(f"{name}: build failed: {first_line(e)}")
        rep.save()
        return None
    if model.device.type == "cuda":
        torch.cuda.synchronize()
        if not rep.data["ceilings"]:
            rep.data["ceilings"] = ceilings(model.device)
    elif sum(p.numel() for p in model.parameters()) < 5e7:
        torch.set_num_threads(1)
    args, dev = model.args, model.device
    n = sum(p.numel() for p in model.parameters())
    wbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ple = model.embed_tokens_per_layer.weight if args.hidden_size_per_layer_input else None
    read = wbytes - (ple.numel() * ple.element_size() if ple is not None else 0)  # PLE table: a lookup
    info = dict(source=source, params_b=n / 1e9, weight_gb=wbytes / 1e9, decode_read_gb=read / 1e9,
                build_s=round(time.perf_counter() - t, 2), device=str(dev), dtype=args.dtype,
                sliding_window=args.sliding_window)
    if rep.data["ceilings"].get("copy_gbs"):
        info["roofline_b1_tok_s"] = rep.data["ceilings"]["copy_gbs"] * 1e9 / read
    if dev.type == "cuda":
        info["gpu_mem_after_build_gib"] = round(torch.cuda.memory_allocated() / 2**30, 1)
    rep.data["presets"][name] = info
    r.log(f"{name}: {n / 1e9:.2f}B params ({wbytes / 1e9:.1f} GB) built in {info['build_s']} s on {dev}")
    rep.save()
    g = torch.Generator().manual_seed(opts.seed + 1)
    batches = list(opts.batches) + ([64] if opts.e4b_batch_64 and name == "gemma4_e4b" and 64 not in opts.batches else [])
    prompts = torch.randint(3, args.vocab_size, (max(batches), opts.prompt_len), generator=g).tolist()
    check_len = min(args.sliding_window + 64, args.max_position_embeddings - opts.check_steps - 2)
    check_prompts = torch.randint(3, args.vocab_size, (opts.check_batch, check_len), generator=g).tolist()
    return Preset(name, model, info, batches, g, prompts, check_prompts)


def _selection(r: Run, p: Preset, sname: str, kv: str, point: str) -> None:
    """One selection at one KV dtype and point: its groups and capacity, then its numerics check; a selection that
    resolves to groups already measured is measured once (`same_as`, or the numerics of the same kernels)."""
    opts, rep = r.opts, r.rep
    row = dict(preset=p.name, selection=sname, kv=kv, point=point)
    rep.data["selections"].append(row)
    try:
        base = [f"platform={opts.platform}", f"model={p.name}"]
        _, sel = select(base + [f"kv_cache={kv}", *selection_overrides(sname, opts.rules), *point_overrides(opts, point)])
        groups = model_groups(sel)
    except Exception as e:  # noqa: BLE001
        row["error"] = first_line(e)
        r.log(f"{p.name} {sname} kv={kv}: selection failed: {row['error']}")
        rep.save()
        return
    row.update(groups=describe(groups), capacity=capacity(p.model.args, groups, p.model.dtype, opts.capacity_gib))
    if p.ref_groups is None and kv == "auto":
        p.ref_groups = reference_groups(groups)
    sig = signature(groups)
    distinct = p.distinct.setdefault(sig, [])
    twin = None if sname == "vllm_twin" else next((x for x in distinct if x["point"] in ("", point)), None)
    if twin is not None:  # measured once: a row that runs at every point, or at this one
        row.update(same_as=f"{twin['selection']} kv={twin['kv']}", same_as_point=twin["point"],
                   numerics=twin.get("numerics"))
        rep.save()
        return
    numerics_of = distinct[0] if distinct else None  # the same kernels, measured at another point
    distinct.append(row)
    p.todo.append((row, groups))
    if numerics_of is not None:
        row["numerics"] = numerics_of.get("numerics")
    elif not opts.no_numerics:
        _numerics(r, p, row, groups)


def _numerics(r: Run, p: Preset, row: dict, groups: dict) -> None:
    if r.left() < 20:
        r.skip(f"{p.name} {row['selection']} kv={row['kv']} numerics")
        return
    what = f"{p.name} {row['selection']} kv={row['kv']}"
    try:
        row["numerics"] = nm = numerics_check(p.model, groups, p.check_prompts, r.opts.check_steps, r.graphs)
        shown = describe(groups)
        r.log(f"{what}: {shown['sliding_window']['backend']} / {shown['full_attention']['backend']}: numerics max rel "
              f"err per call {fnum(nm.get('attention_max_rel_err'), '.2e')}, logits drift {nm['max_rel_err']:.2e} "
              f"({nm['verdict']}), capacity {row['capacity']['tokens']:,} tokens")
    except Exception as e:  # noqa: BLE001
        row["numerics"] = dict(error=first_line(e))
        row["error"] = f"numerics: {first_line(e)}"
        r.log(f"{what}: numerics failed: {first_line(e)}")
        free()
    r.rep.save()


def _hf_checked(r: Run, p: Preset):
    """HF's model on our model's tensors, its last-token logits checked against ours; None where it is not run."""
    if r.opts.no_hf or p.ref_groups is None or r.left() <= 20:
        return None
    try:
        hf = hf_model(p.model)
        p.info["hf_check"] = hf_logits_check(p.model, hf, p.ref_groups, p.prompts[:2])
        r.log(f"{p.name}: HF logits check {p.info['hf_check']['max_rel_err']:.2e} ({p.info['hf_check']['verdict']})")
    except Exception as e:  # noqa: BLE001
        p.info["hf_check"] = dict(error=first_line(e))
        r.log(f"{p.name}: HF build/check failed: {first_line(e)}")
        hf = None
    r.rep.save()
    return hf


def _batch(r: Run, p: Preset, hf, bi: int, b: int) -> None:
    """Every selection at batch b (so each gets the small batches before any big one), then HF; the extras after
    every selection's B1 run (or after the only batch)."""
    opts = r.opts
    if bi == 1:  # after B1 of every selection: long prefill, chunk sweep, profiles, interleaved prefills
        _extras(r, p)
    for row, groups in p.todo:
        if row["point"] not in ("", f"decode B{b}"):
            continue
        rec = dict(preset=p.name, selection=row["selection"], kv=row["kv"], batch=b, point=row["point"],
                   prompt_len=opts.prompt_len, new_tokens=opts.new, backends={k: v["backend"] for k, v in row["groups"].items()})
        if r.left() < 15:
            r.rep.data["skipped"].append(f"{p.name} {row['selection']} kv={row['kv']} B{b}")
            continue
        measure(r.rep, "runs", rec, f"{p.name} {row['selection']} kv={row['kv']} B{b}", r.log,
                lambda: time_engine(p.model, groups, p.prompts[:b], opts.new, opts.reps, r.graphs),  # noqa: B023
                lambda x: f"prefill {x['prefill_tok_s']:,.0f} tok/s, decode {x['decode_tok_s']:,.1f} tok/s "
                          f"({x['decode_ms_per_step']:.2f} ms/step, graphs {'on' if x['cuda_graphs'] else 'off'})")
    if len(p.batches) == 1:
        _extras(r, p)
    if hf is not None:
        _hf_batch(r, p, hf, b)


def _extras(r: Run, p: Preset) -> None:
    extras(r, p)
    rounds(r, p)


def _hf_batch(r: Run, p: Preset, hf, b: int) -> None:
    """HF at batch b; at B1 also its prefill of each --prefill-lens prompt."""
    opts, dev = r.opts, p.model.device
    if r.left() < 15:
        r.skip(f"{p.name} HF B{b}")
        return
    measure(r.rep, "hf", dict(preset=p.name, batch=b, prompt_len=opts.prompt_len), f"{p.name} HF sdpa B{b}", r.log,
            lambda: time_hf(hf, p.prompts[:b], opts.hf_new, opts.reps, dev),
            lambda h: f"prefill {h['prefill_tok_s']:,.0f} tok/s, decode {h['decode_tok_s']:,.1f} tok/s")
    for n in opts.prefill_lens if b == 1 else ():
        if r.left() < 15:
            r.rep.data["skipped"].append(f"{p.name} HF prefill {n}")
            continue
        measure(r.rep, "prefills", dict(preset=p.name, selection=HF, kv="auto", prompt_len=n, chunk=None),
                f"{p.name} HF sdpa prefill {n}", r.log,
                lambda: time_hf_prefill(hf, n, p.model.args.vocab_size, opts.reps, dev, opts.seed + n),  # noqa: B023
                lambda x: f"{x['prefill_tok_s']:,.0f} tok/s")


def _finish(r: Run) -> int:
    """The objective table and the total time into the report; 1 (after writing it) where a selection was WRONG."""
    rep = r.rep
    rep.data["objective_table"] = objective_table(rep.data)
    rep.data["total_s"] = round(time.perf_counter() - r.t0, 1)
    rep.save()
    r.log(f"done -> {r.opts.out}/e2e.json, e2e.md")
    wrong = [f"{x['preset']} {sel_label(x)} kv={x['kv']}" for x in rep.data["selections"]
             if (x.get("numerics") or {}).get("verdict") == WRONG and "same_as" not in x]
    if wrong:  # results are written first; then the run fails, loudly
        print(f"numerics: {WRONG} (an attention call above its bar, or non-finite) for: {', '.join(wrong)}; "
              "exit status 1", flush=True)
        return 1
    return 0

"""List the capability claims to verify on a platform: every claim a selection of a
Gemma-4 preset relies on (under each overlay), plus what the capability declarations
claim at Gemma-4's head sizes, for the backends kselect implements.

    kselect claims platform=sm90 > claims.txt
    kselect conformance --claims claims.txt --gpu-name nvidia_h200 --out conf/conformance/nvidia_h200.yaml

A model, KV cache, multimodal switch, rules or overlay given on the command line narrows that axis to the value given
(`kselect claims platform=sm90 model=gemma4_e4b`: E4B's claims); the others run over every preset, cache and overlay.
One claim id a line; `output=json`: one JSON list (either is a `--claims` file for `kselect conformance`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from ..rules import blocks as blk
from ..config.compose import compose
from ..evidence.conformance_data import claims_for
from ..base.errors import KSelectError, SelectionError
from ..outputs.records import ClaimRun
from ..evidence.evidence import Evidence
from ..rules.resolve import resolve_path, resolve_rules
from ..rules.rulebook import rulebook
from ..config.vocab import Claim, parse_claim

IMPLEMENTED = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "TORCH_REFERENCE")
MODELS = ("gemma4_tiny", "gemma4_e2b", "gemma4_e4b", "gemma4_26b_a4b", "gemma4_31b")
# (rules option, overlay set): vLLM 0.33.0, and the seed's post_pr52987 with the overlays written for it
OVERLAYS = (("post_pr52987", "[]"), ("post_pr52987", "[pr48666]"), ("post_pr52987", "[pr53175]"), ("vllm_0_33_0", "[]"))


# which claims a selection relies on does not depend on what hardware said about them
NO_EVIDENCE = Evidence.none()


ComposeAll = Callable[[list[list[str]]], list]  # requests -> each one's config, or None: compose it on its own

# the axes the claims run over; a command-line value for one narrows it (one value each, never a repeated key)
AXES = ("model", "kv_cache", "model.multimodal", "rules", "overlay")


def _named(overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """(the overrides that are not an axis, each axis's value where the command line gives one: the last wins)."""
    rest, named = [], {}
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and key in AXES:
            named[key] = value
        else:
            rest.append(o)
    return rest, named


def _axis(named: dict[str, str], key: str, values: tuple[str, ...]) -> tuple[str, ...]:
    return (named[key],) if key in named else values


def _rule_sets(named: dict[str, str], rules: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(rules, overlay) pairs narrowed to the command line's; a pair it names that is not listed runs as named."""
    hit = [(r, ov) for r, ov in rules if named.get("rules", r) == r and named.get("overlay", ov) == ov]
    return hit or [(named.get("rules", rules[0][0]), named.get("overlay", "[]"))]


def selection_claims(platform_overrides: list[str], compose_all: ComposeAll | None = None) -> set[str]:
    """`compose_all`: composes many requests at once (`kselect claims` passes the matrix Builder's batch,
    selector/review/bulk.py configs_of); a request it leaves None is composed here, on its own."""
    out: set[str] = set()
    base, named = _named(platform_overrides)
    axes = itertools.product(_axis(named, "model", MODELS), _axis(named, "kv_cache", ("auto", "fp8")),
                             _axis(named, "model.multimodal", ("false", "true")), _rule_sets(named, list(OVERLAYS)))
    requests = [[*base, f"model={model}", f"kv_cache={kv}", f"model.multimodal={mm}", f"rules={rules}",
                 f"overlay={ov}"] for model, kv, mm, (rules, ov) in axes]
    for over, cfg in zip(requests, compose_all(requests) if compose_all else [None] * len(requests)):
        try:
            cfg = cfg if cfg is not None else compose(over)
            sel = resolve_rules(cfg, rulebook(cfg), NO_EVIDENCE)
        except SelectionError:
            continue
        out |= {c.claim for g in sel.groups for c in g.claims}
    return out


def objective_claims(platform_overrides: list[str], rules: tuple[str, ...] = ("vllm_0_33_0",),
                     blocks: tuple[int | None, ...] = (None, 64, 128), compose_all: ComposeAll | None = None) -> set[str]:
    """Claims an objective (selector/measure/objective.py) may rely on: every combination of implemented
    per-group backends, FA3 included, at the combination's own cache block and at the larger blocks
    a prefill kernel may ask for (selector/measure/layout.py best_layout). The 31B full group's head-512 pages of 32
    (d512:page32) come from here: vLLM's own choice never pins TRITON_ATTN or FLASHINFER there."""
    from ..measure.builds import group_builds  # noqa: PLC0415
    from ..measure.pins import choices, fa_pin, pinned  # noqa: PLC0415

    out: set[str] = set()
    names = [n for n in IMPLEMENTED if n != "TORCH_REFERENCE"]
    base, named = _named(platform_overrides)
    pairs = _rule_sets(named, [(r, "[]") for r in rules])
    requests = [[*base, *([f"model.multimodal={named['model.multimodal']}"] if "model.multimodal" in named else []),
                 f"model={model}", f"kv_cache={kv}", f"rules={r}", f"overlay={ov}"]
                for model, kv, (r, ov) in itertools.product(_axis(named, "model", MODELS),
                                                            _axis(named, "kv_cache", ("auto", "fp8")), pairs)]
    for over, cfg in zip(requests, compose_all(requests) if compose_all else [None] * len(requests)):
        try:
            cfg = cfg if cfg is not None else compose(over)
            book = rulebook(cfg)
            kinds = [g.kind for g in resolve_rules(cfg, book, NO_EVIDENCE).groups if not g.draft]
        except SelectionError:
            continue
        for combo in itertools.product(*(choices(cfg, names) for _ in kinds)):
            version = fa_pin(combo)
            if version == "mixed":
                continue
            for block in blocks:
                try:
                    sel = resolve_rules(pinned(cfg, {k: n for k, (n, _) in zip(kinds, combo)}, block, version), book, NO_EVIDENCE)
                except SelectionError:
                    continue
                # and the same kernels on the other builds the platform has (selector/measure/builds.py)
                out |= {c.claim for g in sel.groups for v in (g, *group_builds(cfg, g, NO_EVIDENCE)) for c in v.claims}
    return out


def declared_claims(platform_overrides: list[str], heads=(256, 512)) -> set[str]:
    cfg = compose(platform_overrides)
    p = cfg.platform
    out: set[str] = set()
    for name in IMPLEMENTED:
        cap = cfg.capabilities.get(name)
        if cap is None or p.device not in cap.devices or (cap.package and not getattr(p.packages, cap.package)):
            continue
        versions = [v for v in (3, 4) if cap.flash_attn and getattr(p.packages, f"fa{v}")] if cap.flash_attn else [None]
        pages = sorted({16, 64, blk.smallest(cap.kernel_block_sizes)})
        for v, h in itertools.product(versions, heads):
            if not cap.head_sizes.allows(h) or (v is not None and v < 4 and h > 256):
                continue  # FA2/FA3 stop at 256 (the fa_version rules upgrade larger heads to FA4)
            dts = ["bf16"] + (["fp8"] if "fp8" in cap.kv_cache_dtypes else [])
            feats = ["causal"] + [f"page{n}" for n in pages if blk.supports(cap.kernel_block_sizes, n)]
            feats += [f for f, on in (("window", cap.sliding_window), ("mm_prefix", cap.mm_prefix), ("sinks", cap.sinks)) if on]
            for dt in dts:
                out |= {Claim(name, v, dt, h, f).id for f in feats}
                if dt == "fp8" and cap.quant_query:
                    out.add(Claim(name, v, "fp8", h, "quant_query").id)
    return out


def claim_runs(ids: list[str], platform_overrides: list[str] | tuple[str, ...] = ("platform=auto",)) -> dict[str, ClaimRun]:
    """How to run each claim (descale mode, page size) on `platform`, read from the selection of a
    stand-alone group on the claim's kernel path (under the seed's rules, else each (rules,
    overlay) pair of OVERLAYS). Raises ValueError for a malformed id."""
    return {cid: _claim_run(parse_claim(cid), tuple(platform_overrides)) for cid in ids}


def _claim_run(c: Claim, platform: tuple[str, ...]) -> ClaimRun:
    over = [*platform, f"model.dtype={c.model_dtype}", f"kv_cache={c.kv_cache_dtype or 'auto'}", f"attention.backend={c.backend}"]
    over += [f"attention.flash_attn_version={c.version}"] * bool(c.version) + [f"kv_cache.block_size={c.page}"] * bool(c.page)
    over += ["model.multimodal=true"] * (c.feature == "mm_prefix")
    kind = "sliding_window" if c.feature == "window" else "full_attention"
    # a preset with layers of the claim's head size, as rules keyed on model shapes expect
    model = next((m for m in MODELS if c.head in _heads(m)), "gemma4_tiny")
    over.append(f"model={model}")
    for rules, ov in OVERLAYS:
        try:
            cfg = _compose((*over, f"rules={rules}", f"overlay={ov}"))
            g = resolve_path(cfg, kind, c.head)
        except KSelectError:
            continue
        cap = cfg.capabilities[c.backend]
        descale = "q_k_v" if c.feature == "quant_query" else g.descale  # the feature is a quantized q
        return ClaimRun(claim=c.id, descale=descale, page=g.kernel_block_size, per_head_scales=cap.per_head_quant_scales,
                        source=" ".join((*over, f"rules={rules}", f"overlay={ov}")))  # fmt: skip
    cap = _compose(tuple(platform)).capabilities.get(c.backend)
    if cap is None:
        raise ValueError(f"claim {c.id}: no backend {c.backend} in the capabilities")
    descale = "q_k_v" if c.feature == "quant_query" else ("k_v" if c.fp8 else "none")
    page = c.page or blk.preferred(cap.kernel_block_sizes, 16)
    return ClaimRun(claim=c.id, descale=descale, page=page, per_head_scales=cap.per_head_quant_scales, source=f"capabilities.{c.backend}")


@functools.lru_cache(maxsize=None)
def _heads(model: str) -> set[int]:
    m = _compose(("platform=cpu", f"model={model}")).model
    return {m.head_dim, m.global_head_dim}


@functools.lru_cache(maxsize=256)
def _compose(overrides: tuple[str, ...]):
    return compose(list(overrides))


__all__ = ["claim_runs", "claims_for", "declared_claims", "objective_claims", "selection_claims"]

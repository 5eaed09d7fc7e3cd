"""The human vocabulary: every record of `records.py` rendered as text, in one place. Only
outputs (table, Markdown, HTML, vLLM comments, error messages) use these; no module reads
the text back. Tests rename these labels and check that diffs, plots and gathers are unchanged.
"""

from __future__ import annotations

from typing import Any

# capability field -> what the rejection says
REJECT_PHRASE = {
    "device": "device {value} not supported",
    "package": "ImportError: {value} is not installed on this platform",
    "head_size": "head_size not supported",
    "dtype": "dtype not supported",
    "kv_cache_dtype": "kv_cache_dtype not supported",
    "block_size": "block_size not supported (kernel blocks {kernel_blocks})",
    "mm_prefix": "partial multimodal token full attention not supported",
    "compute_capability": "compute capability not supported",
    "sliding_window": "sliding window not supported",
    "mla": "MLA not supported",
    "non_mla": "non-MLA not supported",
    "sinks": "attention sinks not supported",
    "sparse": "sparse not supported",
    "non_sparse": "non-sparse not supported",
}
WARNING_PHRASE = {
    "orphan_rule": "overlay disabled rule '{rule}', which no config defines (no effect)",
    "block_size_precluded": "kv_cache.block_size={block_size} precluded higher-priority backend(s) {backends}",
    "claims_refuted": "REFUTED on {gpu}: {claims} [conformance]",
    "claims_unverified": "unverified on {gpu}: {claims} [conformance]",
    "objective_no_measurement": "objective {objective}: {backend} left out of {phase}: no measurement covers {shape} [perf]",
    "objective_kept_vllm": "objective {objective}: no combination of backends is valid, verified and measured on {gpu}; "
    "kept vLLM's selection (no guess) [perf]",
    "objective_all_pinned": "objective {objective}: every group is pinned; nothing to choose",
    "setting_ignored": "{setting} is ignored by vLLM: {reason}; kselect selects as vLLM does (strict=true refuses it)",
    "kernel_data_version": "{data} was measured with {library} {measured}, but rules={rules} ships {library} "
    "{release}: its figures are from another version [kernel versions]",
    "objective_mixed_timing": "objective {objective}: the {phase} figures compared for this group were not timed alike "
    "({timings}); time them the same way (kselect perf --fence) [perf]",
    "objective_other_version": "objective {objective}: the {phase} figure of {backend} ranked here was measured on "
    "{versions}, not vLLM {release}'s kernel; re-measure it on the release's (kselect perf) [perf]",
}
CLAIM_RUN = "{claim}: page {page}, descale {descale} (from {source})"
RULE_PHRASE = "{reason} [{rule}]"  # a reject or warning rule: its declared reason and id
SOURCE_TAG = " [{source}]"  # where a capability rejection is declared
FAILURE_PHRASE = {
    "no_priority_rule": "no priority rule matches platform {platform} (device {device})",
    "pin_invalid": "Selected backend {backend} (from {pin_source}) is not valid for the {group} group (head {head}). "
    "No fallback for an explicit backend.",
    "no_valid_backend": "No valid attention backend for the {group} group (head {head}) on {platform} with model "
    "{model} {dtype}, kv_cache {kv_dtype}. Reasons:",
    "draft_backend_invalid": "MTP draft {group} layers must run on the target's backend {backend}, which is not valid for them.",
    "page_unify": "cannot unify KV page sizes: the {group} page ({page} bytes) does not divide the largest ({largest_page} bytes)",
    "no_common_block": "No common block size for {kv_block}: {backend} kernel blocks {kernel_blocks}",
    "init_failure": "vLLM fails after selecting {backend} for the {group} group (head {head}):",
    "no_common_cache_block": "The attention backends share no supported KV cache block size:",
    "architecture_not_modelled": "rules={rules} does not model model={model}'s architecture {architecture} (that release's "
    "rules were proven against its own code for {allowed} only); allowed: rules=vllm_0_34_0, or a model of {allowed}",
    "checkpoint_kv_refused": "vLLM refuses kv_cache={kv_dtype} for model {model}: {reason}; allowed: kv_cache=auto, "
    "fp8, fp8_e4m3 or the model dtype",
    "strict": "strict=true refuses this selection's warnings: {warnings}; allowed: strict=false (select as vLLM does, "
    "with the warnings), a config without the ignored setting, or data measured with the release's kernel versions",
}


def describe_blocks(blocks) -> str:
    """Kernel block sizes as vLLM prints them: `[16, MultipleOf(64)]`."""
    return "[" + ", ".join(f"MultipleOf({b.multiple_of})" if hasattr(b, "multiple_of") else str(b) for b in blocks) + "]"


def claim_detail(c) -> str:
    """What the conformance data says about a claim ('' when it was never run)."""
    if c.status == "unverified":
        return ""
    err = f"rel err {c.rel_err:.2g}" if c.rel_err is not None else ""
    kernel = f"on {c.kernel}" if c.kernel else ""
    return ", ".join(x for x in (c.measured, err, kernel, c.note) if x)


def claim_line(c) -> str:
    d = claim_detail(c)
    return f"{c.claim}: {c.status}" + (f" ({d})" if d else "")


def claims_list(code: str, claims) -> str:
    """The claims of a claims warning: refuted ones with what hardware said."""
    if code == "claims_refuted":
        return "; ".join(f"{c.claim} ({claim_detail(c)})" for c in claims)
    return ", ".join(c.claim for c in claims)


def render(r: Any) -> str:
    """The text of any record (records.Record.text)."""
    code = r.code
    if code == "claim":
        return claim_line(r)
    if code == "claim_run":
        return CLAIM_RUN.format(claim=r.claim, page=r.page, descale=r.descale, source=r.source)
    if code == "block_size_precluded":
        return WARNING_PHRASE[code].format(block_size=r.block_size, backends=list(r.backends))
    if code in ("claims_refuted", "claims_unverified"):
        return WARNING_PHRASE[code].format(gpu=r.gpu, claims=claims_list(code, r.claims))
    if code.startswith("objective_"):
        return WARNING_PHRASE[code].format(**{k: getattr(r, k) for k in type(r).model_fields})
    if code in ("setting_ignored", "kernel_data_version"):
        return WARNING_PHRASE[code].format(**{k: getattr(r, k) for k in type(r).model_fields})
    if code == "orphan_rule":
        return WARNING_PHRASE[code].format(rule=r.rule)
    if code == "rule":
        return RULE_PHRASE.format(reason=r.reason, rule=r.rule)
    if code in FAILURE_PHRASE:
        fields = {k: getattr(r, k) for k in type(r).model_fields}
        fields["kernel_blocks"] = describe_blocks(r.kernel_blocks or ())
        fields["warnings"] = " | ".join(r.warnings or ())
        text = FAILURE_PHRASE[code].format(**fields)
        return f"{text} {' | '.join(r.reasons)}" if r.reasons else text  # never a phrase cut at its ':'
    kb = describe_blocks(r.kernel_blocks) if r.kernel_blocks is not None else ""
    return REJECT_PHRASE[code].format(value=r.value, kernel_blocks=kb) + SOURCE_TAG.format(source=r.source)


# ---------------------------------------------------------------- review diffs

NOTE_LABEL = {"claims_unverified": "claims unverified on hardware", "kernel_data_version": "data from other kernel versions"}

DIFF_KIND = {
    "became_invalid": "became invalid",
    "error_changed": "invalid (error changed)",
    "new_warning": "new warning",
    "became_valid": "became valid",
    "selection": "selection",
    "warning_gone": "warning gone",
}
FIELD_LABEL = {
    "backend": "backend",
    "kernel_block": "kernel block",
    "kv_block": "kv block",
    "kv_dtype": "kv dtype",
    "quant_query": "quant_query",
    "descale": "descale",
    "kv_scales": "kv scales",
    "mm_prefix": "mm_prefix",
    "layers": "layers",
    "cache_block": "cache block",
    "prefill_backend": "prefill backend",
}
ALL_GROUPS_LABEL = "all groups"
GROUP_EVENT = {"group_added": "group added", "group_removed": "group removed"}
RULE_EVENT = {
    "fired": "+{rule}",
    "stopped": "-{rule}",
    "now_rejected": "{backend} now rejected by {rule}",
    "no_longer_rejected": "{backend} no longer rejected by {rule}",
}
CLAIMS_TITLE = {
    "claims_refuted": "REFUTED on {gpu}: hardware claims of the selected kernels [conformance]",
    "claims_unverified": "unverified on {gpu}: hardware claims of the selected kernels [conformance]",
}
NO_BACKEND_CHANGE = "no backend change"
PREFILL_AS_DECODE = "(its decode backend)"  # a group's prefill_backend where prefill runs the decode kernel


def group_label(gid: str) -> str:
    """A group id as output names it (`sliding_window`, `draft:full_attention`)."""
    return gid


def layer_ranges(xs: list[int]) -> str:
    """`0-4,6,8-9`: layer indices as ranges."""
    xs = sorted(xs)
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev != start else str(start))
        if x is not None:
            start = prev = x
    return ",".join(out)



"""What `kselect perf` times: a Target per (kernel path, KV dtype, head size, window, page) that a verified
conformance claim covers for a model's groups, at every page the objective can run it at
(selector/measure/reachable.py), and its bucket ids (selector/evidence/perf_data.py). Built like the engine builds a backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kselect.selector.evidence import perf_data as perfdata
from kselect.selector.config.vocab import DTYPE_OF_SHORT, claim_model_dtype, parse_path, path_id


@dataclass(frozen=True)
class Target:
    backend: str
    version: int | None
    kv: str  # claim dtype: bf16, fp8, ...
    head: int
    hq: int
    hkv: int
    window: int | None
    page: int  # the kernel block the call reads (targets: the claim's own and every page the objective reaches)
    descale: str
    build: str | None = None  # a build other than vLLM's (vocab.ALT_BUILDS): runs that build, its own buckets

    @property
    def path(self) -> str:
        return path_id(self.backend, self.version, self.build)

    @property
    def fp8(self) -> bool:
        return self.kv.startswith("fp8")

    @property
    def model_dtype(self) -> str:
        return claim_model_dtype(self.kv)


def parse_grid(text: str) -> list[tuple[int, int]]:
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        b, _, c = item.partition("x")
        if not (b.isdigit() and c.isdigit()) or int(b) < 1 or int(c) < 1:
            raise SystemExit(f"kselect perf: bad bucket {item!r}: want <batch>x<context>, e.g. 16x8192")
        out.append((int(b), int(c)))
    return out


def verified_claims(path: Path) -> set[str]:
    from kselect.selector.base.files import load_yaml

    data = load_yaml(path, "a conformance file (kselect conformance)") or {}
    return {cid for cid, r in (data.get("claims") or {}).items() if (r or {}).get("status") == "verified"}


def model_shapes(model: str) -> list[tuple[int, int, int, int | None]]:
    """(head, q heads, kv heads, window) of the model's sliding and full groups (conf/model)."""
    from kselect.selector.api import compose

    m = compose(["platform=cpu", f"model={model}"]).model
    return [(m.head_dim, m.num_attention_heads, m.num_key_value_heads, m.sliding_window),
            (m.global_head_dim, m.num_attention_heads, m.global_kv_heads(), None)]


def model_runs(model: str, platform: str, rules: tuple[str, ...]):
    """The kernel runs (path, dtype, shape, page) the objective can reach for this model, over its
    model-dtype and FP8 caches, text and multimodal (vLLM's SM90 composite serves the latter), and each rules
    preset (selector/measure/reachable.py)."""
    from kselect.selector.api import compose
    from kselect.selector.measure.reachable import reachable

    out = set()
    for kv in ("auto", "fp8"):
        for mm in ("false", "true"):
            for r in rules or (None,):
                out |= reachable(compose([f"platform={platform}", f"model={model}", f"kv_cache={kv}", f"model.multimodal={mm}",
                                          *([f"rules={r}"] if r else [])]))
    return out


def targets(verified: set[str], models: list[str], kernels: set[str] | None, kvs: set[str] | None,
            platform: str = "auto", rules: tuple[str, ...] = (), max_page: int = 128) -> list[Target]:
    """One target per kernel path, KV dtype, model group shape and page that a verified causal/window
    claim covers. Pages: the claim's own run (selector/measure/claims.py, as conformance verified it, e.g. the
    FA4 fork's 64-token FP8 pages) and every page the objective can run that kernel at for the model
    (model_runs) up to max_page, since the objective reads a figure only at the page a group runs.
    Descale mode: the claim's own run."""
    from kselect.selector.measure.claims import claim_runs

    out: list[Target] = []
    for model in models:
        runs = model_runs(model, platform, rules)
        for head, hq, hkv, window in model_shapes(model):
            feature = "window" if window else "causal"
            for cid in sorted(verified):
                path, kv, d, feat = cid.split(":")
                if feat != feature or d != f"d{head}" or (kernels and path not in kernels) or (kvs and kv not in kvs):
                    continue
                backend, ver, build = parse_path(path)
                run = claim_runs([cid], (f"platform={platform}",))[cid]
                # another build of a kernel runs at the pages vLLM's build of it does (selector/measure/builds.py)
                base = path_id(backend, ver)
                pages = {run.page} | {r.page for r in runs if r.page <= max_page
                                      and (r.path, r.kv, r.head, r.num_kv_heads, r.window) == (base, kv, head, hkv, window)}
                for page in sorted(pages):
                    t = Target(backend, ver, kv, head, hq, hkv, window, page, run.descale, build)
                    if t not in out:
                        out.append(t)
    return out


def make_target_backend(t: Target):
    from kselect.backends import make_backend
    from kselect.backends.fixtures import make_group

    return make_backend(make_group(t.backend, t.version, t.head, DTYPE_OF_SHORT[t.kv], t.page, t.page, t.descale,
                                   t.hkv, t.window, build=t.build))


def bucket_of(t: Target, phase: str, batch: int, context: int) -> str:
    return perfdata.bucket_id(perfdata.KernelShape(t.path, t.kv, t.head, t.window, t.hkv, t.page), t.hq, phase, batch, context)

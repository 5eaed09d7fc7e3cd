"""Issue #40: classes of bad input generated with hypothesis from the commands' grammar (COMMANDS, below) and
the config schema (selector/schema*.py, the groups of conf/), for every command that takes them.

Each strategy draws a `Case` (test_fuzz.py) that is invalid by construction; test_fuzz.py runs it through the
real `kselect <command>` entry point (its Hydra app included) and holds it to the contract: exit 2, one
paragraph naming the key or file, no traceback.

A new command is one line of COMMANDS: what it takes (config groups, rules, a prompt flag, path flags, the
optional modules it may miss), and every class it takes is generated for it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

import annotated_types as at
from hydra.conf import HydraConf
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel

from kselect.selector.api import CONF_DIR
from kselect.selector.rules.matcher import FACTS
from kselect.selector.config.schema import KSelectConfig


@dataclass(frozen=True)
class PathFlag:
    """A command-line argument that names a path: `--flag` (its value next), `key=` (a Hydra override) or ""
    (positional). kind: `dir` a folder read (a checkpoint), `file` a file read, `out` a file written."""

    arg: str
    kind: str
    needs: tuple[str, ...] = ()  # what else the command line needs for the path to be read


@dataclass(frozen=True)
class Command:
    base: tuple[str, ...]  # a command line that the generated argument breaks
    hydra_app: bool = True  # a Hydra app: hydra/* groups and hydra.* keys
    conf_groups: bool = False  # composes conf/config.yaml: conf/ groups (model=, platform=, ...)
    rules: bool = False  # the composed rules are selected on (a user rule: +rules.<id>=...)
    prompt: str | None = None  # the flag that takes a prompt
    paths: tuple[PathFlag, ...] = ()
    extras: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (module an optional extra installs, argv that needs it)


TINY_RUN = ("platform=cpu", "--no-check", "--max-new-tokens", "1")  # the cheapest full `kselect run`
HF_PATH = PathFlag("model.hf_config=", "file", ("model=hf",))  # a config.json (or its folder) by path
COMMANDS: dict[str, Command] = {
    "select": Command(("platform=sm90",), conf_groups=True, rules=True, paths=(HF_PATH,)),
    "claims": Command(("platform=sm90",), conf_groups=True, rules=True),
    "explain": Command(("platform=sm90",), conf_groups=True, rules=True, paths=(HF_PATH,)),
    # a sweep records a job's config error in its selection.json (gather shows it): rules are not a sweep's bad input
    "sweep": Command(("-m", "platform=cpu,sm90"), conf_groups=True,
                     extras=(("hydra_plugins.hydra_joblib_launcher", ("hydra/launcher=joblib",)),)),
    "run": Command(TINY_RUN, conf_groups=True, rules=True, prompt="--prompt",
                   paths=(PathFlag("--drafter", "dir", ("spec_decode=mtp",)), PathFlag("model.checkpoint=", "dir"), HF_PATH)),
    "diff": Command(("b.overlay=[pr48666]", "matrix=smoke"), paths=(PathFlag("matrix=", "file"),)),
    "matrix": Command(("format=ids",), paths=(PathFlag("matrix=", "file"),)),
    "plot": Command(("matrix=smoke",), paths=(PathFlag("matrix=", "file", ("out=p",)), PathFlag("out=", "out", ("matrix=smoke",))),
                    extras=(("matplotlib", ("out=p",)),)),
    "gather": Command((), hydra_app=False, paths=(PathFlag("", "dir"),)),
    "conformance": Command(("--device", "cpu", "--gpu-name", "cpu_fuzz"), hydra_app=False,
                           paths=(PathFlag("--claims", "file", ("--out", "o.yaml")),
                                  PathFlag("--out", "out", ("--claims", "TORCH_REFERENCE:bf16:d64:causal")))),
    "perf": Command(("--gpu-name", "cpu_reference", "--device", "cpu", "--platform", "cpu", "--dry-run"), hydra_app=False,
                    paths=(PathFlag("--conformance", "file"),)),
    # perf-steps: needs CUDA before it reads any path (exit 2 saying so on a CPU machine)
    "oracle": Command(("0.34.0", "--dry-run"), hydra_app=False,
                      paths=(PathFlag("--out", "out"), PathFlag("--report", "out"), PathFlag("--json", "out"))),
}


@dataclass
class Case:  # the fields test_fuzz.Case has, and how to run it
    cli: str
    argv: list[str]
    names: tuple[str, ...]
    files: dict[str, str | bytes | None] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    via_app: bool = True  # through `kselect <cli>` (kselect/cli.py), not the command's in-process main
    missing: tuple[str, ...] = ()  # modules made unimportable for the case


def pairs() -> list[tuple[str, str]]:
    """Every (command, class) the table implies."""
    out = []
    for name, c in COMMANDS.items():
        out += [(name, "group_value")] if c.hydra_app else []
        out += [(name, "hydra_key")] if c.hydra_app else []
        out += [(name, "rule_fact")] if c.rules else []
        out += [(name, "prompt_ascii"), (name, "prompt_multibyte")] if c.prompt else []
        out += [(name, "path")] if c.paths else []
        out += [(name, "extra")] if c.extras else []
        out += [(name, "hf_config")] if c.conf_groups and name not in ("sweep", "claims") else []  # claims: Gemma-4 shapes only
        out += [(name, "hf_json")] if c.conf_groups and name not in ("sweep", "claims") else []
        out += [(name, "special_path")] if c.paths else []
        out += [(name, "control_char")]
        out += [(name, "script_path")] if c.hydra_app else []
    return out + [("select", "schema_value"), ("run", "checkpoint_json")]


# ---------------------------------------------------------------- the strategies

CONF_GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
HYDRA_GROUPS = sorted(f"hydra/{next(iter(d))}" for d in HydraConf().defaults if isinstance(d, dict))
IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,9}", fullmatch=True)
name = IDENT.map(lambda s: "fz_" + s)  # distinctive: found in a message only where the message names it


def _hydra_list(xs) -> str:
    return "[" + ",".join(xs) + "]"


# a value that is not an option name, in Hydra's override grammar
not_a_name = st.one_of(
    st.just("null"), st.integers(-(10**6), 10**6).map(str), st.booleans().map(lambda b: str(b).lower()),
    st.floats(allow_nan=False, allow_infinity=False, width=32).filter(lambda f: f != int(f)).map(repr),
    st.lists(st.integers(0, 99).map(str), min_size=1, max_size=3).map(_hydra_list),
)


@st.composite
def group_value(draw, cli: str) -> Case:
    """A config group (conf/'s for the commands that compose it, Hydra's own for every Hydra app) set to a value
    that is no option name: null, a number, a boolean, a list holding one (also inside a sweep's list)."""
    c = COMMANDS[cli]
    group = draw(st.sampled_from((CONF_GROUPS if c.conf_groups else []) + HYDRA_GROUPS))
    bad = draw(not_a_name)
    form = draw(st.sampled_from(["plain", "in_list"] if c.conf_groups or cli == "sweep" else ["plain"]))
    value = f"[{draw(IDENT)},{bad.strip('[]') or 0}]" if form == "in_list" else bad
    return Case(cli, [*c.base, f"{group}={value}"], (group,))


_HINTS = typing.get_type_hints(HydraConf)
HYDRA_NODES = {"hydra": HydraConf, **{f"hydra.{n}": _HINTS[n] for n in ("run", "sweep", "job", "runtime")}}


def _unknown_hydra_key(draw) -> str:
    """A dotted key under hydra. that Hydra's schema (its dataclasses) does not hold."""
    parent = draw(st.sampled_from(sorted(HYDRA_NODES)))
    fields = {f.name for f in dataclasses.fields(HYDRA_NODES[parent])}
    return f"{parent}.{draw(IDENT.filter(lambda s: s not in fields))}"


@st.composite
def hydra_key(draw, cli: str) -> Case:
    """A key under `hydra.` that Hydra does not have, set (`hydra.x=1`: Hydra refuses) or added (`+`, `++`: Hydra
    would add it and never read it)."""
    key = _unknown_hydra_key(draw)
    plus = draw(st.sampled_from(["", "+", "++"]))
    value = draw(st.sampled_from(["1", "x", "true", "[1]"]))
    return Case(cli, [*COMMANDS[cli].base, f"{plus}{key}={value}"], (key,))


unknown_fact = st.tuples(IDENT, IDENT).map(".".join).filter(lambda f: f not in FACTS)


@st.composite
def rule_fact(draw, cli: str) -> Case:
    """A user rule whose matcher (at the top, under not/any/all) or whose effect (`flash_attn_version: {from: F}`)
    reads a fact that does not exist."""
    fact, rid = draw(unknown_fact), draw(IDENT.map(lambda s: "fz-" + s))
    where = draw(st.sampled_from(["effect", "top", "not", "any", "all"]))
    real = draw(st.sampled_from(sorted(FACTS)))
    cond = f"{{{fact}:{draw(st.integers(0, 9))}}}"
    if where == "effect":
        rule = f"{{stage:fa_version,reason:r,flash_attn_version:{{from:{fact}}}}}"
    else:
        when = {"top": cond, "not": f"{{not:{cond}}}", "any": f"{{any:[{{{real}:1}},{cond}]}}",
                "all": f"{{all:[{cond}]}}"}[where]
        rule = f"{{stage:{draw(st.sampled_from(['reject', 'warning']))},reason:r,when:{when}}}"
    return Case(cli, [*COMMANDS[cli].base, f"+rules.{rid}={rule}"], (fact,))


@st.composite
def prompt(draw, cli: str, context: int, max_token_bytes: int, multibyte: bool) -> Case:
    """A prompt longer than the tiny model's context, plain ASCII or multi-byte UTF-8: a drawn piece repeated to
    more bytes than `context` tokens can hold (no token is longer than max_token_bytes)."""
    chars = st.characters(min_codepoint=0x80 if multibyte else 0x21, max_codepoint=0x10FFFF if multibyte else 0x7E,
                          exclude_categories=("Cs", "Cc", "Co", "Cn", "Zl", "Zp"))
    piece = "x" + draw(st.text(chars, min_size=1, max_size=6))  # never starts with '-' (an option)
    n = (context + 1) * max_token_bytes // len(piece.encode()) + 1
    c = COMMANDS[cli]
    return Case(cli, [*c.base, c.prompt, piece * n], (c.prompt,))


junk_json = st.one_of(
    st.text(max_size=30), st.binary(max_size=30),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5), lambda x: st.lists(x, max_size=3),
                 max_leaves=5).map(json.dumps),
    st.dictionaries(IDENT, st.integers() | st.text(max_size=5), max_size=4).map(json.dumps),
)


@st.composite
def path(draw, cli: str) -> Case:
    """A path flag naming a missing path, the wrong kind (a file for a folder, a folder for a file), a dangling
    link, an empty folder or one whose config.json is junk, a file of junk, or an output under a file."""
    c = COMMANDS[cli]
    flag = draw(st.sampled_from(c.paths))
    p = draw(name) + (".yaml" if flag.kind == "file" else "")
    shapes = {"dir": ["missing", "file", "empty_dir", "junk_config", "dangling"],
              "file": ["missing", "dir", "dangling", "junk"], "out": ["dir", "under_file"]}[flag.kind]
    shape = draw(st.sampled_from(shapes))
    files: dict[str, str | bytes | None] = {}
    links: dict[str, str] = {}
    target = p
    if shape in ("file", "junk", "under_file"):
        files[p] = draw(junk_json) if shape == "junk" else "x"
    elif shape in ("dir", "empty_dir"):
        files[p] = None
    elif shape == "junk_config":
        files[f"{p}/config.json"] = draw(junk_json)
    elif shape == "dangling":
        links[p] = p + "_gone"
    if shape == "under_file":
        target = f"{p}/o" + (".yaml" if flag.arg != "out=" else "")
    arg = [f"{flag.arg}{target}"] if flag.arg.endswith("=") else [flag.arg, target] if flag.arg else [target]
    base = [a for a in c.base if not (flag.arg.endswith("=") and a.startswith(flag.arg))]
    return Case(cli, [*base, *flag.needs, *arg], (p, flag.arg.strip("=-") or p), files=files, links=links)


@st.composite
def extra(draw, cli: str) -> Case:
    """An optional module (pyproject.toml's extras) missing where the command line needs it."""
    module, argv = draw(st.sampled_from(COMMANDS[cli].extras))
    return Case(cli, [*COMMANDS[cli].base, *argv], ("pip install 'kselect[",), missing=(module,))


# ---------------------------------------------------------------- values from the config schema

SECTIONS = ("platform", "model", "kv_cache", "spec_decode", "attention", "objective")


def _bad_values(ann: Any, metadata: list) -> list[str]:
    """Override values (Hydra grammar) that the annotated type refuses; [] where it cannot be said for sure."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            return []
        return _bad_values(inner[0], metadata)  # null is allowed: not drawn
    if origin is typing.Annotated:
        base, *meta = args
        flat = [m for x in meta for m in (getattr(x, "metadata", None) or [x])]
        return _bad_values(base, [*metadata, *flat])
    if origin is typing.Literal:
        return ["fz_nope", "[x]"] if all(isinstance(a, str) for a in args) else ["x", "[1]"]
    bounds = {type(m).__name__: next(iter(dataclasses.asdict(m).values())) for m in metadata
              if isinstance(m, (at.Ge, at.Gt, at.Le, at.Lt))}
    outside = [str(bounds["Le"] * 2 + 1)] if "Le" in bounds else []  # just past each bound
    outside += [str(bounds["Ge"] - 1)] if "Ge" in bounds else []
    outside += [str(bounds[k]) for k in ("Gt", "Lt") if k in bounds]
    if ann is int:
        return ["x", "true", "[1]", "{a:1}", "1.5", *outside]
    if ann is float:
        return ["nan", "inf", "x", "true", "[1.0]", *outside]
    if ann is bool:
        return ["maybe", "2", "[true]"]
    if ann is str:
        return ["''", "'  '"] if any(isinstance(m, AfterValidator) for m in metadata) else []
    if origin in (list, tuple, dict):
        return ["x", "5"]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ["5", "x"]
    return []


def schema_fields() -> list[tuple[str, list[str]]]:
    """(dotted key, values its schema type refuses) for every field of the environment sections."""
    out = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for fname, f in model.model_fields.items():
            key = f"{prefix}.{fname}"
            bad = _bad_values(f.annotation, list(f.metadata))
            if f.is_required():
                bad.append("null")
            if bad:
                out.append((key, bad))
            sub = [a for a in (f.annotation, *typing.get_args(f.annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]
            if sub:
                walk(sub[0], key)

    for s in SECTIONS:
        ann = KSelectConfig.model_fields[s].annotation  # model: the Gemma-4 branch (SCHEMA_BASE's preset)
        walk(next(a for a in (typing.get_args(ann) or (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), s)
    return out


SCHEMA_FIELDS = schema_fields()
# keys a preset of conf/ leaves out (Hydra's struct then refuses the key itself, which names it too)
SCHEMA_BASE = ("platform=sm90", "model=gemma4_tiny")


@st.composite
def schema_value(draw, cli: str) -> Case:
    """A field of the config schema (selector/config/schema.py, walked) set to a value of the wrong type or out of its
    bounds, or null where the field is required."""
    key, bad = draw(st.sampled_from(SCHEMA_FIELDS))
    return Case(cli, [*SCHEMA_BASE, f"{key}={draw(st.sampled_from(bad))}"], (key,), via_app=False)


# classes whose handling is in the Hydra app that `kselect <command>` runs (selector/base/hydra_app.py): always through it;
# the others run through the command's in-process main where test_fuzz.py has one (one Hydra compose less)
# ---------------------------------------------------------------- a model's config.json (issue #42)

# the published configs of the non-Gemma presets: each case breaks one of them
HF_PRESETS = {p.stem: d["hf_config"] for p in sorted((CONF_DIR / "model").glob("*.yaml"))
              if isinstance(d := __import__("yaml").safe_load(p.read_text()), dict) and isinstance(d.get("hf_config"), dict)}
# integer fields each architecture's derivation requires (selector/config/hf_arch.py), by preset
HF_REQUIRED = {"llama3_1_8b": ("num_hidden_layers", "num_attention_heads"), "gpt_oss_20b": ("sliding_window", "num_hidden_layers"),
               "deepseek_v3": ("kv_lora_rank", "qk_rope_head_dim", "num_hidden_layers"),
               "nemotron_h_8b": ("mamba_num_heads", "ssm_state_size", "n_groups", "conv_kernel"),
               "qwen3_next_80b_a3b": ("linear_num_key_heads", "linear_conv_kernel_dim", "linear_value_head_dim"),
               "llama4_scout": ("num_hidden_layers", "num_attention_heads"), "gemma3_1b": ("num_hidden_layers",)}
HF_BAD_INT = st.sampled_from(["x", True, -1, 0, 10**9, [1], 1.5])


@st.composite
def hf_config(draw, cli: str) -> Case:
    """A config.json given by path (model=hf model.hf_config=<file>) that is not JSON, not an object, oversized, of an
    architecture kselect does not model, missing a field its architecture needs, a field of the wrong type or out of
    bounds, or inconsistent (query heads not a multiple of KV heads)."""
    p = draw(name) + ".json"
    preset = draw(st.sampled_from(sorted(HF_REQUIRED)))
    cfg = json.loads(json.dumps(HF_PRESETS[preset]))
    text = cfg.get("text_config", cfg)
    shape = draw(st.sampled_from(["junk", "array", "oversized", "architecture", "missing", "bad_value", "inconsistent",
                                  "quantization"]))
    if shape in ("inconsistent", "quantization") and preset == "deepseek_v3":  # MLA reads no KV head count (one
        shape = "bad_value"  # latent head) and no compressed-tensors KV scheme
    names: tuple[str, ...] = ("model.hf_config",)
    if shape == "junk":
        body = draw(st.sampled_from(["{", "not json", "\x00\xff", "[1,"]))
    elif shape == "array":
        body = json.dumps([cfg])
    elif shape == "oversized":
        body = json.dumps(dict(cfg, padding="x" * (1 << 20)))
    else:
        if shape == "architecture":
            arch = "Fz" + draw(IDENT).capitalize() + "ForCausalLM"
            cfg["architectures"] = [arch]
            names = (arch,)
        elif shape == "quantization":  # a KV scheme vLLM refuses or kselect does not model (#47)
            scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
            scheme.update(draw(st.sampled_from([{"num_bits": 4}, {"type": "int"}, {"symmetric": False},
                                                {"strategy": "channel"}, {"strategy": "attn_head"}])))
            cfg["quantization_config"] = {"quant_method": "compressed-tensors", "kv_cache_scheme": scheme}
            names = ("kv_cache_scheme",)
        elif shape in ("missing", "bad_value"):
            key = draw(st.sampled_from(HF_REQUIRED[preset]))
            if shape == "missing":
                text.pop(key, None)
            else:
                text[key] = draw(HF_BAD_INT)
            names = (key,)
        else:
            text["num_attention_heads"], text["num_key_value_heads"] = 12, 5
            names = ("num_key_value_heads",)
        body = json.dumps(cfg)
    base = [a for a in COMMANDS[cli].base if not a.startswith("model")]
    return Case(cli, [*base, "model=hf", f"model.hf_config={p}"], names, files={p: body})


# ---------------------------------------------------------------- issue #49: types, depths, special files, control
# characters and code in every field that is read

class _Reads(dict):
    """A config.json object that records every key read from it (nested objects too)."""

    def __init__(self, d: dict, prefix: str, log: set[str]):
        super().__init__({k: _Reads(v, f"{prefix}{k}.", log) if isinstance(v, dict) else v for k, v in d.items()})
        self._prefix, self._log = prefix, log

    def get(self, k, default=None):
        self._log.add(self._prefix + k)
        return super().get(k, default)

    def __getitem__(self, k):
        self._log.add(self._prefix + k)
        return super().__getitem__(k)

    def __contains__(self, k):
        self._log.add(self._prefix + k)
        return super().__contains__(k)


def _fields_read(cfg: dict) -> list[str]:
    """The config.json keys kselect reads to select for this model (selector/config/hf_arch.py, hf_model.py)."""
    from kselect.selector.config import hf_arch, hf_model

    log: set[str] = set()
    c = _Reads(cfg, "", log)
    _, _, layers = hf_arch.derive_layers(c)
    hf_arch.model_head_size(c, layers)
    hf_model.dtype_fields(c)
    return sorted(log)


HF_READ = {k: _fields_read(v) for k, v in HF_PRESETS.items()}
DEEP, HUGE = "[" * 100 + "]" * 100, "9" * 5000  # past the reader's depth (64) and Python's int-digit limit (4300)
# a value of the wrong JSON type for any field read (null is a field left out: every optional field takes it)
WRONG_TYPE = {"list": ["x"], "object": {"fz": 1}, "string": "fz", "float": 1.5, "bool": True, "negative": -1}


def _with(cfg: dict, key: str, raw: str) -> str:
    """cfg as JSON text with the dotted `key` set to the raw JSON text `raw`."""
    c = json.loads(json.dumps(cfg))
    d = c
    for part in key.split(".")[:-1]:
        d = d.setdefault(part, {}) if isinstance(d.get(part), dict) or part not in d else d[part]
    d[key.split(".")[-1]] = "__fz__"
    return json.dumps(c).replace('"__fz__"', raw)


@st.composite
def hf_json(draw, cli: str) -> Case:
    """A config.json (model=hf model.hf_config=<file>) with one field kselect reads set to a value of the wrong
    JSON type, nested deeper than the reader allows, or an integer of 5000 digits."""
    p = draw(name) + ".json"
    preset = draw(st.sampled_from(sorted(HF_READ)))
    key = draw(st.sampled_from(HF_READ[preset]))
    kind = draw(st.sampled_from([*WRONG_TYPE, "deep", "huge"]))
    raw = {"deep": DEEP, "huge": HUGE}.get(kind) or json.dumps(WRONG_TYPE.get(kind))
    leaf = key.split(".")[-1]
    names = (p,) if kind == "deep" else (leaf,)
    dtype = [] if "dtype" in json.dumps(HF_PRESETS[preset]) else ["model.dtype=bfloat16"]  # gpt-oss names none
    base = [a for a in COMMANDS[cli].base if not a.startswith("model")]
    return Case(cli, [*base, "model=hf", f"model.hf_config={p}", *dtype], names, files={p: _with(HF_PRESETS[preset], key, raw)})


TINY_CK = {"model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
           "global_head_dim": 64, "sliding_window": 16, "max_position_embeddings": 1024, "bos_token_id": 2,
           "eos_token_id": [1, 106], "pad_token_id": 0, "torch_dtype": "float32", "rope_parameters": {}}


def _checkpoint_fields() -> dict[str, list[str]]:
    """A Gemma-4 checkpoint's config.json fields (gemma4/checkpoint.py RAW_TYPES and the sizes) -> wrong values."""
    from kselect.gemma4.checkpoint import RAW_TYPES

    out = {k: [json.dumps(v) for n, v in WRONG_TYPE.items() if not any(isinstance(v, t) and not (isinstance(v, bool) and t is not bool)
                                                                     for t in types) and n != "negative"]
           for k, types in RAW_TYPES.items()}
    for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "sliding_window"):
        out[k] = [json.dumps(v) for n, v in WRONG_TYPE.items() if n != "bool"] + [HUGE]
    out["bos_token_id"] = out["bos_token_id"] + ["-1", HUGE]
    return out


CK_FIELDS = _checkpoint_fields()


@st.composite
def checkpoint_json(draw, cli: str) -> Case:
    """`kselect run model.checkpoint=<folder>` whose config.json has one field of the wrong type, a negative token
    id, an integer of 5000 digits or a list nested past the reader's depth."""
    key = draw(st.sampled_from(sorted(CK_FIELDS)))
    raw = draw(st.sampled_from([*CK_FIELDS[key], DEEP]))
    files = {"ck/config.json": _with(TINY_CK, key, raw), "ck/tokenizer.json": "{}"}
    return Case(cli, [*TINY_RUN, "model.checkpoint=ck"], ("config.json",) if raw == DEEP else (key,), files=files)


SPECIAL = {"file": ["fifo", "loop", "/proc/self/mem", "/proc/self/pagemap", "/dev/zero", "long", "dir"],
           "dir": ["fifo", "loop", "/proc/self", "/dev", "long", "/dev/zero"],
           "out": ["fifo", "/proc/self/mem", "/dev/null/x", "/dev/full", "long"]}


@st.composite
def special_path(draw, cli: str) -> Case:
    """A path flag naming a FIFO (a read would block), a symlink loop, a file under /proc or /dev, a path component
    longer than the file system's 255 bytes, or a folder where a file is meant."""
    c = COMMANDS[cli]
    flag = draw(st.sampled_from(c.paths))
    shape = draw(st.sampled_from([x for x in SPECIAL[flag.kind] if not (x == "fifo" and flag.arg == "out=")]))  # plot's
    # out= is a stem (out.png, out.html are written): a FIFO named as the stem is never opened
    files: dict[str, str | bytes | None] = {}
    links: dict[str, str] = {}
    target = {"long": "x" * 300, "fifo": "fz_fifo", "loop": "fz_loop", "dir": "fz_dir"}.get(shape, shape)
    if shape == "fifo":
        files[target] = b"FIFO"  # test_fuzz makes it with os.mkfifo
    elif shape == "loop":
        links[target] = target
    elif shape == "dir":
        files[target] = None
    arg = [f"{flag.arg}{target}"] if flag.arg.endswith("=") else [flag.arg, target] if flag.arg else [target]
    base = [a for a in c.base if not (flag.arg.endswith("=") and a.startswith(flag.arg))]
    key = flag.arg.strip("=-") or target[:40]
    return Case(cli, [*base, *flag.needs, *arg], (key, target[:40]), files=files, links=links)


CONTROL = ["\n", "\r", "\t", "\x1b", "\x7f", "\x0b"]


def _string_args(argv: list[str]) -> list[tuple[int, str]]:
    """(index, the key it names) of each argument that carries a string: a key=value's value, a flag's value, a
    positional."""
    out = []
    for i, a in enumerate(argv):
        if a.startswith("-"):
            continue
        if "=" in a:
            out.append((i, a.split("=", 1)[0].lstrip("+")))
        elif i and argv[i - 1].startswith("--"):
            out.append((i, argv[i - 1]))
        else:
            out.append((i, "SOURCE" if i == 0 else a))
    return out


@st.composite
def control_char(draw, cli: str) -> Case:
    """A control character (a trailing newline, a carriage return, an escape...) in one string argument of the
    command line: the name or value is refused as a whole, never read up to the control character."""
    c = COMMANDS[cli]
    argv = list(c.base)
    if cli == "gather":
        argv = ["fz_sweep"]
    if c.conf_groups:
        argv.append(draw(st.sampled_from(["model=gemma4_tiny", "rules=vllm_0_34_0", "model.name=fz", "verbose=true"])))
    i, key = draw(st.sampled_from(_string_args(argv)))
    ch = draw(st.sampled_from(CONTROL)).encode().decode("unicode_escape")
    pos = draw(st.sampled_from(["end", "start", "middle"]))
    v = argv[i]
    head, eq, value = v.partition("=") if "=" in v else ("", "", v)
    value = value + ch if pos == "end" else ch + value if pos == "start" else value[:1] + ch + value[1:]
    argv[i] = f"{head}{eq}{value}"
    return Case(cli, argv, (key, max(re.split(r"[^ -~]", value), key=len)[:20]))  # the message shows the value's repr


MARKER = "fz_marker"
_MARK = f"open({MARKER!r}, 'w').write('ran')\n"


@st.composite
def script_path(draw, cli: str) -> Case:
    """A field that names code to run (`_target_`, a Hydra callback or launcher, a search path) set to a script of
    the working folder that writes a marker file: refused, and the marker never appears (test_fuzz.check)."""
    c = COMMANDS[cli]
    how = draw(st.sampled_from(["target", "callback", "added_callback", "launcher", "searchpath", "group_target"]))
    files = {"fz_script.py": _MARK, "fz_conf/hydra/launcher/fz.yaml": "_target_: fz_script.Launcher\n"}
    arg = {"target": "+fz._target_=fz_script.run", "callback": "hydra.callbacks.fz._target_=fz_script.run",
           "added_callback": "+hydra.callbacks.fz._target_=fz_script.run", "launcher": "hydra/launcher=fz",
           "searchpath": "hydra.searchpath=[file://fz_conf]", "group_target": "+model._target_=fz_script.run"}[how]
    key = arg.split("=")[0].lstrip("+")
    return Case(cli, [*c.base, arg], (key, "_target_", "hydra"), files=files)


APP_CLASSES = {"group_value", "hydra_key", "extra", "script_path", "control_char"}
STRATEGIES = {"group_value": group_value, "hydra_key": hydra_key, "rule_fact": rule_fact, "path": path,
              "extra": extra, "schema_value": schema_value, "hf_config": hf_config, "hf_json": hf_json,
              "checkpoint_json": checkpoint_json, "special_path": special_path, "control_char": control_char,
              "script_path": script_path}


# ---------------------------------------------------------------- shell metacharacters (issue #49 item 6, #51)
# Valid input, not bad input: every string that reaches `output=vllm` (test_export_paste.py) is drawn from these
# characters, and the export must hand it to `vllm` as exactly one argument, whatever a shell makes of the rest.

SHELL_META = "$()`'\";|&*?~<>{}[]!#\\ \t\n%^=,:@"
EXPORT_FIELDS = ("model.checkpoint", "model.drafter.checkpoint")  # the user's strings an export names (and a folder)
SHELL_EXAMPLES = ("$(touch X)", "a'b", "`touch X`", "\"; touch X; \"", "~", "~/m", "*", "x\n# y\ntouch X", "-h",
                  "--dtype", "a\\", "'$HOME'", "é\u2028ß")  # fmt: skip


def _usable(s: str) -> bool:
    """A checkpoint may be any non-blank string (schema_types.Checkpoint) but no NUL: no command line passes one."""
    return bool(s.strip()) and "\0" not in s


shell_string = st.one_of(
    st.sampled_from(SHELL_EXAMPLES),
    st.text(alphabet=SHELL_META + "ab/.-_é", min_size=1, max_size=24).filter(_usable),
)

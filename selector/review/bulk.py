"""Many selections in one process: each request a list of `kselect select` overrides, each answer what
`kselect select <overrides>` says, in request order.

    answers = answer_all([["platform=sm90", "model=llama3_1_8b"], ["platform=sm100", "model=gpt_oss_20b"]])

A request that is a matrix cell (platform, model, KV cache, spec decode, multimodal, dtype, scales,
dotted pins, rules, overlays; objective/strict/output/verbose composed into its batch) is built by the
matrix Builder (configs.py: one Hydra compose per overlay set, section models validated once per variant;
the test suite checks each such config equals a full compose). Any other request, and every request of a
batch that holds a config the Builder refuses, is composed on its own (compose.py, cached), so its error is
the one `kselect select` prints. `kselect select cells=<file.jsonl>`, the Python API (selector/api.py), the
matrix, diff, the pytest plugin and the oracle comparison all resolve through `resolve_cells` or here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import KSelectError, SelectionError
from ..config.compose import CONF_DIR, compose
from ..config.schema import KSelectConfig
from ..evidence.evidence import Evidence
from ..export.formats import render
from ..export.render import json_object
from ..measure.select import select
from ..outputs.selection import Selection
from ..review.cells import SECTIONS, Cell, hydra_value
from ..review.configs import Builder
from ..review.matrix import parse_overlays, resolve_cells

EXTRA_KEYS = ("objective", "strict", "output", "verbose")  # composed into a batch, not cell axes
_FIELDS = {"platform": "platform", "model": "model", "model.dtype": "dtype", "kv_cache": "kv_cache",
           "kv_cache.scales": "scales", "spec_decode": "spec_decode", "rules": "rules"}  # fmt: skip
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")  # a value Hydra reads as this string
_INT = re.compile(r"^-?[1-9][0-9]*$|^0$")
_OVERLAYS = re.compile(r"^\[[A-Za-z0-9_.,\-]*\]$")
_NOT_NAMES = ("true", "false", "null", "inf", "nan", "+inf", "-inf")


@dataclass(frozen=True)
class Answer:
    """One request's answer: its config and selection, or the error `kselect select` exits 2 with."""

    overrides: tuple[str, ...]
    config: KSelectConfig | None = None
    selection: Selection | None = None
    error: str | None = None

    @property
    def exit(self) -> int:
        return 2 if self.error is not None else 0

    def record(self, output: str | None = None) -> dict:
        """The answer as one JSON object: `selection` (the object `output=json` prints) or `text` (any other
        output) or `error` (the paragraph kselect prints on stderr, without its `kselect: ` prefix)."""
        out: dict[str, Any] = {"overrides": list(self.overrides), "exit": self.exit}
        if self.error is not None:
            out["error"] = self.error
            return out
        assert self.selection is not None and self.config is not None
        fmt = output or self.config.output
        if fmt == "json":
            out["selection"] = json_object(self.selection)
        else:
            out["text"] = render(self.selection, fmt, self.config.verbose, self.config)
        return out


def request_of(obj: Any, where: str) -> list[str]:
    """A JSON line as overrides: {"platform": "sm90", "overlay": ["pr48666"], ...} or ["platform=sm90", ...]."""
    if isinstance(obj, list) and all(isinstance(x, str) for x in obj):
        return list(obj)
    if isinstance(obj, dict):
        return [f"{k}={v}" if isinstance(v, str) else f"{k}={hydra_value(v)}" for k, v in obj.items()]
    raise KSelectError(f"{where}: {type(obj).__name__}; allowed: a JSON object of overrides "
                       '({"platform": "sm90", "model": "llama3_1_8b"}) or a list of override strings')


def read_requests(path: Path | str, text: str | None = None) -> list[list[str] | KSelectError]:
    """The requests of a JSONL file (blank lines skipped); a line that is not one becomes its error."""
    lines = (text if text is not None else Path(path).read_text(encoding="utf-8")).splitlines()
    out: list[list[str] | KSelectError] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(request_of(json.loads(line), f"{path}:{n}"))
        except ValueError as e:
            out.append(KSelectError(f"{path}:{n}: not JSON ({e}); allowed: one JSON object of overrides a line"))
        except KSelectError as e:
            out.append(e)
    return out


def as_cell(overrides: Sequence[str]) -> tuple[Cell, tuple[str, ...]] | None:
    """(the matrix cell, the batch overrides) that compose exactly these overrides; None where the Builder
    cannot stand in for a full compose (an unknown key, a value Hydra would parse otherwise, a repeat)."""
    fields: dict[str, Any] = {}
    pins, extra, keys = [], [], set()
    for o in overrides:
        key, eq, value = o.partition("=")
        bare = key.removeprefix("++")
        if not eq or bare in keys or not bare or bare[0] in "+~":
            return None
        keys.add(bare)
        if bare in EXTRA_KEYS:
            extra.append(o)
        elif bare in _FIELDS and _is_name(value):
            fields[_FIELDS[bare]] = value
        elif bare == "model.multimodal" and value in ("true", "false"):
            fields["multimodal"] = value == "true"
        elif bare == "overlay" and _OVERLAYS.match(value):
            fields["overlays"] = parse_overlays(value)
        elif bare.split(".")[0] in SECTIONS and "." in bare and (_is_name(value) or _INT.match(value) or value in _NOT_NAMES[:3]):
            pins.append((bare, _scalar(value)))
        else:
            return None
    if "platform" not in fields or "model" not in fields or fields["platform"] == "auto":
        return None  # auto: detection keeps the command line's platform.* keys (compose.validate)
    pin = "+".join(f"{k}={hydra_value(v)}" for k, v in pins) or "auto"
    cell = Cell(**fields, pin=pin, pin_sets=tuple(pins))
    if sorted(cell.overrides()) != sorted(o for o in overrides if o.partition("=")[0] not in EXTRA_KEYS):
        return None  # e.g. `overlay=[]`, or a pin spelled without the `++` a deep key takes
    return cell, tuple(extra)


def _is_name(value: str) -> bool:
    return bool(_NAME.match(value)) and value.lower() not in _NOT_NAMES


def _scalar(value: str) -> Any:
    """A pin's value as Hydra reads it (only plain values reach here): int, bool, null or a name."""
    if value in ("true", "false"):
        return value == "true"
    if value == "null":
        return None
    return int(value) if _INT.match(value) else value


def answer_all(requests: Iterable[Sequence[str] | KSelectError], conf_dir: Path | str = CONF_DIR,
               evidence: Evidence | None = None) -> list[Answer]:
    """Every request's answer, in order (`evidence`: None, the conf tree's own)."""
    evidence = evidence if evidence is not None else Evidence.load(conf_dir)
    reqs = list(requests)
    answers: list[Answer | None] = [None] * len(reqs)
    batches: dict[tuple, list[tuple[int, Cell]]] = {}
    for i, r in enumerate(reqs):
        if isinstance(r, KSelectError):
            answers[i] = Answer((), error=_text(r))
            continue
        hit = as_cell(r)
        if hit is None:
            answers[i] = _one(r, conf_dir, evidence)
        else:
            cell, extra = hit
            batches.setdefault(_batch_key(cell, extra), []).append((i, cell))
    for (extra, _), items in batches.items():
        for i, a in zip((i for i, _ in items), _batch([c for _, c in items], extra, reqs, [i for i, _ in items],
                                                       conf_dir, evidence)):
            answers[i] = a
    return [a for a in answers if a is not None]


def configs_of(requests: Sequence[Sequence[str]], conf_dir: Path | str = CONF_DIR) -> list[KSelectConfig | None]:
    """Each request's config where the matrix Builder composes exactly its overrides (as_cell; an `overlay=[]`
    is composed into the batch as said), None for any other request and for every request of a batch the
    Builder refuses: compose those on their own (compose.py), so their errors are compose's."""
    out: list[KSelectConfig | None] = [None] * len(requests)
    batches: dict[tuple, list[tuple[int, Cell]]] = {}
    for i, r in enumerate(requests):
        said = ("overlay=[]",) if "overlay=[]" in r and sum(o.startswith("overlay=") for o in r) == 1 else ()
        hit = as_cell([o for o in r if o not in said])
        if hit is not None:
            batches.setdefault(_batch_key(hit[0], hit[1] + said), []).append((i, hit[0]))
    for (extra, _), items in batches.items():
        try:
            configs = [cfg for _, cfg in Builder(conf_dir, extra).configs([c for _, c in items])]
        except KSelectError:
            continue
        for (i, _), cfg in zip(items, configs):
            out[i] = cfg
    return out


def _batch_key(cell: Cell, extra: tuple[str, ...]) -> tuple:
    """Cells batch together where they compose the same extra overrides and declare the same field axes."""
    return extra, tuple(getattr(cell, a) is None for a in ("dtype", "kv_cache", "scales", "spec_decode", "multimodal"))


def _batch(cells: list[Cell], extra: tuple[str, ...], reqs: list, index: list[int], conf_dir: Path | str,
           evidence: Evidence) -> list[Answer]:
    """The matrix's own path (resolve_cells), each result as its request's answer."""
    try:
        results = resolve_cells(cells, conf_dir, Builder(conf_dir, extra), evidence=evidence)
    except KSelectError:  # a cell that is not a valid config: each request composed alone names its error
        return [_one(reqs[i], conf_dir, evidence) for i in index]
    out = []
    for i, r in zip(index, results):
        if r.failure is not None and r.config is not None:  # the refusal as `kselect select` words it
            out.append(_resolved(tuple(reqs[i]), r.config, evidence))
            continue
        err = None if r.failure is None else _text(SelectionError(r.failure, r.rejected))
        out.append(Answer(tuple(reqs[i]), r.config, r.selection, err))
    return out


def _one(overrides: Sequence[str], conf_dir: Path | str, evidence: Evidence) -> Answer:
    try:
        cfg = compose(list(overrides), conf_dir)
    except KSelectError as e:
        return Answer(tuple(overrides), error=_text(e))
    return _resolved(tuple(overrides), cfg, evidence)


def _resolved(overrides: tuple[str, ...], cfg: KSelectConfig, evidence: Evidence) -> Answer:
    try:
        return Answer(overrides, cfg, select(cfg, evidence))
    except KSelectError as e:  # SelectionError: no valid backend, strict=true
        return Answer(overrides, cfg, error=_text(e))


def _text(e: Exception) -> str:
    """The paragraph `kselect` prints for an error (base/cli_errors.report_error), without its prefix."""
    return "\n".join(line for line in str(e).splitlines() if line.strip())


__all__ = ["Answer", "SelectionError", "answer_all", "as_cell", "read_requests", "request_of"]

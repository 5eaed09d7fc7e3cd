"""kselect's `output=vllm` rendering per oracle cell, for the export round trip
(kselect.measurement.vllm.export_roundtrip parses each command with vLLM's own CLI parser). No torch."""

from __future__ import annotations

import shlex

from kselect.oracle.cells import Cell


def kselect_exports(cells: list[Cell], rules: str | None = None, conf_dir=None,
                    hf_configs: dict[str, dict] | None = None) -> dict[str, dict]:
    """{cell key: {"command": text | None, "refused": reason | None, "groups": {...}}} for every
    cell kselect selects (a command, or the export's one-line refusal); `hf_configs`: the registry grid's configs."""
    from kselect.oracle.compare import kselect_configs
    from kselect.selector.api import CONF_DIR, Builder, resolve
    from kselect.selector.base.errors import KSelectError

    render = _renderer()

    from kselect.oracle.compare import kselect_records

    kselect_records([], rules, conf_dir)  # checks the rules option
    builder = Builder(conf_dir or CONF_DIR)
    config_of = kselect_configs(builder, cells, rules, hf_configs)  # one compose for all cells where none is refused
    out = {}
    for c in cells:
        try:
            cfg = config_of(c)
            sel = resolve(cfg)
        except KSelectError:
            continue
        try:
            command, refused = render(cfg, sel), None
        except KSelectError as e:
            command, refused = None, str(e).split("\n")[0]
        groups = {(f"draft:{g.kind}" if g.draft else g.kind): {
            "backend": g.backend, "fa_version": g.flash_attn_version, "kernel_block": g.kernel_block_size,
            "draft_shared_kernel_block": g.draft_shared_kernel_block}
            for g in sel.groups}
        out[c.key] = {"command": command, "refused": refused, "groups": groups}
    return out


def _renderer():
    """The checkout's `output=vllm` rendering: `vllm_command(cfg, sel)` where the export
    re-resolves the config, else the older `vllm_args(sel)`."""
    try:
        from kselect.selector.export.vllm_export import vllm_command
    except ImportError:
        from kselect.selector.export.render import vllm_args

        return lambda cfg, sel: vllm_args(sel)
    return vllm_command


def command_tokens(command: str) -> list[str]:
    """The argv of an exported `vllm serve ...` command: comment lines (warnings) dropped,
    backslash continuations joined, shell quoting undone."""
    lines = [ln for ln in command.splitlines() if not ln.lstrip().startswith("#")]
    return shlex.split(" ".join(ln.rstrip().removesuffix("\\") for ln in lines))

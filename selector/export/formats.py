"""Every `output=` of a selection by name: table, json, markdown (render.py) and vllm (vllm_export.py)."""

from __future__ import annotations

from ..config.schema import KSelectConfig
from ..outputs.selection import Selection
from ..export.render import markdown, table, to_json
from ..export.vllm_export import vllm_command

OUTPUTS = ("table", "json", "markdown", "vllm")


def render(sel: Selection, output: str, verbose: bool = False, cfg: KSelectConfig | None = None) -> str:
    """`output=vllm` needs the config the selection came from (the export re-resolves it as vLLM would)."""
    if output == "vllm":
        if cfg is None:
            raise ValueError("render(output='vllm') needs the KSelectConfig the selection was resolved from")
        return vllm_command(cfg, sel)
    return {"table": lambda: table(sel, verbose), "json": lambda: to_json(sel), "markdown": lambda: markdown(sel)}[output]()

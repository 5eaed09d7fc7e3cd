"""kselect select [hydra overrides]: print the attention kernels selected per layer group."""

from __future__ import annotations

from .api import compose
from .cli import run_cli
from .render import render
from .resolve import resolve


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\nexamples:\n  kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=json\n"
              "  kselect select platform=sm90 kv_cache=fp8 model.multimodal=true overlay=[pr48666] verbose=true")
        return 0
    cfg = compose(argv)
    print(render(resolve(cfg), cfg.output, cfg.verbose, cfg))
    return 0


if __name__ == "__main__":
    run_cli(main)

"""kselect select [Hydra overrides]: the attention kernels selected per KV-cache layer group.

  kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=json
  kselect select platform=sm90 kv_cache=fp8 model.multimodal=true overlay=[pr48666] verbose=true
  kselect select --cfg job platform=sm90          # the composed config, nothing resolved
  kselect select -m platform=sm80,sm90            # one selection per value (Hydra's multirun)

output: table | json | markdown | vllm. Exit 2 with one paragraph on stderr for a bad config or
when no backend is valid.
"""

from __future__ import annotations

from omegaconf import DictConfig

from .api import CONF_DIR, validate
from .app import container, run_app
from .render import render
from .resolve import resolve

RENAMED = {"overlays": "write overlay=[pr48666,...] (the config group conf/overlay/)"}


def task(cfg: DictConfig) -> int:
    kcfg = validate(container(cfg))
    print(render(resolve(kcfg), kcfg.output, kcfg.verbose))
    return 0


def main() -> None:
    run_app("select", task, doc=__doc__, config_dir=CONF_DIR, config_name="config", renamed=RENAMED)


if __name__ == "__main__":
    main()

"""kselect select [Hydra overrides]: the attention kernels selected per KV-cache layer group.

  kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=json
  kselect select platform=sm90 kv_cache=fp8 model.multimodal=true rules=post_pr52987 overlay=[pr48666] verbose=true
  kselect select --cfg job platform=sm90          # the composed config, nothing resolved
  kselect select -m platform=sm80,sm90            # one selection per value (Hydra's multirun)

output: table | json | markdown | vllm. Exit 2 with one paragraph on stderr for a bad config or
when no backend is valid.
"""

from __future__ import annotations

from omegaconf import DictConfig

from kselect.selector.base.hydra_app import check_renamed, run_app, task_overrides
from kselect.selector.config.compose import CONF_DIR, compose
from kselect.selector.evidence.evidence import Evidence
from kselect.selector.export.formats import render
from kselect.selector.measure.select import select

RENAMED = {"overlays": "write overlay=[pr48666,...] (the config group conf/overlay/)"}


def main(argv: list[str]) -> int:
    """In-process `kselect select` (tests, fuzzing): overrides -> guard, compose, validate, resolve."""
    check_renamed("select", argv, RENAMED)
    cfg = compose(argv)
    print(render(select(cfg, Evidence.load(CONF_DIR)), cfg.output, cfg.verbose, cfg))  # the conf tree's own evidence
    return 0


def task(cfg: DictConfig) -> int:
    """The Hydra app's job: the same path as main (the guard sees the overrides as typed)."""
    return main(task_overrides())


def cli() -> None:
    run_app("select", task, doc=__doc__, config_dir=CONF_DIR, config_name="config", renamed=RENAMED)


if __name__ == "__main__":
    cli()

"""Print a prompt of at least N tokens (default 1,536) under the bundled tokenizer: English words
from a fixed list, so the run is reproducible. issue #14's checks (bench/results/LOG.md) passed it to `kselect run
--prompt` to take the 31B past its 1,024-token sliding window (tests/gemma4/test_fp8_window_on_the_fa4_fork.py
checks the count and that the FA4 fork's windowed FP8 path is reached).

    python3 -m kselect.measurement.gemma4.long_prompt [N]
"""

from __future__ import annotations

import sys


WORDS = ("the kernel reads every page of the cache once and the window keeps the last thousand tokens "
         "while the full layers see everything that came before").split()


def long_prompt(tokens: int = 1536) -> str:
    """The shortest repetition of WORDS that encodes (after BOS) to at least `tokens` tokens."""
    from kselect.gemma4.checkpoint import load_tokenizer

    tok = load_tokenizer()
    words: list[str] = []
    while True:
        words.extend(WORDS)
        text = " ".join(words)
        if len(tok.encode(text).ids) + 1 >= tokens:
            return text


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1536
    print(long_prompt(n))

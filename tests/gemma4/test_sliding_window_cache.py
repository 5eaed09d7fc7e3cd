"""Sliding-window KV blocks: given back once no window can read them (table entries then point at a
zero null block), chunked prefill (Engine.max_step_tokens), and the smaller sliding cache this
allows: W - 1 + max_step_tokens tokens per sequence instead of every token (vLLM's sliding-window
manager). Numerics against HF: the trimmed cache must never change a logit."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from g4_helpers import HF_RTOL, hf_logits
from kselect.gemma4.checkpoint import build_random
from kselect.gemma4.config import SLIDING, DrafterArgs, Gemma4Args
from kselect.gemma4.drafter_init import build_random_drafter
from kselect.gemma4.engine import Engine, EngineConfig, chunk_ends, max_rel_error
from g4_helpers import simple_selection  # noqa: E402
from kselect.gemma4.speculative import SpeculativeDecoder

ROOT = Path(__file__).resolve().parents[2]
W, BLOCK = 8, 16  # the tiny configs' window; kv block


def tokens(n, seed):
    return torch.randint(3, 512, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def testchunk_ends_never_cut_an_image_span():
    assert chunk_ends(20, 0, [], 8) == [8, 16, 20]
    assert chunk_ends(20, 0, [(6, 11)], 8) == [6, 14, 20]  # ends before the span, next chunk takes it
    assert chunk_ends(20, 0, [(8, 18)], 12) == [8, 20]  # a chunk starting at a span takes it whole
    assert chunk_ends(10, 30, [(33, 36)], 4) == [3, 7, 10]  # spans are absolute positions
    with pytest.raises(ValueError, match="image span of 10 tokens > max_step_tokens=8"):
        chunk_ends(20, 0, [(8, 18)], 8)


def test_blocks_outside_the_window_go_back_and_logits_match_hf(models):
    """One 60-token prompt in chunks of 8, then 20 decode steps: after every step the sliding table
    holds only blocks a window can reach, the pool is 3 blocks (not 7 + the null block), and every
    logit is HF's."""
    model, hf = models["all"]
    eng = Engine(model, simple_selection(model.args, kv_block_size=BLOCK), EngineConfig(max_seqs=1, max_seq_len=96,
                                                                                        max_step_tokens=8))
    gc = eng.cache.groups[SLIDING]
    whole = Engine(model, simple_selection(model.args, kv_block_size=BLOCK), EngineConfig(max_seqs=1, max_seq_len=96))
    assert gc.num_blocks == math.ceil((W - 1 + 8) / BLOCK) + 1 + 1 < whole.cache.groups[SLIDING].num_blocks == 7 + 1
    seq = tokens(80, 5)
    prompt, cont = seq[:60], seq[60:]
    got = [eng.prefill([0], [prompt])[0]]

    def check_table():  # the last step's first query sat at seq_len - 1 (prefill: 56 for 59, same block)
        table = gc.tables[0]
        dead = max(0, eng.seq_lens[0] - 1 - (W - 1)) // BLOCK
        assert table[:dead] == [gc.null_block] * dead and gc.null_block not in table[dead:]
        assert gc.blocks_in_use() == len(table) - dead <= 2, table

    check_table()
    for t in cont[:-1]:
        got.append(eng.decode([0], [t])[0])
        check_table()
    assert gc.free_blocks.count(gc.null_block) == 0 and gc.k[next(iter(gc.k))][gc.null_block].abs().max() == 0
    ref = hf_logits(hf, seq)[59:79]
    assert max_rel_error(torch.stack(got), ref) < HF_RTOL


def test_chunked_batch_generate_equals_whole_prefill(models):
    """A batch of unequal lengths (one shorter than a chunk), teacher-forced, chunks of 5."""
    model, _ = models["all"]
    prompts = [tokens(n, 10 + n) for n in (41, 4, 23)]
    forced = [tokens(12, 7 + i) for i in range(3)]
    outs = []
    for step in (None, 5):
        eng = Engine(model, simple_selection(model.args, kv_block_size=BLOCK), EngineConfig(max_seqs=3, max_seq_len=56,
                                                                                            max_step_tokens=step))
        res = eng.generate(prompts, 12, forced=forced, return_logits=True, stop_at_eos=False)
        outs.append(torch.stack(res.logits))
    assert max_rel_error(outs[1], outs[0]) < 1e-5


def test_a_step_longer_than_max_step_tokens_is_refused(models):
    model, _ = models["all"]
    eng = Engine(model, simple_selection(model.args, kv_block_size=BLOCK), EngineConfig(max_seqs=1, max_seq_len=32,
                                                                                        max_step_tokens=8))
    with pytest.raises(ValueError, match="a step of 9 tokens for one sequence > max_step_tokens=8"):
        eng.extend([0], [tokens(9, 1)])
    with pytest.raises(ValueError, match="max_step_tokens must be a positive"):
        Engine(model, simple_selection(model.args, kv_block_size=BLOCK), EngineConfig(max_step_tokens=0))


def test_chunked_prefill_with_image_spans(models):
    """Vision mode: spans stay whole within a chunk; logits equal a whole-prompt prefill's."""
    model, _ = models["all"]
    prompt = tokens(30, 3)
    spans = [(5, 11), (14, 26)]  # the second is longer than the window, as long as a chunk
    got = []
    for step in (None, 12):
        eng = Engine(model, simple_selection(model.args, kv_block_size=BLOCK), EngineConfig(max_seqs=1, max_seq_len=40,
                                                                                            max_step_tokens=step))
        got.append(eng.prefill([0], [prompt], mm_spans=[spans]))
        assert eng.mm_spans[0] == spans
    assert max_rel_error(got[1], got[0]) < 1e-5


PRESET = yaml.safe_load((ROOT / "conf/model/gemma4_tiny.yaml").read_text())


def test_speculative_decoding_on_a_windowed_cache():
    """MTP with chunked prefill and trimmed sliding blocks: still token-identical to plain greedy;
    rolling back into given-back blocks is refused."""
    target = build_random(Gemma4Args.from_model_config(PRESET), seed=0, embed_std=0.07)
    drafter = build_random_drafter(DrafterArgs.from_preset(target.args, PRESET["drafter"]), seed=3,
                                   copy_from=target.embed_tokens.weight)
    sel = simple_selection(target.args, kv_block_size=BLOCK)
    prompts = [tokens(n, 40 + n) for n in (45, 13)]
    plain = Engine(target, sel, EngineConfig(max_seqs=2, max_seq_len=80)).generate(prompts, max_new_tokens=14)
    eng = Engine(target, sel, EngineConfig(max_seqs=2, max_seq_len=80, max_step_tokens=6))
    sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=4)
    assert sd.generate(prompts, max_new_tokens=14).tokens == plain.tokens
    with pytest.raises(ValueError, match="num_speculative_tokens \\+ 1 = 7 tokens > the engine's max_step_tokens=6"):
        SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=6).generate(prompts, max_new_tokens=4)
    eng.reset()
    eng.prefill([0], [prompts[0]])  # last chunk starts at 42: block 0 (< 42 - 15) is gone
    with pytest.raises(ValueError, match="gave back blocks"):
        eng.rollback(0, 20)
    eng.rollback(0, 44)


def test_main_job_prefill_chunk():
    ok = subprocess.run([sys.executable, "-m", "kselect", "run", "--prefill-chunk", "4", "--max-new-tokens", "4"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "prefill:" in ok.stdout and "numerics: not checked: every group runs TORCH_REFERENCE, the reference itself" in ok.stdout  # chunked == whole: test_chunked_prefill_* above
    # what chunking did: steps per prompt, the sliding pool (tiny: window 16, 16-token blocks, 4 sequences)
    m = re.search(r"^prefill chunks: at most 4 tokens per sequence per step \(an image span is never cut\); "
                  r"prompts of ([\d, ]+) tokens took ([\d, ]+) prefill steps$", ok.stdout, re.M)
    assert m, ok.stdout
    lens, steps = ([int(x) for x in g.split(", ")] for g in m.groups())
    assert steps == [-(-n // 4) for n in lens] and max(steps) > 1
    m = re.search(r"^sliding-window pool: (\d+) blocks of 16 tokens \([\d.]+ MiB\) for 4 sequences, sized for window - 1 "
                  r"\+ chunk = 16 - 1 \+ 4 = 19 tokens a sequence; without chunking (\d+) blocks \([\d.]+ MiB\) for "
                  r"(\d+) tokens a sequence; at most (\d+) blocks in use during the run$", ok.stdout, re.M)
    assert m, ok.stdout
    pool, whole, seq_len, peak = map(int, m.groups())
    assert pool == 4 * (-(-19 // 16) + 1) + 1 < whole == -(-4 * seq_len // 16) + 4 + 1 and 0 < peak <= pool - 1
    # an image span longer than a chunk: exit 2, one paragraph
    mm = subprocess.run([sys.executable, "-m", "kselect", "run", "--prefill-chunk", "8", "model.multimodal=true"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert mm.returncode == 2 and "Traceback" not in mm.stderr
    assert "--prefill-chunk 8: an image span of 20 tokens > max_step_tokens=8" in mm.stderr
    bad = subprocess.run([sys.executable, "-m", "kselect", "run", "--prefill-chunk", "0"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "--prefill-chunk: want a positive token count, got '0'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_long_context_bench_smoke(tmp_path):
    """kselect.measurement.gemma4.long_context on the tiny preset: the sliding pool is the window's, not the
    sequence's; chunked prefill agrees with a whole-prompt prefill."""
    import json

    from kselect.measurement.gemma4 import long_context as mod

    out = tmp_path / "lc.json"
    assert mod.main(["platform=cpu", "--context", "300", "--prefill-chunk", "32", "--new", "6", "--check",
                     "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    sw, fa = res["pools"]["sliding_window"], res["pools"]["full_attention"]
    assert sw["blocks"] == math.ceil((16 - 1 + 32) / 16) + 1 + 1  # preset window 16, chunk 32, + null block
    assert sw["blocks_in_use"] <= 2 and sw["bytes"] * 4 < sw["bytes_if_every_token"]
    assert fa["blocks"] == math.ceil(306 / 16) + 1 and fa["bytes"] == fa["bytes_if_every_token"]
    assert res["check"]["ok"] and res["check"]["max_rel_err_vs_whole_prefill"] < 1e-5

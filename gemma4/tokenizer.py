"""The bundled tokenizer: byte-level BPE with 512 ids, built deterministically (no download).

ids 0..3 are <pad>, <eos>, <bos>, <unk> (Gemma's pad/eos/bos = 0/1/2), then the 256 byte symbols,
then 252 merges learned from the small fixed corpus below. Any text round-trips.
`python -m kselect.gemma4.tokenizer` rewrites gemma4/assets/tokenizer.json.
"""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
VOCAB_SIZE = 512

CORPUS = """\
The quick brown fox jumps over the lazy dog. A language model predicts the next token of a text.
Attention lets every token look at the tokens before it; a sliding window looks only at the last few.
The kernel reads keys and values from a paged cache, one block at a time, and writes the output.
Gemma is a family of open models. Small models run on a laptop; large ones need a data centre.
Once upon a time there was a little robot who wanted to learn how to write poems about the sea.
The weather today is sunny with a light breeze from the west, and the temperature is mild.
In the beginning the universe was created. This has made a lot of people very angry.
To be, or not to be, that is the question: whether it is nobler in the mind to suffer.
def main(): print("hello, world") # a tiny program that prints a greeting and returns
1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14159 0.5 42 the answer is forty two.
Selecting the right attention kernel for each layer group depends on the head size, the
window, the cache data type and the hardware. The selector explains every choice it makes.
"""


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"built a vocabulary of {tok.get_vocab_size()}, expected {VOCAB_SIZE}")
    return tok


def main() -> None:
    out = Path(__file__).resolve().parent / "assets" / "tokenizer.json"
    build_tokenizer().save(str(out))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

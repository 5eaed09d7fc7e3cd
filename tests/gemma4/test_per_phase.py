"""Per-phase backends (objective selections): a group's prefill steps run its `prefill` path, its decode
steps the group's own backend, over one paged cache; generation is unchanged."""

from g4_helpers import simple_selection  # noqa: E402

from kselect.gemma4.engine import Engine, EngineConfig, reference_groups


def _spy(backend, log, name):
    real = backend.forward

    def forward(q, k, v, meta, layer):
        log.append((name, meta.max_seqlen_q))
        return real(q, k, v, meta, layer)

    backend.forward = forward


def test_prefill_and_decode_run_their_own_backends(models, prompts):
    model, _ = models["edge"]
    base = simple_selection(model.args, kv_block_size=32)
    # prefill views each 32-token kv block as two 16-token kernel blocks: another backend object, same cache
    groups = tuple(g.model_copy(update={"prefill": g.model_copy(update={"kernel_block_size": 16})}) for g in base.groups)
    split = base.model_copy(update={"groups": groups})
    plain = Engine(model, base, EngineConfig(max_seqs=4, max_seq_len=64)).generate(prompts, 6).tokens
    eng = Engine(model, split, EngineConfig(max_seqs=4, max_seq_len=64))
    assert all(eng.prefill_backends[k] is not eng.backends[k] for k in eng.backends)
    assert all("; prefill TORCH_REFERENCE" in v for v in eng.backend_names().values())
    log = []
    for k in eng.backends:
        _spy(eng.backends[k], log, "decode")
        _spy(eng.prefill_backends[k], log, "prefill")
    assert eng.generate(prompts, 6).tokens == plain
    assert {n for n, q in log if q > 1} == {"prefill"} and {n for n, q in log if q == 1} == {"decode"}
    # the numerics reference runs one backend for both phases
    assert all(g.prefill is None for g in reference_groups({g.kind: g for g in groups}).values())

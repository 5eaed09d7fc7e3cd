"""`kselect claims` with an axis on the command line (selector/measure/claims.py AXES): the value narrows that axis,
never repeats the key in a request (a repeat cannot be batched by the matrix Builder and cost ~24 s on a cold cache)."""
from kselect.selector.measure import claims
from kselect.selector.review.bulk import configs_of


def spy(seen):
    def compose_all(requests):
        seen.extend(requests)
        return configs_of(requests)
    return compose_all


def test_a_model_on_the_command_line_narrows_the_claims_to_it_in_batchable_requests():
    seen = []
    e4b = claims.selection_claims(["platform=sm90", "model=gemma4_e4b"], compose_all=spy(seen))
    assert seen and all(sum(o.startswith("model=") for o in r) == 1 and "model=gemma4_e4b" in r for r in seen)
    assert all(c is not None for c in configs_of(seen))  # every request composed in the Builder's batch
    every = claims.selection_claims(["platform=sm90"], compose_all=configs_of)
    assert e4b < every and any(":d512:" in c for c in e4b)  # E4B's full layers are head 512


def test_rules_and_kv_narrow_both_kinds_of_claims():
    seen = []
    claims.objective_claims(["platform=sm90", "kv_cache=fp8", "rules=vllm_0_34_0"], compose_all=spy(seen))
    assert seen and all("kv_cache=fp8" in r and "rules=vllm_0_34_0" in r and "overlay=[]" in r for r in seen)
    assert all(sum(o.startswith(("kv_cache=", "rules=")) for o in r) == 2 for r in seen)
    seen.clear()
    claims.selection_claims(["platform=sm90", "overlay=[pr48666]"], compose_all=spy(seen))
    assert {(o for o in r if o.startswith("rules=")).__next__() for r in seen} == {"rules=post_pr52987"}
    assert all("overlay=[pr48666]" in r for r in seen)

"""gemma4/host_threads.py: an engine on a GPU serves on one intra-op CPU thread unless OMP_NUM_THREADS says
otherwise; on the CPU torch's pool stays (the model's math runs there)."""

import torch

from kselect.gemma4.host_threads import serving_threads, use_serving_threads


def test_a_gpu_engine_serves_on_one_thread_unless_omp_num_threads_is_set(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert serving_threads("cuda") == 1 and serving_threads(torch.device("cuda", 0)) == 1
    assert serving_threads("cpu") is None
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert serving_threads("cuda") is None


def test_use_serving_threads_sets_torch_only_for_a_gpu(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert use_serving_threads("cpu") == 2 and torch.get_num_threads() == 2
        assert use_serving_threads("cuda") == 1 and torch.get_num_threads() == 1  # no device is touched
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert use_serving_threads("cuda") == 2
    finally:
        torch.set_num_threads(before)


def test_an_engine_on_the_cpu_keeps_torchs_threads(models, monkeypatch):
    from g4_helpers import simple_selection

    from kselect.gemma4.engine import Engine, EngineConfig

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    model = models["edge"][0]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        e = Engine(model, simple_selection(model.args), EngineConfig(max_seqs=1, max_seq_len=16))
        assert e.host_threads == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

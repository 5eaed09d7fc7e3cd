"""The conformance runner (kselect/measurement/conformance.py) on CPU: claim parsing, run parameters from the
selector, verdicts, and the CLI on a few reference/Triton claims."""

import pytest
import torch
import yaml

from kselect.commands import conformance as conformance_command
from kselect.selector.base.cli_errors import call_main
from kselect.measurement import conformance
from kselect.measurement.conformance import check_claim
from kselect.selector.measure.claims import claim_runs
from kselect.selector.config.vocab import parse_claim


def test_parse():
    c = parse_claim("FLASH_ATTN_v4:fp8:d256:window")
    assert (c.backend, c.version, c.dtype, c.head, c.feature) == ("FLASH_ATTN", 4, "fp8", 256, "window")
    c = parse_claim("TRITON_ATTN:fp8_e5m2:d512:page64")
    assert (c.backend, c.version, c.dtype, c.head, c.feature) == ("TRITON_ATTN", None, "fp8_e5m2", 512, "page64")
    assert parse_claim("TORCH_REFERENCE:bf16:d64:quant_query").fp8
    for bad in ["FLASH_ATTN_v4:int8:d256:window", "TRITON_ATTN:bf16:256:window", "TRITON_ATTN:bf16:d64:softcap"]:
        with pytest.raises(ValueError, match="bad claim id"):
            parse_claim(bad)


@pytest.mark.parametrize("claim", ["TRITON_ATTN+kselect:bf16:d64:window", "TRITON_ATTN:fp16:d64:window",
                                   "TRITON_ATTN:fp8:d64:quant_query",
                                   "TORCH_REFERENCE:fp8_e5m2:d64:mm_prefix"])
def test_verified_claims(claim):
    r = check_claim(claim, "cpu")
    assert r["status"] == "verified", r
    assert 0 <= r["rel_err"] < 6e-2


def test_refuted_and_unsupported(monkeypatch):
    from kselect.backends.reference import TorchReferenceBackend

    real = TorchReferenceBackend.forward
    monkeypatch.setattr(TorchReferenceBackend, "forward", lambda self, q, *a: real(self, q, *a) * 1.1)
    r = check_claim("TORCH_REFERENCE:fp32:d64:sinks", "cpu")
    assert r["status"] == "refuted" and r["rel_err"] > 1e-4
    monkeypatch.setattr(TorchReferenceBackend, "forward", lambda self, q, *a: torch.full_like(q, float("nan")))
    assert check_claim("TORCH_REFERENCE:fp32:d64:causal", "cpu")["status"] == "refuted"

    def boom(self, *a):
        raise RuntimeError("mha_fwd: head dim unsupported\nsecond line")
    monkeypatch.setattr(TorchReferenceBackend, "forward", boom)
    r = check_claim("TORCH_REFERENCE:bf16:d64:causal", "cpu")
    assert r == dict(status="unsupported", rel_err=None, detail="RuntimeError: mha_fwd: head dim unsupported")
    r = check_claim("FLASHINFER:bf16:d64:causal", "cpu")
    assert r["status"] == "unavailable" and "flashinfer" in r["detail"].lower()


def test_cli_writes_yaml(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text("- TORCH_REFERENCE:bf16:d64:window\n- TRITON_ATTN:fp32:d64:page32\n")
    out = tmp_path / "res" / "conf.yaml"
    assert conformance_command.main(["--claims", str(claims), "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["gpu"] == "cpu_ci" and set(doc) == {"gpu", "torch", "measured", "kernel_versions", "commit", "command",
                                                   "claim_count", "claims"}
    assert "triton" in doc["kernel_versions"]  # the libraries the claims ran (tests/kselect/test_measured_versions.py)
    assert [v["status"] for v in doc["claims"].values()] == ["verified", "verified"]


@pytest.mark.parametrize("claim,say", [
    ("NOPE:bf16:d64:causal", "no backend 'NOPE' in the capabilities; allowed: "),
    ("FLASH_ATTN:bf16:d64:causal", "a FLASH_ATTN claim names its version"),
    ("FLASHINFER_v3:bf16:d64:causal", "only FLASH_ATTN takes a version (_v3); allowed: FLASHINFER:bf16:d64:causal"),
])  # fmt: skip
def test_a_claim_no_file_could_hold_is_refused_before_anything_runs(claim, say, tmp_path, capsys):
    # before: a typo ran, and was written into the file as `unsupported` or `unavailable`, exit 0
    out = tmp_path / "conf.yaml"
    assert call_main(conformance_command.main, ["--claims", f"TORCH_REFERENCE:bf16:d64:window,{claim}", "--gpu-name",
                                                "cpu_ci", "--device", "cpu", "--out", str(out)]) == 2
    out_, err = capsys.readouterr()
    assert say in err and claim in err and "Traceback" not in err, err
    assert not out.exists() and "[1/" not in out_


def test_missing_runs_only_claims_the_file_lacks(tmp_path, capsys):
    out = tmp_path / "conf.yaml"
    assert conformance_command.main(["--claims", "TORCH_REFERENCE:bf16:d64:window", "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out)]) == 0
    before = yaml.safe_load(out.read_text())["claims"]["TORCH_REFERENCE:bf16:d64:window"]
    capsys.readouterr()
    assert conformance_command.main(["--claims", "TORCH_REFERENCE:bf16:d64:window,TORCH_REFERENCE:bf16:d64:page32",
                             "--gpu-name", "cpu_ci", "--device", "cpu", "--out", str(out), "--missing"]) == 0
    log = capsys.readouterr().out
    assert "[1/1] TORCH_REFERENCE:bf16:d64:page32" in log and "d64:window " not in log.split("merging")[1].split("\n", 1)[1]
    doc = yaml.safe_load(out.read_text())
    kept = doc["claims"]["TORCH_REFERENCE:bf16:d64:window"]
    assert doc["claim_count"] == 2 and {k: kept[k] for k in before} == before  # kept as measured, not re-run


def test_families_and_parallel_cli(tmp_path):
    ids = ["TRITON_ATTN:fp32:d64:page32", "TORCH_REFERENCE:bf16:d64:window", "TRITON_ATTN:fp32:d64:causal",
           "FLASHINFER:bf16:d64:causal"]
    assert conformance.families(ids + ["nope"]) == [[ids[0], ids[2]], [ids[1]], [ids[3]], ["nope"]]
    out = tmp_path / "conf.yaml"
    assert conformance_command.main(["--claims", ",".join(ids), "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out), "--jobs", "2"]) == 0
    doc = yaml.safe_load(out.read_text())
    assert list(doc["claims"]) == ids  # input order, although families finish in any order
    assert [doc["claims"][i]["status"] for i in ids] == ["verified", "verified", "verified", "unavailable"]
    assert doc["claim_count"] == 4


ABORTING_FA3 = '''
import os
from kselect.kernels.reference import paged_attention

def flash_attn_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, page_table, cu_seqlens_q, softmax_scale,
                            causal, window_size, **_):
    if window_size == (-1, -1):
        os.abort()  # what a stable-ABI C++ check failure does to the process
    return paged_attention(q, k_cache, v_cache, cu_seqlens_q, cache_seqlens, page_table, softmax_scale,
                           causal=causal, window_left=window_size[0])
'''


def test_a_kernel_that_kills_its_process_costs_only_its_claims(tmp_path, monkeypatch):
    """--jobs: the family's process dies, its claims are re-run one by one; the aborting one is refuted."""
    (tmp_path / "flash_attn_interface.py").write_text(ABORTING_FA3)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawn children get the parent's sys.path
    monkeypatch.setenv("KSELECT_FA3_BUILD", "upstream")
    ids = ["FLASH_ATTN_v3:fp32:d64:causal", "FLASH_ATTN_v3:fp32:d64:window", "TORCH_REFERENCE:fp32:d64:causal"]
    out = tmp_path / "conf.yaml"
    assert conformance_command.main(["--claims", ",".join(ids), "--gpu-name", "cpu_ci", "--device", "cpu",
                             "--out", str(out), "--jobs", "2"]) == 0
    claims = yaml.safe_load(out.read_text())["claims"]
    assert claims[ids[0]] == dict(status="refuted", rel_err=None, detail=conformance.DIED)
    assert claims[ids[1]]["status"] == "verified" and "flash_attn_3" in claims[ids[1]]["kernel"]
    assert claims[ids[2]]["status"] == "verified" and "kernel" not in claims[ids[2]]


@pytest.mark.parametrize("backend,per_head", [("FLASHINFER", False), ("TRITON_ATTN", False), ("FLASH_ATTN", True),
                                              ("NOT_DECLARED", False)])
def test_fp8_cases_use_the_declared_scale_granularity(backend, per_head):
    """capabilities.<backend>.per_head_quant_scales decides [B, Hkv] descales vs one per layer."""
    claim = f"{backend}:fp8:d64:causal"
    if backend == "NOT_DECLARED":
        with pytest.raises(ValueError, match="no backend NOT_DECLARED"):
            claim_runs([claim], ["platform=sm90"])
        return
    run = claim_runs([claim], ["platform=sm90"])[claim]
    assert run.per_head_scales is per_head
    cases = conformance._cases(parse_claim(claim), run, "cpu")
    assert all(c.k_descale.dim() == (2 if per_head else 0) for c in cases)


def test_run_parameters_come_from_the_selection_of_the_path():
    """FA4's FP8 path on SM90 exists only under #48666, whose rules dequantize K/V in the kernel on
    64-token pages; FA3 quantizes q; a quant_query claim runs with quantized q by definition."""
    runs = claim_runs(["FLASH_ATTN_v4:fp8:d256:window", "FLASH_ATTN_v3:fp8:d256:causal", "FLASHINFER:fp8:d512:page32",
                       "TRITON_ATTN:fp8:d256:quant_query", "FLASH_ATTN_v4:bf16:d512:causal"], ["platform=sm90"])  # fmt: skip
    assert (runs["FLASH_ATTN_v4:fp8:d256:window"].descale, runs["FLASH_ATTN_v4:fp8:d256:window"].page) == ("kv_dequant", 64)
    assert "overlay=[pr48666]" in runs["FLASH_ATTN_v4:fp8:d256:window"].source
    assert runs["FLASH_ATTN_v3:fp8:d256:causal"].descale == "q_k_v"
    assert (runs["FLASHINFER:fp8:d512:page32"].descale, runs["FLASHINFER:fp8:d512:page32"].page) == ("k_v", 32)
    assert runs["TRITON_ATTN:fp8:d256:quant_query"].descale == "q_k_v"
    assert runs["FLASH_ATTN_v4:bf16:d512:causal"].descale == "none"

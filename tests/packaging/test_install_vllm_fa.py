"""kselect/measurement/builds/install_vllm_fa.sh takes only vllm/vllm_flash_attn (FA3 library + FA4 fork, no FA2)
out of a vLLM wheel into a target directory."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "kselect" / "measurement" / "builds" / "install_vllm_fa.sh"


def test_extracts_only_the_flash_attention_subpackage(tmp_path):
    wheel = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/__init__.py", "import torch  # the real package imports everything\n")
        z.writestr("vllm/engine/llm_engine.py", "")
        z.writestr("vllm/vllm_flash_attn/__init__.py", "VERSION = 'fa3'\n")
        z.writestr("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", b"\x7fELF")
        z.writestr("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", b"\x7fELF")
        z.writestr("vllm/vllm_flash_attn/cute/interface.py", "")
    target = tmp_path / "fa"
    p = subprocess.run(["bash", str(SCRIPT), "--release", "0.33.0", str(target), str(wheel)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    files = sorted(str(f.relative_to(target)) for f in target.rglob("*") if f.is_file())
    assert (target / "KERNEL_VERSIONS").read_text() == "vllm_flash_attn: vllm-0.33.0\n"
    files.remove("KERNEL_VERSIONS")
    assert files == ["vllm/__init__.py", "vllm/vllm_flash_attn/__init__.py", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
                     "vllm/vllm_flash_attn/cute/interface.py"]  # fmt: skip
    check = subprocess.run(["python3", "-c", "import vllm.vllm_flash_attn as m; print(m.VERSION)"], cwd=tmp_path,
                           capture_output=True, text=True, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert check.stdout.strip() == "fa3", check.stderr
    bad = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr
    # the release is the wheel's: a 0.33.0 wheel for the default release (0.34.0) or --release 0.32.0 exits 2
    for args in ([str(tmp_path / "x"), str(wheel)], ["--release", "0.32.0", str(tmp_path / "x"), str(wheel)]):
        other = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
        assert other.returncode == 2 and "is not a vllm 0." in other.stderr and not (tmp_path / "x" / "vllm").exists()
    bad = subprocess.run(["bash", str(SCRIPT), "--release", "latest", str(target)], capture_output=True, text=True)
    assert bad.returncode == 2 and "allowed: a vLLM release X.Y.Z" in bad.stderr

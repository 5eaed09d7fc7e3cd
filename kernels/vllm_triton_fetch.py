"""Fetch the files kernels/vllm_triton.py runs from a vLLM release wheel into the cache, verified.

    python -m kselect.kernels.vllm_triton_fetch [--release 0.34.0] [--wheel PATH]

Downloads `vllm==<release>` (the wheel only, no dependencies) with pip and its hash pinned
(`--require-hashes`), unless --wheel names a downloaded one; extracts only FILES into
`~/.cache/kselect/vllm-triton/<release>/`; checks each file against kernels/vllm_triton_sources.json.
A complete, verified cache is left as it is (no download). Exit 2 with one paragraph on bad input or a
mismatch. Measured on a 2-core machine: about 7 s for the 239 MB 0.34.0 wheel, 1 s to extract.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from . import vllm_triton as vt

SOURCES = Path(__file__).with_name("vllm_triton_sources.json")


def pins(rel: str) -> dict:
    releases = json.loads(SOURCES.read_text())["releases"]
    if rel not in releases:
        raise ValueError(f"--release {rel!r}: {SOURCES.name} pins the files of releases {', '.join(sorted(releases))}; "
                         "add the new release's hashes there (from its wheel's RECORD) to use it")
    return releases[rel]


def verified(dest: Path, pin: dict) -> list[str]:
    """The pinned files missing or different in dest."""
    return [f for f, h in pin["files"].items()
            if not (dest / f).is_file() or hashlib.sha256((dest / f).read_bytes()).hexdigest() != h]


def download(rel: str, pin: dict, into: Path) -> Path:
    req = into / "requirements.txt"
    req.write_text(f"vllm=={rel} --hash=sha256:{pin['wheel_sha256']}\n")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--require-hashes", "-r", str(req), "-d", str(into)], check=True)
    return next(into.glob(f"vllm-{rel}-*.whl"))


def fetch(rel: str, wheel: Path | None = None) -> Path:
    pin = pins(rel)
    dest = vt.cache_root() / rel
    if not verified(dest, pin):
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        whl = wheel or download(rel, pin, tmp)
        dest.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f"{rel}.stage", dir=dest.parent))  # beside dest: the rename stays atomic
        with zipfile.ZipFile(whl) as z:
            for f in pin["files"]:
                z.extract(f, stage)
        bad = verified(stage, pin)
        if bad:
            shutil.rmtree(stage, ignore_errors=True)
            raise ValueError(f"{whl}: {', '.join(bad)} differ from the sha256 pinned for vLLM {rel} in {SOURCES.name}")
        (stage / "VERSION").write_text(rel + "\n")
        old = dest.with_name(dest.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            dest.rename(old)
        stage.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default=vt.DEFAULT_RELEASE)
    ap.add_argument("--wheel", type=Path, help="a downloaded vllm-<release>-*.whl (else pip downloads it)")
    a = ap.parse_args(argv)
    try:
        if a.wheel is not None and not a.wheel.is_file():
            raise ValueError(f"--wheel {str(a.wheel)!r}: no such file; give a downloaded vllm-{a.release}-*.whl")
        dest = fetch(a.release, a.wheel)
    except (ValueError, zipfile.BadZipFile, KeyError) as e:
        print(f"vllm_triton_fetch: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"vllm_triton_fetch: pip could not download vllm=={a.release} with its pinned hash (exit {e.returncode})",
              file=sys.stderr)
        return 2
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())

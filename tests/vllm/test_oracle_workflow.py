"""The scheduled oracle workflow (.github/workflows/kselect-oracle.yml), run locally: its
`kselect oracle` command lines, parsed from the file as the runner's shell would split them, go
through the real CLI with --dry-run against a local source tree standing for the release."""

import json
import os
import shlex
from pathlib import Path

import yaml

from kselect.commands import oracle as cli

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "kselect-oracle.yml"


def fake_tree(root: Path, version: str) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / f"vllm-{version}.dist-info").mkdir()
    (root / f"vllm-{version}.dist-info" / "METADATA").write_text(f"Name: vllm\nVersion: {version}\n")
    return root


def _commands(doc) -> list[str]:
    """Each `kselect oracle ...` command of the job's run steps (continuations joined, pipes cut)."""
    out = []
    for step in doc["jobs"]["oracle"]["steps"]:
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            line = line.split("|")[0].strip()
            if line.startswith("kselect oracle"):
                out.append(line)
    return out


def test_workflow_is_scheduled_and_runs_the_oracle():
    doc = yaml.safe_load(WORKFLOW.read_text())
    on = doc.get("on", doc.get(True))
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    assert "latest" in doc["jobs"]["oracle"]["env"]["RELEASE"]
    cmds = _commands(doc)
    assert len(cmds) == 2 and any("--dry-run" in c for c in cmds)
    steps = doc["jobs"]["oracle"]["steps"]
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") and "oracle.md" in s["run"] for s in steps)


def test_workflow_commands_parse_and_plan(tmp_path, monkeypatch, capsys):
    doc = yaml.safe_load(WORKFLOW.read_text())
    tree = fake_tree(tmp_path / "release", "0.34.0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RELEASE", str(tree))  # `latest` would ask the registry; the tree stands for it
    for cmd in _commands(doc):
        argv = [os.path.expandvars(a) for a in shlex.split(cmd)][2:]
        if "--dry-run" not in argv:
            argv.append("--dry-run")
        assert cli.main(argv) == 0, cmd
        plan = json.loads(capsys.readouterr().out)
        assert plan["version"] == "0.34.0" and plan["cells"] == 5760 and plan["to_run"] == 5760
        assert plan["out"] == "oracle.jsonl.gz"
        if "--min-agreement" in argv:
            assert plan["min_agreement"] == float(argv[argv.index("--min-agreement") + 1]) and plan["jobs"] == 2

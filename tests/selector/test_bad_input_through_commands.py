"""Bad input through the real `kselect <command>` entry point (its Hydra app included): a group overridden to
null, an unknown Hydra key, a rule reading an unknown fact, a missing extra, a prompt past the context, a
drafter folder without a config, a boolean for a number (issue #40's ten inputs, which once ended in a
traceback or were accepted silently) each exit 2 with one paragraph."""

from __future__ import annotations

import json

import pytest
from kselect_inprocess import kselect_main, missing

from kselect.selector.base.cli_errors import call_main


def kselect(capsys, command: str, *argv: str) -> str:
    """stderr of `kselect command argv`, after checking the bad-input contract: exit 2, one paragraph, no traceback."""
    code = call_main(kselect_main(command), list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (code, err[-2000:], out[-500:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert err.strip() and "\n\n" not in err.strip(), err
    return err


@pytest.mark.parametrize("override,key", [
    ("model=null", "model"), ("attention=null", "attention"), ("kv_cache=null", "kv_cache"),
    ("platform=3", "platform"), ("model=1.5", "model"), ("spec_decode=true", "spec_decode"), ("model=[1]", "model"),
])  # fmt: skip
def test_a_group_overridden_to_null_or_a_number(override, key, capsys):
    # before: Hydra's `ValueError: Config group override must be a string or a list. Got NoneType`, a traceback
    argv = [override] if key == "platform" else ["platform=sm90", override]
    err = kselect(capsys, "select", *argv)
    assert override in err and f"{key} is a config group" in err, err
    assert f"allowed: an option name of conf/{key}/" in err and ("gemma4_tiny" in err or key != "model"), err


def test_a_group_override_in_a_sweep_list(capsys):
    err = kselect(capsys, "select", "-m", "platform=sm90,3")
    assert "platform" in err and "not 3" in err


def test_an_empty_checkpoint_is_refused(capsys):
    # before: accepted, and read as "no checkpoint" (seeded random weights)
    err = kselect(capsys, "select", "platform=sm90", "model.checkpoint=''")
    assert "model.checkpoint" in err and "empty path" in err and "null" in err


@pytest.mark.parametrize("override,key", [
    ("+hydra.foo=1", "hydra.foo"), ("++hydra.job.bogus=1", "hydra.job.bogus"), ("+hydra.run.x=1", "hydra.run.x"),
])  # fmt: skip
def test_an_unknown_hydra_key_added_with_plus(override, key, capsys):
    # before: accepted silently (Hydra adds the key and never reads it)
    err = kselect(capsys, "select", "platform=sm90", override)
    assert key in err and "not a Hydra setting" in err and "allowed keys" in err


def test_free_form_hydra_mappings_still_take_new_keys(capsys):
    code = call_main(kselect_main("select"), ["platform=sm90", "+hydra.job.env_set.KSELECT_X=1"])
    assert code == 0, capsys.readouterr().err


def test_a_rule_effect_reading_an_unknown_fact(capsys):
    # before: accepted; `from: bogus.fact` read null, silently unsetting the FlashAttention version
    err = kselect(capsys, "select", "platform=sm90", "+rules.x={stage:fa_version,reason:r,flash_attn_version:{from:bogus.fact}}")
    assert "rules.x.flash_attn_version" in err and "bogus.fact" in err and "pin.flash_attn_version" in err


@pytest.mark.parametrize("when", ["{bogus.fact:1}", "{not:{bogus.fact:1}}", "{any:[{kv.dtype:fp8},{bogus.fact:1}]}"])
def test_a_rule_matcher_reading_an_unknown_fact(when, capsys):
    err = kselect(capsys, "select", "platform=sm90", f"+rules.x={{stage:reject,reason:r,when:{when}}}")
    assert "bogus.fact" in err and "rules.x.when" in err and "kv.dtype" in err


def test_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    # before: ModuleNotFoundError: No module named 'matplotlib', a traceback
    monkeypatch.chdir(tmp_path)
    with missing("matplotlib"):
        err = kselect(capsys, "plot", "matrix=smoke", "out=p")
    assert "matplotlib" in err and "pip install 'kselect[sweep]'" in err
    assert not list(tmp_path.iterdir())


def test_a_sweep_on_joblib_without_the_plugin_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with missing("hydra_plugins.hydra_joblib_launcher"):
        err = kselect(capsys, "sweep", "-m", "platform=cpu,sm90", "hydra/launcher=joblib")
    assert "hydra/launcher=joblib" in err and "pip install 'kselect[sweep]'" in err


RUN = ["platform=cpu", "--no-check", "--max-new-tokens", "1"]


@pytest.mark.parametrize("prompt,tokens", [("a " * 1100, 1102), ("é" * 600, 1201)], ids=["ascii", "multi-byte"])
def test_a_prompt_longer_than_the_context(prompt, tokens, capsys):
    # before: accepted silently, running positions past max_position_embeddings (1024 for gemma4_tiny)
    err = kselect(capsys, "run", *RUN, "--prompt", prompt)
    assert "--prompt" in err and f"is {tokens} tokens" in err and "context of 1024" in err
    assert "model.max_position_embeddings=N" in err


def test_a_prompt_longer_than_the_calibration_text_with_one_new_token(capsys):
    # before: `ValueError: prompt + max_new_tokens = 229 > max_seq_len=228` from the 2-token warm-up, a traceback
    code = call_main(kselect_main("run"), [*RUN, "--prompt", "a " * 225])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert "prefill: 227 tokens" in out


def test_zero_new_tokens_is_refused_by_the_option(capsys):
    # before: accepted by --max-new-tokens, then `ValueError: max_new_tokens=0` from the engine
    assert "--max-new-tokens" in kselect(capsys, "run", "platform=cpu", "--max-new-tokens", "0")


@pytest.mark.parametrize("files,say", [
    ({}, "no config.json"),
    ({"config.json": "{"}, "not valid JSON"),
    ({"config.json": json.dumps({"model_type": "llama"})}, "gemma4_assistant"),
], ids=["empty", "bad-json", "not-an-assistant"])  # fmt: skip
def test_drafter_folder_without_a_usable_config(files, say, tmp_path, capsys):
    # before: `DrafterError: ...: no config.json` as a traceback, after the whole run
    d = tmp_path / "assistant"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    err = kselect(capsys, "run", *RUN, "spec_decode=mtp", "--drafter", str(d))
    assert "--drafter" in err and say in err


def test_drafter_that_is_not_a_folder_or_not_read(tmp_path, capsys):
    assert "not a folder" in kselect(capsys, "run", *RUN, "spec_decode=mtp", "--drafter", str(tmp_path / "nowhere"))
    assert "spec_decode=mtp" in kselect(capsys, "run", *RUN, "--drafter", str(tmp_path))  # read only by MTP


@pytest.mark.parametrize("override", ["objective.decode.batch=true", "objective.prefill.context=true",
                                      "objective.new_tokens=true", "objective.tie=false"])
def test_no_boolean_where_an_objective_number_goes(override, capsys):
    # found by the generator (fuzz_classes.schema_value): before, true read as 1 and false as 0
    err = kselect(capsys, "select", "platform=sm90", override)
    assert override.split("=")[0] in err and "boolean" in err


@pytest.mark.parametrize("model,say", [
    ("deepseek_v3", "its config's own MTP layers (num_nextn_predict_layers=1) are not modelled"),
    ("llama3_1_8b", "model 'llama3_1_8b': has none"),
])  # fmt: skip
def test_mtp_on_a_model_without_a_modelled_drafter(model, say, capsys):
    # DeepSeek-V3 has MTP layers of its own, which vLLM serves; kselect says that it does not model them
    err = kselect(capsys, "select", "platform=sm90", f"model={model}", "spec_decode=mtp")
    assert say in err and "allowed: spec_decode=none" in err, err

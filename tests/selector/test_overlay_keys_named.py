"""An overlay set the user names is checked under the key the user wrote it with (`overlay`, `a.overlay`,
`b.overlay`), and a plot key its mode would ignore is refused: exit 2 with one paragraph. Before, `kselect plot
a.overlay=[nope]` drew the plain matrix and exited 0, and `kselect diff b.overlay=[nope]` blamed `~model`, an
override kselect composes internally."""

from __future__ import annotations

import pytest
from kselect_inprocess import kselect_main

from kselect.selector.base.cli_errors import call_main


def refused(capsys, command: str, *argv: str) -> str:
    code = call_main(kselect_main(command), list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (code, err[-2000:], out[-500:])
    assert "Traceback" not in err and err.strip() and "\n\n" not in err.strip(), err
    return err


@pytest.mark.parametrize("command,argv,key", [
    ("diff", ["b.overlay=[nope]"], "diff: b.overlay=[nope]"),
    ("diff", ["a.overlay=[pr48666,nope]"], "diff: a.overlay=[pr48666,nope]"),
    ("plot", ["b.overlay=[nope]"], "plot: b.overlay=[nope]"),
    ("plot", ["overlay=[nope]"], "plot: overlay=[nope]"),
])  # fmt: skip
def test_an_unknown_overlay_is_named_under_the_users_key(command, argv, key, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, command, *argv, *(["out=p"] if command == "plot" else []))
    assert key in err and "no overlay 'nope'" in err and "allowed: pr48666" in err, err
    assert "~model" not in err
    assert not list(tmp_path.iterdir())  # nothing drawn


@pytest.mark.parametrize("argv,say", [
    (["a.overlay=[pr48666]"], "no b side was given"),
    (["a.rules=vllm_0_33_0"], "no b side was given"),
    (["b.overlay=[pr48666]", "overlay=[pr52987]"], "a diff ignores it"),
])  # fmt: skip
def test_a_plot_key_its_mode_would_ignore_is_refused(argv, say, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, "plot", *argv, "out=p")
    assert say in err, err
    assert not list(tmp_path.iterdir())


def test_a_compose_error_names_only_the_keys_the_message_names():
    # 'vllm_0_34_0_models' in Hydra's list of overlays once named the matrix's internal `~model` as the bad key
    from kselect.selector.base.errors import KSelectError
    from kselect.selector.config.compose import compose_raw

    with pytest.raises(KSelectError) as e:
        compose_raw(["~model", "overlay=[nope]"])
    assert str(e.value).startswith("invalid config: overlay=[nope]: ") and "~model" not in str(e.value), e.value


@pytest.mark.parametrize("argv,say", [
    (["format=ids", "overlay=[nope]"], "matrix: overlay=[nope]: no overlay 'nope'"),
    (["format=ids", "overlay=[pr48666,pr48666]"], "repeats pr48666"),
    (["format=ids", "rules=nope"], "matrix: rules=nope: no such rules option"),
])  # fmt: skip
def test_matrix_ids_check_what_the_resolved_matrix_would(argv, say, capsys):
    # before: format=ids listed cells of overlay lists and rules options that select refuses, exit 0
    assert say in refused(capsys, "matrix", *argv)


@pytest.mark.parametrize("argv,say", [
    (["a.objective=nope"], "diff: a.objective=nope: the a side ([]) has no objective 'nope'; allowed: capacity"),
    (["b.objective=../config"], "diff: b.objective=../config: the b side"),
    (["rules=nope"], "diff: rules=nope: the a side"),
])  # fmt: skip
def test_diff_names_the_key_as_written(argv, say, capsys):
    # before: `objective=nope` (Hydra's key, not a.objective) and `a.rules=nope` for `rules=nope`
    assert say in refused(capsys, "diff", *argv)

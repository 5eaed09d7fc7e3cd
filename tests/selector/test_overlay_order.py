"""Contradictory overlay lists are refused (issue #15); the relations are data in conf/overlay/."""

from __future__ import annotations

import itertools
import shutil

import pytest

from kselect.selector.api import CONF_DIR, compose, compose_raw
from kselect.selector.base.cli_errors import call_main
from kselect.selector.base.errors import KSelectError
from kselect.selector.config.guard import check_overrides
from kselect.selector.review.matrix import resolve_named

SHIPPED = ["pr48666", "pr52987", "pr53175"]
# the lists that tell the seed's story: the change, its revert, the re-land, and the history
VALID = {(), ("pr48666",), ("pr48666", "pr52987"), ("pr53175",), ("pr48666", "pr52987", "pr53175")}
ALL_LISTS = [p for n in range(4) for c in itertools.combinations(SHIPPED, n) for p in itertools.permutations(c)]


@pytest.mark.parametrize("ov", ALL_LISTS, ids=lambda ov: "[" + ",".join(ov) + "]")
def test_only_the_lists_that_make_sense_compose(ov):
    text = f"overlay=[{','.join(ov)}]"
    if ov in VALID:
        check_overrides([text], CONF_DIR)
        return
    with pytest.raises(KSelectError) as e:
        check_overrides([text], CONF_DIR)
    msg = str(e.value)
    assert f"overlay: [{','.join(ov)}]" in msg and "allowed:" in msg
    assert ("reverts" in msg or "replaces" in msg) and "\n" not in msg


def test_the_refused_lists_are_the_ones_that_contradict(capsys):
    from kselect.commands.select import main

    env = ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "rules=post_pr52987"]
    for ov, says in [("[pr52987]", "pr52987 reverts pr48666, which the list does not apply before it"),
                     ("[pr52987,pr48666]", "pr52987 reverts pr48666"),
                     ("[pr48666,pr53175]", "pr53175 replaces pr48666, which is still applied before it"),
                     ("[pr53175,pr48666]", "pr53175 replaces pr48666, which comes after it"),
                     ("[pr48666,pr53175,pr52987]", "pr53175 replaces pr48666, which is still applied")]:  # fmt: skip
        assert call_main(main, [*env, f"overlay={ov}"]) == 2
        assert says in capsys.readouterr().err


def test_history_composes_to_the_re_land_alone():
    """[pr48666, pr52987, pr53175] (merge, revert, re-land) selects exactly what [pr53175] does."""
    history = resolve_named("seed_smoke", ("pr48666", "pr52987", "pr53175"))
    reland = resolve_named("seed_smoke", ("pr53175",))
    assert len(history) == len(reland) > 10
    def without_overlays(rows):  # the selections, with the environment's own record of the overlays left out
        return [(r.selection and r.selection.model_dump(exclude={"environment": {"overlays"}}), r.error) for r in rows]

    assert without_overlays(history) == without_overlays(reland)
    assert compose(["rules=post_pr52987", "platform=sm90", "overlay=[pr48666,pr52987,pr53175]"]).overlays.keys() == {
        "pr48666", "pr52987", "pr53175"}


@pytest.fixture
def conf_copy(tmp_path):
    d = tmp_path / "conf"
    shutil.copytree(CONF_DIR, d)
    return d


def _overlay(conf, name, body, relations=""):
    text = f"# @package _global_\noverlays:\n  {name}: test\noverlay_bases:\n  {name}: post_pr52987\n{relations}{body}"
    (conf / "overlay" / f"{name}.yaml").write_text(text)


KEY = "capabilities:\n  TRITON_ATTN:\n    mm_prefix: {v}\n"
ENV = ["rules=post_pr52987", "platform=sm90", "model=gemma4_31b"]


def test_two_overlays_setting_one_key_differently_are_refused_naming_the_key(conf_copy):
    _overlay(conf_copy, "tri_off", KEY.format(v="false"))
    _overlay(conf_copy, "tri_on", KEY.format(v="true"))
    _overlay(conf_copy, "tri_also_off", KEY.format(v="false"))
    with pytest.raises(KSelectError) as e:
        compose_raw([*ENV, "overlay=[tri_off,tri_on]"], conf_copy)
    msg = str(e.value)
    assert "tri_off and tri_on both set capabilities.TRITON_ATTN.mm_prefix (False, then True)" in msg
    assert "overlay_relations: {tri_on: {reverts: [tri_off]}}" in msg
    assert compose_raw([*ENV, "overlay=[tri_off,tri_also_off]"], conf_copy)["capabilities"]["TRITON_ATTN"]["mm_prefix"] is False


def test_a_declared_relation_lets_the_later_overlay_win(conf_copy):
    _overlay(conf_copy, "tri_off", KEY.format(v="false"))
    _overlay(conf_copy, "tri_on", KEY.format(v="true"), "overlay_relations:\n  tri_on: {reverts: [tri_off]}\n")
    _overlay(conf_copy, "alt", KEY.format(v="true"), "overlay_relations:\n  alt: {replaces: [tri_off]}\n")
    assert compose_raw([*ENV, "overlay=[tri_off,tri_on]"], conf_copy)["capabilities"]["TRITON_ATTN"]["mm_prefix"] is True
    assert compose_raw([*ENV, "overlay=[tri_off,tri_on,alt]"], conf_copy)["capabilities"]["TRITON_ATTN"]["mm_prefix"] is True
    for bad in ("[tri_on,tri_off]", "[tri_on]", "[tri_off,alt]", "[alt,tri_off]"):
        with pytest.raises(KSelectError, match=r"(reverts|replaces) tri_off"):
            compose_raw([*ENV, f"overlay={bad}"], conf_copy)


@pytest.mark.parametrize("relations", [
    "overlay_relations: [x]\n",
    "overlay_relations:\n  other: {reverts: [pr48666]}\n",
    "overlay_relations:\n  bad: {undoes: [pr48666]}\n",
    "overlay_relations:\n  bad: {reverts: pr48666}\n",
    "overlay_relations:\n  bad: {reverts: [../x]}\n",
    "overlay_relations:\n  bad: {replaces: [bad]}\n",
])  # fmt: skip
def test_a_malformed_declaration_names_the_file(conf_copy, relations):
    _overlay(conf_copy, "bad", "", relations)
    with pytest.raises(KSelectError, match=r"bad\.yaml: overlay_relations"):
        compose_raw([*ENV, "overlay=[bad]"], conf_copy)


@pytest.mark.parametrize("cli,argv", [
    ("matrix", ["matrix=smoke", "overlay=[pr48666,pr53175]"]),
    ("diff", ["b.overlay=[pr53175,pr48666]", "matrix=smoke"]),
    ("diff", ["a.overlay=[pr52987]", "matrix=smoke"]),
    ("claims", ["platform=sm90", "rules=post_pr52987", "overlay=[pr52987,pr48666]"]),
])  # fmt: skip
def test_every_cli_refuses_a_contradictory_list(cli, argv, capsys):
    from kselect.commands import claims, diff, matrix

    main = {"matrix": matrix.main, "diff": diff.main, "claims": claims.main}[cli]
    assert call_main(main, argv) == 2
    err = capsys.readouterr().err
    assert ("reverts" in err or "replaces" in err) and "Traceback" not in err


def test_a_conf_tree_from_before_overlay_relations_checks_repeats_only(tmp_path, capsys):
    """`kselect diff a.conf=git:<old rev>` composes overlay lists on a tree whose overlays declare no
    relations: its lists are not refused for order (that tree had no such rule), repeats still are."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    for f in (conf / "overlay").glob("*.yaml"):
        kept, skip = [], False
        for line in f.read_text().splitlines():
            if line.startswith("overlay_relations:"):
                skip = True
                continue
            if skip and line.startswith((" ", "\t")):
                continue
            skip = False
            kept.append(line)
        f.write_text("\n".join(kept) + "\n")
    check_overrides(["overlay=[pr48666,pr53175]"], conf)
    assert "declares no overlay_relations" in capsys.readouterr().err
    with pytest.raises(KSelectError, match="repeats pr48666"):
        check_overrides(["overlay=[pr48666,pr48666]"], conf)
    with pytest.raises(KSelectError, match="replaces pr48666"):  # the shipped tree still refuses it
        check_overrides(["overlay=[pr48666,pr53175]"], CONF_DIR)
